"""Writing a tune's decision (specplug.tune.session.finish): the evidence first, then the calibration,
specplug.yaml and the lock together; a pinned speculation's other settings kept."""

from __future__ import annotations

import json
import signal

import pytest

from specplug.config import load_config
from specplug.errors import SpecplugError
from specplug.tune import session
from specplug.tune import state as S
from specplug.tune import trials as T
from specplug.tune.settings import TuneSettings
from tests.tune.helpers import trial

CONFIG = """model: smollm2-135m
stack: embedded
speculation: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 2, prompt_lookup_max: 5}
"""


def _finish(tmp_path):
    cfg_path = tmp_path / "specplug.yaml"
    cfg_path.write_text(CONFIG)
    cfg = load_config(cfg_path)
    settings = TuneSettings(concurrency=[1, 4], repeats=2, ks=[3])
    rec = session.recommendation(cfg, cfg_path)
    cands = T.candidates_from(rec, settings, session.pinned_candidate(cfg))
    plan = T.build(cands[:1], settings, T.Estimator(launch_s=1, level_s={1: 1, 4: 1}))
    st = S.TuneState(fingerprint="f", settings=settings, results={
        "control": trial("control", "none", 0, {1: [100, 102], 4: [300, 302]}),
        plan.trials[1].id: trial(plan.trials[1].id, "ngram", 3, {1: [200, 202], 4: [600, 602]}),
    })
    out = tmp_path / "out"
    rep = session.finish(cfg, cfg_path, rec, plan, settings, st, out, "workload chat", {"spec": {}, "traffic": None},
                         True, True)
    return cfg_path, out, rep, plan


def test_the_decision_keeps_the_pinned_speculations_other_settings_and_ctrl_c_waits_for_the_write(
        tmp_path, monkeypatch):
    from specplug import lock as L

    seen = []
    write_lock = L.write_lock

    def spying(path):
        seen.append(signal.getsignal(signal.SIGINT))
        return write_lock(path)

    monkeypatch.setattr(L, "write_lock", spying)
    before = signal.getsignal(signal.SIGINT)
    cfg_path, out, rep, plan = _finish(tmp_path)
    # The pinned candidate's trials run with its settings, and the decision keeps them.
    assert plan.trials[1].extra == {"prompt_lookup_min": 2, "prompt_lookup_max": 5}
    from specplug.tune.runner import trial_config

    tc = trial_config(load_config(cfg_path), plan.trials[1], "embedded", 8123).speculation
    assert (tc.prompt_lookup_min, tc.prompt_lookup_max, tc.num_speculative_tokens) == (2, 5, 3)
    assert rep.decision.speculate and rep.decision.method == "ngram"
    spec = load_config(cfg_path).speculation
    assert (spec.prompt_lookup_min, spec.prompt_lookup_max, spec.num_speculative_tokens) == (2, 5, 3)
    assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGINT) is before
    assert json.loads((out / "tune.json").read_text())["calibration_file"] == str(tmp_path / "calibration.yaml")


def test_a_failed_write_back_keeps_the_evidence_and_leaves_no_calibration_behind(tmp_path, monkeypatch):
    from specplug.tune import writeback

    def fail(*a, **k):
        raise SpecplugError("specplug.yaml is read-only")

    monkeypatch.setattr(writeback, "write_decision", fail)
    with pytest.raises(SpecplugError, match="read-only"):
        _finish(tmp_path)
    assert (tmp_path / "out" / "tune.json").is_file() and (tmp_path / "out" / "tune.csv").is_file()
    assert not (tmp_path / "calibration.yaml").exists()  # not merged without specplug.yaml pointing at it
    assert (tmp_path / "specplug.yaml").read_text() == CONFIG


def test_a_failed_trials_error_is_printed_as_written_not_as_markup(tmp_path, monkeypatch, capsys):
    from specplug.tune import runner

    def cannot(*a, **k):
        raise SpecplugError("HTTP 404 from [/v1/models]: [bold]no[/]")

    monkeypatch.setattr(runner, "trial_plan", cannot)
    cfg_path = tmp_path / "specplug.yaml"
    cfg_path.write_text(CONFIG)
    settings = TuneSettings(concurrency=[1], ks=[3])
    plan = T.build([T.Candidate(method="ngram")], settings, T.Estimator(launch_s=1, level_s={1: 1}))
    st = S.TuneState(fingerprint="f", settings=settings)
    with pytest.raises(SpecplugError, match="control .speculation off. failed: cannot plan it"):  # not rich's MarkupError
        session.run_trials(load_config(cfg_path), cfg_path, plan, settings, [], st, tmp_path / "out", {1: 1})
    assert "control failed: cannot plan it: HTTP 404 from [/v1/models]: [bold]no[/]" in capsys.readouterr().err
