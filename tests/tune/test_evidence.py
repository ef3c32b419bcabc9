"""tune.json, tune.csv and tune.png from a decision."""

from __future__ import annotations

import csv
import io

import pytest

from specplug.tune import evidence
from specplug.tune.decide import decide, summarize
from specplug.tune.settings import TuneSettings
from specplug.tune.trials import TrialPlan
from tests.tune.helpers import trial


def _report() -> evidence.TuneReport:
    s = TuneSettings(concurrency=[1, 4], repeats=2)
    results = [trial("control", "none", 0, {1: [100, 104], 4: [300, 306]}),
               trial("ngram-k3", "ngram", 3, {1: [150, 150], 4: [290, 295]}),
               trial("eagle3-k3", "eagle3", 3, {}, status="failed")]
    summaries = summarize(results, s.concurrency, s.margin)
    return evidence.TuneReport(
        config_file="specplug.yaml", model="m", stack="vllm", stack_version="0.32.0", hardware="1 x h100",
        prompts="workload chat", settings=s, inputs={"spec": {}, "traffic": None},
        plan=TrialPlan(candidates=[], trials=[]), trials=summaries, decision=decide(summaries, s.concurrency, s.margin),
    )


def test_files_written_and_reloaded(tmp_path):
    rep = _report()
    paths = evidence.write(rep, tmp_path)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "tune.csv").read_text())))
    assert [(r["trial"], r["concurrency"]) for r in rows] == [
        ("control", "1"), ("control", "4"), ("ngram-k3", "1"), ("ngram-k3", "4"), ("eagle3-k3", "")]
    ng1 = rows[2]
    assert float(ng1["speedup"]) == pytest.approx(1.47, abs=0.01) and ng1["beats_control"] == "True"
    assert rows[3]["beats_control"] == "False" and rows[4]["status"] == "failed"
    back = evidence.load(tmp_path)
    assert back.decision.schedule == rep.decision.schedule
    assert [e.num_speculative_tokens for e in back.decision.schedule] == [3, 0]
    assert tmp_path / "tune.json" in paths


def test_plot_has_a_line_per_candidate():
    pytest.importorskip("matplotlib")
    png = evidence.plot_png(_report())
    assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert list(evidence.best_per_candidate(_report())) == ["ngram"]


def test_the_plot_names_candidates_as_the_plan_did():
    from specplug.tune.trials import Trial

    rep = _report()
    assert list(evidence.best_per_candidate(rep)) == ["ngram"]
    rep.plan.trials = [Trial(id="ngram-k3", method="ngram", k=3, candidate="ngram(mirror/x)")]
    assert list(evidence.best_per_candidate(rep)) == ["ngram(mirror/x)"]  # two mirrors stay two lines
