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


@pytest.mark.parametrize(("trial_s", "ran"), [(60.0, 3), (80.0, 2)])
def test_the_run_stops_before_a_trial_that_would_end_past_the_budget(tmp_path, monkeypatch, capsys, trial_s, ran):
    """A fake clock and runner: trials estimated at 60 s take ``trial_s``. The plan fits three in 200 s; when they
    run long, the third is not started, so the tune ends within its budget (never more than one trial's overrun)."""
    from specplug.tune import runner

    now = [1000.0]

    def fake_run(trial_, tplan, settings, prompts, out_dir, tick):
        now[0] += trial_s
        return trial(trial_.id, trial_.method, trial_.k, {1: [100.0]})

    monkeypatch.setattr(runner, "trial_plan", lambda *a, **k: None)
    monkeypatch.setattr(runner, "free_port", lambda: 0)
    monkeypatch.setattr(runner, "run_trial", fake_run)
    cfg_path = tmp_path / "specplug.yaml"
    cfg_path.write_text(CONFIG)
    settings = TuneSettings(concurrency=[1], ks=[1, 2, 3], repeats=1, check_prompts=0, budget_s=200)
    plan = T.build([T.Candidate(method="ngram", predicted_k=3)], settings, T.Estimator(launch_s=10, level_s={1: 50}),
                   settings.budget_s)
    assert [t.id for t in plan.trials] == ["control", "ngram-k3", "ngram-k2"] and plan.total_s == 180
    st = S.TuneState(fingerprint="f", settings=settings)
    ok = session.run_trials(load_config(cfg_path), cfg_path, plan, settings, [], st, tmp_path / "out", {1: 1},
                            clock=lambda: now[0])
    spent = now[0] - 1000.0
    assert ok and len(st.results) == ran and spent <= 200 + max(trial_s - 60, 0)
    assert [t.id for t in plan.trials] == ["control", "ngram-k3", "ngram-k2"][:ran]
    if ran < 3:
        assert "ngram-k2" in [t.id for t in plan.dropped]
        assert "--budget 3m20s: stopped after 2m40s" in capsys.readouterr().err
