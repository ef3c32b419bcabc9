"""The trial plan: candidates from the recommendation, fewest launches first, trimmed to the budget."""

from __future__ import annotations

from specplug.plan import Candidate as PlanCandidate
from specplug.tune.settings import TuneSettings
from specplug.tune.trials import Candidate, Estimator, build, candidates_from, ks_for


class _Plan:
    candidates = [
        PlanCandidate(method="eagle3", drafter="h/eagle3", num_speculative_tokens=3, speedup=1.9, chosen=True),
        PlanCandidate(method="ngram", num_speculative_tokens=6, speedup=1.3),
        PlanCandidate(method="suffix", num_speculative_tokens=8, speedup=0.8, ruled_out="loses at batch size 1"),
        PlanCandidate(method="mtp", ruled_out="no MTP layers"),
    ]


def test_candidates_chosen_first_then_by_prediction_and_narrowed_by_methods():
    s = TuneSettings(concurrency=[1], candidates=3)
    got = candidates_from(_Plan(), s)
    assert [c.method for c in got] == ["eagle3", "ngram", "suffix"]  # predicted to lose is still measured
    s2 = TuneSettings(concurrency=[1], methods=["ngram", "draft_model"], drafter="my/draft")
    got2 = candidates_from(_Plan(), s2)
    assert [(c.method, c.drafter) for c in got2] == [("ngram", None), ("draft_model", "my/draft")]
    assert ks_for(got[0], s) == [1, 2, 3, 4] and ks_for(got[1], s) == [1, 4, 5, 6, 7]


def test_a_named_drafter_applies_to_every_method_that_takes_one_and_no_other():
    from specplug.methods import TABLE

    s = TuneSettings(concurrency=[1], methods=[m.name for m in TABLE if m.name != "none"], drafter="my/drafter")
    got = {c.method: c.drafter for c in candidates_from(_Plan(), s)}
    # Block drafters take --drafter too (this list once lacked dflash and dspark); copy methods and MTP never do.
    assert got["dflash"] == got["dspark"] == got["eagle3"] == got["draft_model"] == "my/drafter"
    assert got["ngram"] is None and got["suffix"] is None and got["mtp"] is None


def test_deepest_k_of_each_candidate_runs_right_after_the_control_and_the_budget_trims_the_rest():
    s = TuneSettings(concurrency=[1, 4], ks=[1, 2, 3], repeats=2)
    cands = [Candidate(method="ngram", predicted_k=2), Candidate(method="draft_model", drafter="d")]
    est = Estimator(launch_s=60, level_s={1: 20, 4: 10})
    plan = build(cands, s, est)
    assert [t.id for t in plan.trials][:3] == ["control", "ngram-k3", "draft_model-d-k3"]
    assert [t.purpose for t in plan.trials[:3]] == ["control", "acceptance", "acceptance"]
    assert plan.trials[3].id == "ngram-k2"  # nearest the predicted best next
    assert plan.total_s == 7 * (60 + 2 * 30)
    small = build(cands, s, est, budget_s=400)
    assert [t.id for t in small.trials] == ["control", "ngram-k3", "draft_model-d-k3"]
    assert len(small.dropped) == 4 and "--budget left out 4" in small.notes[0]
    resumed = build(cands, s, est, budget_s=400, done={"control", "ngram-k3", "draft_model-d-k3"})
    assert len(resumed.trials) == 6  # the budget pays only for what is left to run


def test_a_budget_below_the_least_that_decides_is_refused_up_front_with_that_least():
    import pytest

    from specplug.errors import SpecplugError

    s = TuneSettings(concurrency=[1, 4], ks=[1, 2, 3], repeats=2)
    cands = [Candidate(method="ngram", predicted_k=2), Candidate(method="draft_model", drafter="d")]
    est = Estimator(launch_s=60, level_s={1: 20, 4: 10})  # 120 s a trial: control + one candidate = 4m
    with pytest.raises(SpecplugError) as exc:
        build(cands, s, est, budget_s=10)
    assert "--budget 10s is below the least that decides anything" in exc.value.message
    assert "about 4m" in exc.value.message and "Raise it to --budget 4m" in (exc.value.hint or "")
    exact = build(cands, s, est, budget_s=240)  # exactly the least: runs those two, drops the rest
    assert [t.id for t in exact.trials] == ["control", "ngram-k3"] and exact.total_s == 240
    resumed = build(cands, s, est, budget_s=10, done={"control", "ngram-k3"})  # what is done costs nothing
    assert [t.id for t in resumed.trials] == ["control", "ngram-k3"]


def test_mirrors_of_one_drafter_get_their_own_trials_and_other_ids_stay():
    s = TuneSettings(concurrency=[1], ks=[3])
    cands = [Candidate(method="eagle3", drafter="lmsys/EAGLE3-llama"), Candidate(method="eagle3", drafter="lmzheng/EAGLE3-llama"),
             Candidate(method="draft_model", drafter="org/small")]
    plan = build(cands, s, Estimator(launch_s=60, level_s={1: 20}))
    ids = [t.id for t in plan.trials]
    assert ids == ["control", "eagle3-lmsys-EAGLE3-llama-k3", "eagle3-lmzheng-EAGLE3-llama-k3", "draft_model-small-k3"]
    assert [t.candidate for t in plan.trials[1:3]] == ["eagle3(lmsys/EAGLE3-llama)", "eagle3(lmzheng/EAGLE3-llama)"]
    same = build([cands[0], Candidate(method="eagle3", drafter="lmsys/EAGLE3-llama/")], s, Estimator(launch_s=1, level_s={1: 1}))
    assert len({t.id for t in same.trials}) == 3  # even the same path twice: one trial id each
