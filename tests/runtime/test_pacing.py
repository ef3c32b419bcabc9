"""Draft pacing: the width that maximises expected tokens per measured second, probing unknown costs, rates
shrunk towards the engine-wide pool, and an engine that stops drafting what never gets accepted."""

from __future__ import annotations

import random

import pytest

from specplug.runtime import pacing
from specplug.runtime.pacing import DraftPacer

# Per-pass seconds by tokens fed, shaped like a CPU here (flat to 3 columns, then a jump) and like a GPU.
CPU_COST = {1: 1.0, 2: 1.1, 3: 1.17, 4: 1.6, 5: 1.63}
GPU_COST = {1: 1.0, 2: 1.01, 3: 1.02, 4: 1.03, 5: 1.04}
CODE_EDIT_RATES = [0.68, 0.43, 0.33, 0.31]


def _timed(p: DraftPacer, cost: dict[int, float]) -> DraftPacer:
    """``p`` with these pass costs measured: each size run twice (its first pass is a warm-up)."""
    for tokens, secs in cost.items():
        p.observe_pass(tokens, secs)
        p.observe_pass(tokens, secs)
    return p


def _pacer(cost: dict[int, float]) -> DraftPacer:
    return _timed(DraftPacer(), cost)


def _no_probe(columns: int) -> float:
    raise AssertionError(f"probed {columns} columns although every cost was known")


def test_width_follows_the_cost_curve():
    assert _pacer(CPU_COST).choose([4], [CODE_EDIT_RATES]) == 2
    assert _pacer(GPU_COST).choose([4], [CODE_EDIT_RATES]) == 4
    # Nothing gets accepted: drafting only costs.
    assert _pacer(GPU_COST).choose([4], [[0.0] * 4]) == 0
    # A row's k caps what its drafts can earn, and the width never exceeds the largest k.
    assert _pacer(GPU_COST).choose([1], [CODE_EDIT_RATES[:1]]) == 1


def test_batch_cost_is_per_token_fed_and_drafter_time_counts():
    p = _pacer({2: 1.0, 4: 1.05, 6: 1.1, 8: 1.15, 10: 1.2})
    assert p.choose([4, 4], [CODE_EDIT_RATES, CODE_EDIT_RATES]) == 4
    p.observe_draft(4, 4 * 0.5)  # a drafter costing half a target pass per column
    assert p.choose([4, 4], [CODE_EDIT_RATES, CODE_EDIT_RATES]) < 4


def test_costs_are_measured_by_choosing_the_width_for_a_real_pass():
    """An unmeasured width is chosen for the step (its pass gets timed), the widest first; the widths in
    between are interpolated, and measured one at a time later on if they could be the best."""
    p = _pacer({1: CPU_COST[1]})
    first = p.choose([4], [CODE_EDIT_RATES])
    assert first == 4  # one pass brackets every width
    p.observe_pass(5, CPU_COST[5])
    assert p.choose([4], [CODE_EDIT_RATES]) == 4  # that first pass was a warm-up: timed again
    p.observe_pass(5, CPU_COST[5])
    chosen = []
    for _ in range(5 * pacing.REMEASURE_EVERY):
        w = p.choose([4], [CODE_EDIT_RATES])
        chosen.append(w)
        p.observe_pass(w + 1, CPU_COST[w + 1])
    # Every width that could win got timed; width 1 cannot beat width 2 even if it cost no more than a plain
    # pass, so it is never spent on.
    assert sorted(p.cost) == [1, 3, 4, 5] and 1 not in chosen
    assert chosen.count(2) > 0.8 * len(chosen)  # and the best one, per the true costs, is what runs
    # A free proposer that found nothing wider than 2 is never made to measure a wider pass.
    q = _pacer({1: 1.0})
    assert q.choose([2, 1], [CODE_EDIT_RATES[:2], CODE_EDIT_RATES[:1]]) == 2


def test_a_drafter_that_cannot_pay_is_not_run_to_time_a_new_batch_size():
    # Timed at batch 1: the drafter costs half a plain pass per column. A batch of 16 has no timed pass yet, and
    # a width can beat plain there only if its extra tokens outweigh that half pass per column: with drafts
    # accepted 4% of the time no width can, so the plain pass is what gets timed (the drafter never runs).
    p = _pacer(CPU_COST)
    p.observe_draft(4, 4 * 0.5 * CPU_COST[1], rows=1)
    assert p.draft_ratio == pytest.approx(0.5)
    assert p.choose([4] * 16, [[0.04, 0.01, 0.0, 0.0]] * 16) == 0
    # Drafts accepted as on code-edit can pay at widths 1 and 2 (not 3 or 4): the wider of those is timed.
    assert p.choose([4] * 16, [CODE_EDIT_RATES] * 16) == 2


