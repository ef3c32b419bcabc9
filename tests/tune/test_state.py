"""The state file: resumable with the same settings, refused with others."""

from __future__ import annotations

import pytest

from specplug.errors import SpecplugError
from specplug.tune import state as S
from specplug.tune.settings import TuneSettings
from tests.tune.helpers import trial


def test_resume_keeps_finished_trials_and_refuses_other_settings(tmp_path):
    s = TuneSettings(concurrency=[1, 4])
    st = S.load(tmp_path, s)
    st.results["control"] = trial("control", "none", 0, {1: [10.0]})
    S.save(tmp_path, st)
    again = S.load(tmp_path, s.model_copy(update={"budget_s": 60.0}))
    assert list(again.results) == ["control"] and again.results["control"].runs[0].output_tokens_per_s == 10.0
    with pytest.raises(SpecplugError, match="max_tokens"):
        S.load(tmp_path, s.model_copy(update={"max_tokens": 7}))
    assert S.load(tmp_path, s.model_copy(update={"max_tokens": 7}), restart=True).results == {}


def test_a_damaged_state_file_is_an_error_not_a_traceback(tmp_path):
    (tmp_path / S.STATE_NAME).write_text("{not json")
    with pytest.raises(SpecplugError, match="--restart"):
        S.load(tmp_path, TuneSettings(concurrency=[1]))
