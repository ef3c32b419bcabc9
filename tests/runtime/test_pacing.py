"""Draft pacing: the width that maximises expected tokens per measured second, probing unknown costs, rates
shrunk towards the engine-wide pool, and an engine that stops drafting what never gets accepted."""

from __future__ import annotations

import pytest

from specplug.runtime import pacing
from specplug.runtime.pacing import DraftPacer

# Per-pass seconds by tokens fed, shaped like a CPU here (flat to 3 columns, then a jump) and like a GPU.
CPU_COST = {1: 1.0, 2: 1.1, 3: 1.17, 4: 1.6, 5: 1.63}
GPU_COST = {1: 1.0, 2: 1.01, 3: 1.02, 4: 1.03, 5: 1.04}
CODE_EDIT_RATES = [0.68, 0.43, 0.33, 0.31]


def _pacer(cost: dict[int, float]) -> DraftPacer:
    p = DraftPacer()
    for tokens, secs in cost.items():
        p.observe_pass(tokens, secs)
    return p


def _no_probe(columns: int) -> float:
    raise AssertionError(f"probed {columns} columns although every cost was known")


def test_width_follows_the_cost_curve():
    assert _pacer(CPU_COST).choose([4], [CODE_EDIT_RATES], _no_probe) == 2
    assert _pacer(GPU_COST).choose([4], [CODE_EDIT_RATES], _no_probe) == 4
    # Nothing gets accepted: drafting only costs.
    assert _pacer(GPU_COST).choose([4], [[0.0] * 4], _no_probe) == 0
    # A row's k caps what its drafts can earn, and the width never exceeds the largest k.
    assert _pacer(GPU_COST).choose([1], [CODE_EDIT_RATES[:1]], _no_probe) == 1


def test_batch_cost_is_per_token_fed_and_drafter_time_counts():
    p = _pacer({2: 1.0, 4: 1.05, 6: 1.1, 8: 1.15, 10: 1.2})
    assert p.choose([4, 4], [CODE_EDIT_RATES, CODE_EDIT_RATES], _no_probe) == 4
    p.observe_draft(4, 4 * 0.5)  # a drafter costing half a target pass per column
    assert p.choose([4, 4], [CODE_EDIT_RATES, CODE_EDIT_RATES], _no_probe) < 4


def test_unknown_costs_are_probed_a_few_per_step():
    p = DraftPacer()
    probed: list[int] = []

    def probe(columns: int) -> float:
        probed.append(columns)
        return CPU_COST[columns]

    first = p.choose([4], [CODE_EDIT_RATES], probe)
    assert probed == [1, 2][: pacing.PROBES_PER_STEP] and first <= 1  # only measured widths are candidates
    p.choose([4], [CODE_EDIT_RATES], probe)
    p.choose([4], [CODE_EDIT_RATES], probe)
    assert sorted(probed) == [1, 2, 3, 4, 5]
    assert p.choose([4], [CODE_EDIT_RATES], _no_probe) == 2


def test_a_width_excluded_by_an_unlucky_probe_is_measured_again():
    p = _pacer({1: 1.0, 2: 5.0, 3: 5.0})  # widths 1 and 2 timed during a burst of load
    for _ in range(pacing.REPROBE_AFTER - 1):
        assert p.choose([2], [CODE_EDIT_RATES[:2]], _no_probe) == 0
        p.observe_pass(1, 1.0)
    fresh = dict(CPU_COST)
    probed = []

    def probe(columns: int) -> float:
        probed.append(columns)
        return fresh[columns]

    for _ in range(4):
        p.choose([2], [CODE_EDIT_RATES[:2]], probe)
        p.observe_pass(1, 1.0)
    assert 2 in probed and 3 in probed
    assert p.choose([2], [CODE_EDIT_RATES[:2]], probe) == 2


def test_rates_shrink_towards_the_pool():
    p = DraftPacer()
    for _ in range(50):
        p.observe_acceptance(2, 0)  # the engine so far: nothing accepted
    fresh = p.rates([], [], 2)
    assert fresh[0] < 0.1
    # A row with its own long record of acceptance keeps (most of) it.
    own = p.rates([100, 100], [90, 80], 2)
    assert own[0] > 0.85 and own[1] > 0.75


def test_faster_timings_are_believed_at_once_slower_ones_slowly():
    p = DraftPacer()
    p.observe_pass(1, 1.0)
    p.observe_pass(1, 3.0)  # a burst of load from another process
    assert p.cost[1] < 1.5
    p.observe_pass(1, 0.5)
    assert p.cost[1] == 0.5  # believed at once


def test_engine_stops_drafting_what_is_never_accepted():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine
    from specplug.runtime.proposers import DraftModelProposer
    from specplug.runtime.tiny import tiny_llama

    target, stranger = tiny_llama(layers=3, seed=0), tiny_llama(layers=3, seed=7)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    params = GenerationParams(max_new_tokens=60)
    drafted = {}
    for paced in (False, True):
        eng = SpeculativeEngine(target, proposer_factory=lambda: DraftModelProposer(stranger, torch.device("cpu")),
                                k=4, eos_token_ids=[], paced=paced)
        drafted[paced] = sum(r.stats.drafted for r in eng.generate(prompts, params))
    assert drafted[True] < drafted[False] / 2


def test_costs_between_measured_sizes_are_interpolated_not_probed():
    p = _pacer({4: 1.0, 8: 2.0})
    assert p.estimate(6) == pytest.approx(1.5)
    assert p.estimate(2) is None and p.estimate(9) is None
    probed = []

    def probe(columns: int) -> float:
        probed.append(columns)
        return 3.0

    # A batch of 2 (4 rows before, say): widths 0..3 feed 2, 4, 6, 8 tokens; only 2 is outside what was measured.
    p.choose([3, 3], [CODE_EDIT_RATES[:3]] * 2, probe)
    assert probed == [1]