def _drafting_steps(p: DraftPacer, rate_at, steps: int, seed: int = 0) -> list[int]:
    """Run a costly proposer (a drafter costing 0.3 of a plain pass per column) under ``p`` for ``steps`` steps,
    a new request every 100; ``rate_at(step)`` is how often a draft is accepted then. The steps that drafted."""
    rng = random.Random(seed)
    counts: dict[int, tuple[list[int], list[int]]] = {}
    drafted = []
    for s in range(steps):
        offered, accepted = counts.setdefault(s // 100, ([], []))
        w = p.choose([4], [p.rates(offered, accepted, 4)], probe=True)
        if w:
            p.observe_draft(w, 0.3 * w, rows=1)
            drafted.append(s)
        a = 0
        while a < w and rng.random() < rate_at(s):
            a += 1
        p.observe_acceptance(w, a)
        pacing.record(offered, accepted, w, a)
    return drafted


def test_a_drafter_judged_useless_is_tried_again_and_drafts_once_it_pays():
    # The pool of acceptance rates only learns when the drafter drafts. A drafter found useless early (2% of its
    # drafts accepted) was never run again, so when the text turned to what it predicts well (90%) nothing
    # changed. Probes now try it now and then, at a cost of a few steps.
    p = _pacer(GPU_COST)
    drafted = _drafting_steps(p, lambda s: 0.02 if s < 1500 else 0.9, 3000)
    useless = [s for s in drafted if 100 <= s < 1500]
    assert len(useless) <= 3 * pacing.PROBE_STEPS  # probes only, ever rarer
    assert sum(s >= 2000 for s in drafted) >= 0.8 * 1000  # without probes: 0


def test_a_width_timed_during_a_burst_of_load_is_measured_again():
    p = _pacer({1: 1.0, 2: 5.0, 3: 5.0})  # widths 1 and 2 timed during a burst of load
    chosen = []
    for _ in range(2 * pacing.REMEASURE_EVERY + 1):
        w = p.choose([2], [CODE_EDIT_RATES[:2]])
        chosen.append(w)
        p.observe_pass(w + 1, CPU_COST[w + 1])
    assert 1 in chosen and 2 in chosen
    assert p.choose([2], [CODE_EDIT_RATES[:2]]) == 2


def test_a_plain_pass_timed_during_a_burst_of_load_does_not_make_drafts_look_cheap():
    # Drafts that are rarely accepted only pay if a wider pass costs next to nothing. A plain pass timed during a
    # burst (3.0 against a true 1.0) made every width look cheap beside it, and the pacer, drafting ever since,
    # never timed the plain pass again. It stays a candidate for re-timing.
    weak = [0.08, 0.02, 0.01, 0.0]
    p = _pacer({**CPU_COST, 1: 3.0})
    chosen = []
    for _ in range(2 * pacing.REMEASURE_EVERY + 1):
        w = p.choose([4], [weak])
        chosen.append(w)
        p.observe_pass(w + 1, CPU_COST[w + 1])
    assert p.cost[1] == CPU_COST[1]
    assert chosen[-pacing.REMEASURE_EVERY :].count(0) >= pacing.REMEASURE_EVERY - 1  # (one may re-time a width)


def test_first_passes_of_each_size_pay_one_time_costs_and_mislead_nothing():
    # On a GPU the first passes of a new size load kernels (an H200 took 55 ms where it later took 12-14). A
    # pacer that believed them kept drafting nothing there; it must settle on the best width at once.
    p = DraftPacer()
    seen: set[int] = set()
    chosen = []
    for _ in range(3 * pacing.REMEASURE_EVERY):
        w = p.choose([4], [CODE_EDIT_RATES])
        chosen.append(w)
        p.observe_pass(w + 1, GPU_COST[w + 1] * (4.6 if w + 1 not in seen else 1.0))
        seen.add(w + 1)
    assert chosen[:2] == [4, 4]  # the widest, twice: its first pass is a warm-up
    assert chosen[-2 * pacing.REMEASURE_EVERY :].count(4) >= 2 * pacing.REMEASURE_EVERY - 2


def test_a_size_timed_slow_below_the_best_is_timed_again():
    # Sizes timed during a burst of load (2 and 3 tokens: 5x their true cost) must not hide the sizes above them
    # from re-timing: width 2 (3 tokens) is the best on this CPU's curve, and only re-timing shows it.
    p = _pacer({**CPU_COST, 2: 5.0, 3: 5.0})
    chosen = []
    for _ in range(4 * pacing.REMEASURE_EVERY):
        w = p.choose([4], [CODE_EDIT_RATES])
        chosen.append(w)
        p.observe_pass(w + 1, CPU_COST[w + 1])
    assert p.cost[3] == CPU_COST[3]
    assert chosen[-pacing.REMEASURE_EVERY :].count(2) >= pacing.REMEASURE_EVERY - 1


def test_drafting_must_beat_plain_decoding_by_a_margin():
    # Free chat here: a draft's first token accepted about a quarter of the time, and a 2-token pass costing
    # 1.2x a plain one, so drafting one token promises +2% and delivered less than nothing. Within the margin it
    # is left alone; beyond it, drafted.
    cost = {1: 1.0, 2: 1.2}
    assert _pacer(cost).choose([1], [[0.22]]) == 0  # 1.22 / 1.2: +1.7%
    assert _pacer(cost).choose([1], [[1.2 * (1 + pacing.MARGIN) - 0.99]]) == 1  # +6%
    # Between drafting widths there is no margin: the better one wins.
    assert _pacer(GPU_COST).choose([4], [CODE_EDIT_RATES]) == 4


def test_a_width_that_never_wins_its_re_timing_is_re_timed_ever_more_rarely():
    # Free chat: widths 3 and 4 could beat plain if their passes cost no more than a plain one, so they stayed
    # candidates for re-timing; re-timed every 16 steps, at 1.6x a plain pass, they cost 3% of the time.
    weak, chat_cost = [0.2, 0.07, 0.07, 0.0], {1: 1.0, 2: 1.19, 3: 1.27, 4: 1.7, 5: 1.65}  # as measured there
    p = _pacer(chat_cost)
    chosen = []
    steps = 40 * pacing.REMEASURE_EVERY
    for _ in range(steps):
        w = p.choose([4], [weak])
        chosen.append(w)
        p.observe_pass(w + 1, chat_cost[w + 1])
    assert 0 < sum(w >= 3 for w in chosen) <= 12  # 40 at a fixed gap
    assert chosen.count(0) > 0.95 * steps
    # A re-timing that shows a width is the best now resets its wait: a burst of load had inflated it.
    q = _pacer({**CPU_COST, 3: 5.0})
    for _ in range(2 * pacing.REMEASURE_EVERY + 1):
        w = q.choose([4], [CODE_EDIT_RATES])
        q.observe_pass(w + 1, CPU_COST[w + 1])
    assert q.cost[3] == CPU_COST[3] and 3 not in q.retime_gap


def test_positions_never_offered_follow_the_trend_not_a_pessimistic_prior():
    """Text that copies long runs: the first two positions are accepted ~90%/80% and the pacer chose width 2
    so far. Positions 3 and 4 must not look hopeless just because they were never offered."""
    p = DraftPacer()
    for i in range(40):
        p.observe_acceptance(2, 2 if i % 5 else 0)
    rates = p.rates([40, 40], [36, 32], 4)
    assert rates[2] > 0.6 and rates[3] > 0.5
    assert rates == sorted(rates, reverse=True)
    assert _pacer(GPU_COST).choose([4], [rates]) == 4


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
    p.observe_pass(1, 40.0)  # the first pass of a size is a warm-up, not believed
    assert p.estimate(1) is None
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


def test_costs_between_measured_sizes_are_interpolated_not_measured():
    p = _pacer({4: 1.0, 8: 2.0})
    assert p.estimate(6) == pytest.approx(1.5)
    assert p.estimate(2) is None and p.estimate(9) is None
    # A batch of 2 (4 rows before, say): widths 0..3 feed 2, 4, 6, 8 tokens; only 2 is outside what was measured.
    assert p.choose([3, 3], [CODE_EDIT_RATES[:3]] * 2) == 0
    p.observe_pass(2, 0.9)
    assert p.choose([3, 3], [CODE_EDIT_RATES[:3]] * 2) == 0  # after its warm-up, timed for real
    p.observe_pass(2, 0.9)
    assert p.choose([3, 3], [CODE_EDIT_RATES[:3]] * 2) in (1, 2, 3)


def _tiny_reference(n_new: int):
    """A tiny model, a prompt and the model's own greedy continuation of it (prompt included)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specplug.runtime.tiny import tiny_llama

    target = tiny_llama(layers=2, seed=2)
    prompt = [5, 6, 7, 8]
    ref = target.generate(torch.tensor([prompt]), max_new_tokens=n_new, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[0].tolist()
    return target, prompt, ref


class _Scripted:
    """A free proposer whose drafts a test scripts: ``script(history)`` gives (tokens, match length)."""

    name, free = "scripted", True

    def __init__(self, script) -> None:
        self.script, self.match = script, 0

    def start(self, prompts):
        return None

    def propose(self, histories, ks, warp, generator):
        import torch

        from specplug.runtime.proposers import Draft

        nxt, self.match = self.script(histories[0])
        tokens = torch.tensor([nxt], dtype=torch.long).reshape(1, -1)
        return Draft(tokens, torch.tensor([len(nxt)]), None, [self.match if nxt else 0])

    def commit(self, n_accepted, next_tokens):
        return None

    def select(self, rows):
        return None


def test_free_drafts_are_scored_past_the_width_sent_to_the_target():
    # A free proposer's draft is scored against the tokens emitted after it, so the pacer learns positions it
    # never sent: here the proposer knows the next two tokens and gets the third wrong, and the pacer is held
    # to width 1; the pool must still see positions 2 and 3 (accepted and rejected) exactly.
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine

    n_new = 30
    target, prompt, ref = _tiny_reference(n_new)

    def oracle(h):
        nxt = ref[len(h) : len(h) + 3]
        if len(nxt) == 3:
            nxt[2] = (nxt[2] + 1) % 64  # the third token is always wrong
        return nxt, 2

    eng = SpeculativeEngine(target, proposer_factory=lambda: _Scripted(oracle), k=3, eos_token_ids=[], paced=True)
    assert eng.pacer.packed  # the lean decoder computes only real tokens: the pacer chooses per row
    eng.pacer.choose_rows = lambda ks, rates, weights=None: [min(1, k) for k in ks]
    out = eng.generate([prompt], GenerationParams(max_new_tokens=n_new))[0]
    assert out.tokens == ref[len(prompt) :]
    assert len(out.stats.drafted_per_position) == 1  # what was sent to the target: width 1
    offered, accepted = eng.pacer.pool_offered, eng.pacer.pool_accepted
    assert len(offered) == 3 and offered[2] > 0
    assert accepted[0] == offered[0] and accepted[1] == offered[1] and accepted[2] == 0


def test_rates_are_kept_per_run_state():
    # Drafts made right after a draft matched in full (copying a run) are accepted far more often than the
    # rest; each state's pool keeps its own rates, shrunk towards the whole pool while it has few drafts.
    p = DraftPacer()
    for _ in range(40):
        p.observe_acceptance(4, 4, state=1)
        p.observe_acceptance(4, 0, state=0)
    run, other = p.pool_rates(4, 1), p.pool_rates(4, 0)
    assert run[3] > 0.85 and other[0] < 0.15
    assert p.pool_rates(4)[0] == pytest.approx(0.5, abs=0.05)  # the whole pool mixes both
    assert p.rates([2, 2, 2, 2], [2, 2, 2, 2], 4, state=1)[3] > p.rates([2, 2, 2, 2], [2, 2, 2, 2], 4, state=0)[3]
    fresh = p.pool_rates(4, 2)  # a state never seen takes the whole pool's rates
    assert fresh == pytest.approx(p.pool_rates(4))


def test_free_drafts_are_paced_by_how_long_a_match_found_them():
    # A draft found by a long match is surer than one found by a single token. The engine keeps their
    # acceptance apart (state: run, match length), so it goes on sending the sure drafts and stops sending the
    # weak ones, where one mixed rate would send both or neither.
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine

    n_new = 120
    target, prompt, ref = _tiny_reference(n_new)

    def matcher(h):
        # Now a "3-token match" (right), now a "1-token match" (wrong), in a fixed pseudo-random order that the
        # run state (did the previous draft match in full) does not predict.
        nxt = ref[len(h) : len(h) + 2]
        if random.Random(len(h)).random() < 0.5:
            return nxt, 3
        return [(t + 1) % 64 for t in nxt], 1

    eng = SpeculativeEngine(target, proposer_factory=lambda: _Scripted(matcher), k=2, eos_token_ids=[], paced=True)
    pacer = eng.pacer
    _timed(pacer, {1: 1.0, 2: 1.3, 3: 1.35})  # sure drafts pay, weak ones do not
    pacer.observe_pass = lambda tokens, seconds, rows=None: None  # keep that cost table
    batch = eng.start()
    choose = pacer.choose_rows
    sent: list[tuple[int, int]] = []  # (match length, width sent) per step

    def recording(ks, rates, weights=None):
        widths = choose(ks, rates, weights)
        sent.append((batch.proposer.match, widths[0]))
        return widths

    pacer.choose_rows = recording
    rid = batch.add(prompt, GenerationParams(max_new_tokens=n_new))
    for _ in batch:
        pass
    assert batch.result(rid).tokens == ref[len(prompt) :]
    late = sent[len(sent) // 2 :]
    weak = [w for m, w in late if m == 1]
    sure = [w for m, w in late if m == 3]
    assert weak and sure
    assert sum(w > 0 for w in weak) <= 2  # weak drafts are (almost) never sent
    assert sum(w == 2 for w in sure) >= 0.8 * len(sure)  # sure ones go at full width


def _compute_bound(tokens: int) -> float:
    """A CPU at a large batch: a fixed part, then every token fed costs about as much as the next."""
    return 0.02 + 0.0025 * tokens


def test_at_a_compute_bound_batch_only_sure_drafts_are_verified():
    # 16 rows: 4 copying text (their drafts nearly always accepted), 12 with weak matches.
    sizes = [1, 2, 4, 8, 16, 17, 24, 32, 48, 64, 80, 96, 128, 144]
    sure, weak = [0.97, 0.95, 0.93, 0.9], [0.2, 0.08, 0.03, 0.01]
    rates = [sure] * 4 + [weak] * 12
    packed = _timed(DraftPacer(packed=True), {t: _compute_bound(t) for t in sizes})
    widths = packed.choose_rows([4] * 16, rates)
    assert widths == [4] * 4 + [0] * 12
    # A uniform width pays for every row's padding, and no width beats plain decoding there: speculation is off.
    padded = _timed(DraftPacer(), {t: _compute_bound(t) for t in sizes})
    assert padded.choose([4] * 16, rates) == 0
    # Nothing sure: the pass stays plain.
    assert packed.choose_rows([4] * 16, [weak] * 16) == [0] * 16
    # A memory-bound pass (flat in the tokens fed) verifies every draft that has any chance.
    flat = _timed(DraftPacer(packed=True), {t: 1.0 + 0.0001 * t for t in sizes})
    assert flat.choose_rows([4, 2, 0], [sure, weak[:2], []]) == [4, 2, 0]


def test_per_row_choices_re_time_only_sizes_near_the_best():
    p = _timed(DraftPacer(packed=True), {t: _compute_bound(t) for t in (8, 12, 16, 20, 30, 40)})
    rates = [[0.97, 0.95, 0.93, 0.9]] + [[0.2, 0.08, 0.03, 0.01]] * 7
    chosen = set()
    for _ in range(20 * pacing.REMEASURE_EVERY):
        widths = p.choose_rows([4] * 8, rates)
        chosen.add(sum(widths))
        p.observe_pass(8 + sum(widths), _compute_bound(8 + sum(widths)))
    # The sure row's drafts (4 tokens) run; re-timing spends no pass on sizes far from the best (12 or more
    # drafts, most of them weak), although they were timed once and their wait runs out.
    assert 4 in chosen and max(chosen) <= 7


def test_drafts_of_rows_ahead_pay_only_while_freed_slots_get_taken():
    sizes = [1, 2, 4, 8, 16, 17, 24, 32, 48, 64, 80, 96]  # every pass size here is within what was timed
    sure = [0.97, 0.95, 0.93, 0.9]
    p = _timed(DraftPacer(packed=True), {t: _compute_bound(t) for t in sizes})
    # Closed-loop traffic: each finished request's slot is taken within a step by the next one.
    for step in range(0, 200, 10):
        p.observe_finish(step)
        p.observe_arrival(step + 1)
    remaining = [40] * 4 + [60] * 12  # the 4 copying rows are ahead of the 12 others
    weights = p.weights(remaining, 300)
    assert weights[:4] == [pytest.approx(1.0, abs=0.01)] * 4 and weights[4:] == [1.0] * 12
    assert p.choose_rows([4] * 16, [sure] * 4 + [[0.0] * 4] * 12, weights) == [4] * 4 + [0] * 12
    # A draining wave: requests finish and nobody takes their slots (the next ones reach an empty batch).
    for step in range(300, 340, 2):
        p.observe_finish(step)
    p.observe_arrival(400, 16, running=False)
    weights = p.weights(remaining, 401)
    assert weights[:4] == [pacing.LATENCY_FLOOR] * 4
    # Speeding up rows that finish before the others only adds tokens to a compute-bound pass.
    assert p.choose_rows([4] * 16, [sure] * 4 + [[0.0] * 4] * 12, weights) == [0] * 16
    # The rows that finish last still draft, and at a memory-bound pass the others do too (they finish sooner).
    assert p.choose_rows([4] * 16, [[0.0] * 4] * 4 + [sure] * 12, weights) == [0] * 4 + [4] * 12
    flat = _timed(DraftPacer(packed=True), {t: 1.0 + 0.0001 * t for t in sizes})
    assert flat.choose_rows([4] * 16, [sure] * 4 + [[0.0] * 4] * 12, weights) == [4] * 4 + [0] * 12


def test_a_packing_target_prices_a_pass_by_its_rows_not_only_its_tokens():
    # Passes over 8 rows stay cheap as drafts are added; over 16 rows the first draft tokens cost a jump.
    timings = [(8, 16, 0.060), (8, 24, 0.062), (16, 16, 0.084), (16, 24, 0.130)]

    def pacer(with_rows: bool) -> DraftPacer:
        p = DraftPacer(packed=True)
        for rows, tokens, secs in timings:
            for _ in range(2):
                p.observe_pass(tokens, secs, rows if with_rows else None)
        return p

    shaped = pacer(with_rows=True)
    assert shaped.estimate(16, rows=16) == pytest.approx(0.084)
    assert shaped.estimate(20, rows=16) == pytest.approx(0.107)
    assert shaped.estimate(20, rows=8) == pytest.approx(0.061)
    # 16 rows, two of them with a sure draft: 1.8 more tokens per pass do not pay for 16 -> 18 tokens over 16 rows.
    ks, rates = [1, 1] + [0] * 14, [[0.9], [0.9]] + [[]] * 14
    assert sum(shaped.choose_rows(ks, rates)) == 0
    # Priced by tokens alone, the 8-row passes make the same drafts look cheap.
    assert sum(pacer(with_rows=False).choose_rows(ks, rates)) == 2


def test_passes_run_to_time_a_size_cost_at_most_a_small_share_of_the_time(monkeypatch):
    # A batch where drafting never pays (each token fed adds half a plain pass, a draft is accepted 30% of the time),
    # yet a free proposer keeps finding drafts of lengths not timed yet: each could pay at the cost of a plain pass,
    # so each would be run once to time it, at many times a plain pass.
    def cost(tokens: int) -> float:
        return 1.0 + 0.5 * (tokens - 1)

    def run() -> tuple[DraftPacer, float, float]:
        p = _pacer({1: cost(1), 2: cost(2)})
        total = wasted = 0.0
        for step in range(600):
            k = 2 + step % 30
            w = p.choose([k], [[0.3] * k])
            total += cost(w + 1)
            wasted += cost(w + 1) - cost(1) if p.measuring else 0.0
            p.observe_pass(w + 1, cost(w + 1))
        return p, wasted, total

    p, wasted, total = run()
    assert p.explored > pacing.EXPLORE_FREE  # it still measures, within the budget
    # The budget, after the first few passes it leaves free, overshot by one pass at most.
    assert p.explore_seconds <= pacing.EXPLORE_BUDGET * p.pass_seconds + cost(32)
    assert wasted < 0.15 * total
    monkeypatch.setattr(pacing, "EXPLORE_BUDGET", float("inf"))
    _, unbounded, total = run()
    assert unbounded > 0.5 * total  # what the same traffic cost without it
