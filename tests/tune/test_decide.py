"""The decision: speedups against the control with their spread, the margin, and the per-batch schedule."""

from __future__ import annotations

import pytest

from specplug.tune.decide import decide, summarize
from tests.tune.helpers import trial

CONC = [1, 4, 16]


def _decide(results, margin=0.05):
    s = summarize(results, CONC, margin)
    return s, decide(s, CONC, margin)


def test_speculation_kept_where_it_beats_the_control_and_turned_off_above():
    control = trial("control", "none", 0, {1: [100, 102], 4: [300, 303], 16: [800, 808]})
    ng3 = trial("ngram-k3", "ngram", 3, {1: [150, 152], 4: [360, 362], 16: [700, 705]})
    ng1 = trial("ngram-k1", "ngram", 1, {1: [120, 121], 4: [340, 342], 16: [790, 795]})
    summaries, d = _decide([control, ng3, ng1])
    assert d.speculate and d.method == "ngram" and d.num_speculative_tokens == 3
    assert [(e.min_batch, e.max_batch, e.num_speculative_tokens) for e in d.schedule] == [(1, 15, 3), (16, None, 0)]
    assert [c.k for c in d.per_concurrency] == [3, 3, 0]
    sp = next(s for s in summaries if s.id == "ngram-k3").speedups[0]
    assert sp.speedup == pytest.approx(151 / 101, abs=1e-3) and sp.low < sp.speedup < sp.high and sp.passes


def test_a_win_inside_the_noise_does_not_count():
    control = trial("control", "none", 0, {1: [100, 130], 4: [300, 300], 16: [800, 800]})
    ng = trial("ngram-k2", "ngram", 2, {1: [125, 126], 4: [301, 302], 16: [700, 700]})
    _, d = _decide([control, ng])
    # 1.10x at concurrency 1, but the control alone moved 26% between repeats.
    assert not d.speculate
    assert "margin (5%) plus the run-to-run spread" in d.why


def test_schedule_gains_most_overall_and_k_never_grows_with_batch():
    control = trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]})
    k1 = trial("ngram-k1", "ngram", 1, {1: [130, 130], 4: [120, 120], 16: [110, 110]})
    k3 = trial("ngram-k3", "ngram", 3, {1: [120, 120], 4: [150, 150], 16: [90, 90]})
    _, d = _decide([control, k1, k3])
    # k=1 alone is best at concurrency 1, but k=3 there allows k=3 at 4, which gains more in all.
    assert [c.k for c in d.per_concurrency] == [3, 3, 1]
    assert "k=1 was faster here alone" in d.per_concurrency[0].note
    late = trial("ngram-k3", "ngram", 3, {1: [100, 100], 4: [100, 100], 16: [200, 200]})
    early = trial("ngram-k1", "ngram", 1, {1: [130, 130], 4: [100, 100], 16: [100, 100]})
    _, d2 = _decide([control, early, late])
    # Speculation cannot come back on at a larger batch once it is off: k=3 at 16 is not reachable.
    assert [c.k for c in d2.per_concurrency] == [1, 0, 0]
    assert "k=3 was faster here alone" in d2.per_concurrency[2].note


def test_mismatching_greedy_outputs_leave_the_candidate_out_and_say_so():
    control = trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]},
                    outputs=["the cat sat on the mat " * 4, "one two three four " * 4])
    bad = trial("draft_model-x-k2", "draft_model", 2, {1: [200, 200], 4: [200, 200], 16: [200, 200]},
                outputs=["a dog ran " * 8, "five six " * 8], drafter="x")
    summaries, d = _decide([control, bad])
    assert not d.speculate
    s = next(s for s in summaries if s.id == "draft_model-x-k2")
    assert s.lossless is not None and not s.lossless.ok and s.lossless.systematic == 2
    assert any("greedy outputs differ" in n for n in d.notes)


def test_best_technique_wins_and_failed_trials_are_kept_with_their_error():
    control = trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]})
    ng = trial("ngram-k2", "ngram", 2, {1: [120, 120], 4: [110, 110], 16: [90, 90]})
    dm = trial("draft_model-d-k2", "draft_model", 2, {1: [180, 180], 4: [150, 150], 16: [95, 95]}, drafter="d")
    broken = trial("eagle3-k3", "eagle3", 3, {}, status="failed")
    summaries, d = _decide([control, ng, dm, broken])
    assert (d.method, d.drafter) == ("draft_model", "d")
    assert next(s for s in summaries if s.id == "eagle3-k3").status == "failed"


def test_no_control_no_decision():
    ng = trial("ngram-k2", "ngram", 2, {1: [120, 120]})
    _, d = _decide([trial("control", "none", 0, {}, status="failed"), ng])
    assert not d.speculate and "control" in d.why
    assert not d.decided


def test_candidates_that_all_failed_are_no_evidence_and_decide_nothing():
    control = trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]})
    crashed = [trial("ngram-k3", "ngram", 3, {}, status="failed"), trial("eagle3-k3", "eagle3", 3, {}, status="failed")]
    _, d = _decide([control, *crashed])
    assert not d.decided and not d.speculate
    assert "No candidate was measured (failed: ngram-k3, eagle3-k3)" in d.why


def test_measured_candidates_decide_and_the_failed_ones_are_named():
    control = trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]})
    slower = trial("ngram-k2", "ngram", 2, {1: [90, 90], 4: [80, 80], 16: [70, 70]})
    crashed = trial("eagle3-k3", "eagle3", 3, {}, status="failed")
    _, d = _decide([control, slower, crashed])
    # Measured slower is evidence (off is written); the crash is only named, not counted against eagle3.
    assert d.decided and not d.speculate
    assert d.why.endswith("tried: ngram; failed, not measured: eagle3-k3.")
    faster = trial("ngram-k2", "ngram", 2, {1: [150, 150], 4: [150, 150], 16: [150, 150]})
    _, d2 = _decide([control, faster, crashed])
    assert d2.speculate and d2.why.endswith("; failed, not measured: eagle3-k3.")
