"""How many tokens to draft this step, chosen against what a verification pass measurably costs here.

A target pass over ``n`` columns costs very differently across hardware (nearly flat on a memory-bound GPU,
step-shaped where the BLAS switches kernels), so a fixed k either wastes passes or leaves tokens on the table.
The pacer picks the width ``w`` (drafts per row, at most each row's k) that maximises expected tokens per second:

    value(w) = sum over rows of (1 + sum_{j < min(k_row, w)} a_row[j])  /  (cost(tokens(w)) + w * draft_cost)

``a_row[j]`` is the row's rate of getting draft position j accepted (see ``DraftPacer.rates``); ``cost(m)`` the
learnt seconds of a target pass feeding ``m`` tokens; ``draft_cost`` the proposer's seconds per drafted column;
``tokens(w)`` is ``B * (w + 1)`` for a target that computes padding, and the real tokens ``B + sum min(k_row, w)``
for one that packs them (``DraftPacer.packed``); for those, passes timed over the same ``B`` rows price it first.

Drafts already made (a free proposer's) are chosen per row by ``choose_rows``, where the target packs: each draft
position is worth its acceptance rate, and a pass of ``B + m`` tokens keeps the ``m`` likeliest, every row's a
prefix of its own. At a batch that makes the pass compute-bound only the surest drafts pay for their tokens, and
a row with nothing sure costs the pass nothing.

Verification stays exact: a draft model's width is fixed before it samples, from past outcomes only, and an
n-gram draft is a deterministic function of the history, so cutting it by its length is one as well.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence

# A width timed once under a burst of load could stay excluded for good, so the one timed longest ago is re-timed
# now and then; each re-timing that does not make it the best doubles its wait, since re-timing costs passes.
REMEASURE_EVERY = 16
REMEASURE_MAX = 1024
MEASURE_UNTIMED_EVERY = 4
# Drafting must beat plain decoding by this share of expected tokens per second: the highest of noisy estimates
# leans optimistic (the winner's curse), and a loss costs real seconds while the margin forgoes at most itself.
MARGIN = 0.05
# A costly proposer judged useless is observed only when it drafts, so it is made to draft one token for
# PROBE_STEPS steps after PROBE_IDLE idle ones; the wait doubles per probe and starts over once drafting pays.
PROBE_IDLE = 256
PROBE_IDLE_MAX = 8192
PROBE_STEPS = 8
# Weights of a new timing in the moving average: other processes only ever add time, so a faster pass is
# believed at once and a slower one slowly (the cost still rises as contexts grow).
FASTER, SLOWER = 1.0, 0.1
# A request that finishes sooner frees its slot for the next one, which is worth a whole token per token it saved only
# while new requests take freed slots. When none do (a wave of requests drains), only the rows that finish last set
# when the batch is done; another row's drafts are worth their tokens times the share of freed slots taken soon
# (within REUSE_STEPS decode steps; a moving average, weight REUSE_WEIGHT), but at least LATENCY_FLOOR, since a
# request that finishes sooner is still sooner for its user.
REUSE_STEPS = 3
REUSE_WEIGHT = 0.1
LATENCY_FLOOR = 0.25
# Per-row choices re-time only sizes whose estimated value is within this share of the best: they vary by the token,
# so nearly every size gets timed as batches come and go, and re-timing a poor one costs a poor step.
RETIME_NEAR = 0.1
# Passes run to time a size may cost at most this share of all pass time beyond what the best would have: where
# drafting rarely pays each costs well over a plain pass, and unbudgeted their count grows with the traffic.
EXPLORE_BUDGET = 0.01
EXPLORE_FREE = 8  # the first such passes are not counted: learning a new device's curve takes a few
PRIOR_WEIGHT = 4.0  # pseudo-observations of the prior behind each observed rate
PRIOR_RATE = 0.5  # before anything is observed: the first draft position is accepted half the time


class DraftPacer:
    """Per-engine cost table and acceptance pool; ``choose`` returns this step's draft width."""

    def __init__(self, packed: bool = False) -> None:
        # Whether the target computes only a pass's real tokens (not the padding of rows with fewer drafts).
        self.packed = packed
        self.cost: dict[int, float] = {}  # tokens fed per pass -> seconds (moving average)
        # A target that packs: rows -> tokens fed -> seconds. The same tokens cost more spread over more rows, and
        # a pass's first draft token more than the next (the pass leaves the one-token-per-row kernels).
        self.shaped: dict[int, dict[int, float]] = {}
        self._shaped_warm: set[tuple[int, int]] = set()
        self.warmed: set[int] = set()  # pass sizes run once already (see observe_pass)
        self.timed_at: dict[int, int] = {}  # tokens fed per pass -> step of its latest timing
        self.retime_gap: dict[int, int] = {}  # tokens fed per pass -> steps its next re-timing waits
        self.steps = 0
        self.explored_at = 0  # step of the latest width chosen to be measured
        self.measuring = False  # the latest choice was made to measure its cost
        self.pass_seconds = 0.0  # every pass timed (see EXPLORE_BUDGET)
        self.explore_seconds = 0.0  # what passes run to measure cost beyond the best option's estimate
        self.explored = 0  # passes run to measure cost
        self._best_estimate: float | None = None  # the best's estimate, while a pass chosen to measure is due
        self.idle = 0  # steps since a costly proposer last drafted (see PROBE_IDLE)
        self.probe_idle = PROBE_IDLE
        self.probing = 0  # steps left in the current probe
        self.draft_cost = 0.0  # seconds per drafted column
        self.draft_ratio = 0.0  # the same over a plain target pass's seconds at the same batch
        self.pool_offered: list[int] = []  # per draft position: row-steps allowed to draft that far
        self.pool_accepted: list[int] = []
        # The same per state a draft was made in (see DraftPacer.rates), each shrunk towards the whole pool.
        self.state_pools: dict[Hashable, tuple[list[int], list[int]]] = {}
        self.reuse = 1.0  # the share of freed slots a new request took soon after (see REUSE_STEPS)
        self._freed: list[int] = []  # decode steps at which finished requests freed slots not yet taken

    # -- learning -------------------------------------------------------------------------------------------
    def observe_pass(self, tokens: int, seconds: float, rows: int | None = None) -> None:
        """A pass feeding ``tokens`` (over ``rows`` rows, where known) took ``seconds``. The first pass of each size
        pays one-time costs (lazy kernel loading, per-shape kernel choice) and is not believed; until a second
        timing the size is unmeasured."""
        self.pass_seconds += seconds
        if self._best_estimate is not None:  # the pass a choice made to measure (one per choice)
            self.explored += 1
            if self.explored > EXPLORE_FREE:
                self.explore_seconds += max(0.0, seconds - self._best_estimate)
            self._best_estimate = None
        if rows and self.packed:
            if (rows, tokens) in self._shaped_warm:
                table = self.shaped.setdefault(rows, {})
                table[tokens] = _average(table.get(tokens), seconds)
            else:
                self._shaped_warm.add((rows, tokens))
        if tokens not in self.warmed:
            self.warmed.add(tokens)
            return
        self.cost[tokens] = _average(self.cost.get(tokens), seconds)
        self.timed_at[tokens] = self.steps

    def observe_draft(self, columns: int, seconds: float, rows: int = 1) -> None:
        """The proposer drafted ``columns`` for a batch of ``rows`` in ``seconds`` (steady drafting only: not a
        catch-up on history it skipped). Its cost over a plain target pass at that batch is kept as well, as a
        ratio that carries over to batch sizes the proposer has not drafted at."""
        if columns <= 0:
            return
        per_column = seconds / columns
        self.draft_cost = _average(self.draft_cost or None, per_column)
        if plain := self.estimate(rows, rows):
            self.draft_ratio = _average(self.draft_ratio or None, per_column / plain)

    def observe_acceptance(self, offered: int, accepted: int, state: Hashable | None = None) -> None:
        """A row was allowed ``offered`` drafts this step and got ``accepted`` of them through."""
        record(self.pool_offered, self.pool_accepted, offered, accepted)
        if state is not None:
            record(*self.state_pools.setdefault(state, ([], [])), offered, accepted)

    def observe_finish(self, step: int, count: int = 1) -> None:
        """``count`` requests finished at decode step ``step``, freeing their slots."""
        self._expire(step)
        self._freed += [step] * count

    def observe_arrival(self, step: int, count: int = 1, running: bool = True) -> None:
        """``count`` requests joined at decode step ``step``: each takes a slot freed within REUSE_STEPS, if the
        batch was still ``running`` (a batch that ran dry was drained, whatever comes next)."""
        self._expire(step if running else step + REUSE_STEPS + 1)
        for _ in range(min(count, len(self._freed))):
            self._freed.pop(0)
            self.reuse += REUSE_WEIGHT * (1.0 - self.reuse)

    def _expire(self, step: int) -> None:
        while self._freed and step - self._freed[0] > REUSE_STEPS:
            self._freed.pop(0)
            self.reuse -= REUSE_WEIGHT * self.reuse

    def weights(self, remaining: Sequence[int], step: int) -> list[float]:
        """What a drafted token of each row is worth at decode step ``step``, by the tokens each row may still
        produce: 1 for the rows that may finish last, the reuse share (at least LATENCY_FLOOR) for the others."""
        self._expire(step)
        top = max(remaining, default=0)
        other = max(self.reuse, LATENCY_FLOOR)
        return [1.0 if r >= top else other for r in remaining]

    # -- deciding -------------------------------------------------------------------------------------------
    def estimate(self, tokens: int, rows: int | None = None) -> float | None:
        """Seconds for a pass feeding ``tokens``: measured, or interpolated between measured neighbours (so a batch
        shrinking by one request costs no measurement per width); None outside the measured range. The curve
        need not rise with every token (BLAS picks kernels by shape), so no bound is taken from a larger pass.
        With ``rows`` (a target that packs), passes timed over that many rows are believed first.
        """
        return self._estimator(rows)(tokens)

    def pool_rates(self, k: int, state: Hashable | None = None) -> list[float]:
        """The engine-wide acceptance rate per draft position 0..k-1 (of drafts made in ``state``, if given)."""
        whole = _shrunk(self.pool_offered, self.pool_accepted, k, None)
        if state is None:
            return whole
        return _shrunk(*self.state_pools.get(state, ((), ())), k, whole)

    def rates(
        self, offered: Sequence[int], accepted: Sequence[int], k: int, state: Hashable | None = None
    ) -> list[float]:
        """A row's acceptance rate per draft position 0..k-1, from its counters and the engine-wide pool.

        ``state`` names the circumstance the counters were kept for (the engine uses whether the row's last
        draft matched in full, and how long a match found this draft), and picks the pool to shrink to.
        """
        return _shrunk(offered, accepted, k, self.pool_rates(k, state))

    def choose(self, ks: Sequence[int], row_rates: Sequence[Sequence[float]], probe: bool = False,
               weights: Sequence[float] | None = None) -> int:
        """The width for this step: the best by the model, or now and then one whose cost needs measuring.

        Measuring runs the step's real pass at that width, and only for a width that could beat the best at its
        cheapest possible cost, so it costs at most the difference to the best. ``probe``: the proposer is costly
        and learnt about only when it drafts (see ``PROBE_IDLE``). ``weights``: what a drafted token of each row is
        worth (see ``DraftPacer.weights``; None: 1 each).
        """
        width = self._choose(ks, row_rates, weights)
        return self._probe(width, merit=not self.measuring) if probe and max(ks, default=0) else width

    def _probe(self, width: int, merit: bool) -> int:
        if width > 0:  # drafting pays, or is being timed: the proposer is observed anyway
            self.idle, self.probing = 0, 0
            if merit:
                self.probe_idle = PROBE_IDLE
            return width
        if self.probing:
            self.probing -= 1
            return 1
        self.idle += 1
        if self.idle < self.probe_idle:
            return 0
        self.idle, self.probing = 0, PROBE_STEPS - 1
        self.probe_idle = min(2 * self.probe_idle, PROBE_IDLE_MAX)
        return 1

    def _choose(self, ks: Sequence[int], row_rates: Sequence[Sequence[float]],
                weights: Sequence[float] | None = None) -> int:
        self.steps += 1
        self.measuring, self._best_estimate = False, None
        widest = max(ks, default=0)
        if widest == 0:
            return 0
        weights = weights or [1.0] * len(ks)
        gains = [sum(1.0 + wt * sum(rates[: min(k, w)]) for k, rates, wt in zip(ks, row_rates, weights, strict=True))
                 for w in range(widest + 1)]
        batch = len(ks)
        if self.packed:
            tokens = [batch + sum(min(k, w) for k in ks) for w in range(widest + 1)]
        else:
            tokens = [batch * (w + 1) for w in range(widest + 1)]
        # A wider pass costs no less than a plain one and a drafter's cost scales with the batch, so a width can pay
        # only if its gain beats plain's by the drafter's cost ratio: no timing a useless drafter at a new batch.
        pays = [w == 0 or gains[w] > gains[0] * (1.0 + w * self.draft_ratio) for w in range(widest + 1)]
        drafting = [w * self.draft_cost for w in range(widest + 1)]
        return self._pick(tokens, gains, drafting, pays, retime_near=False, rows=batch)

    def choose_rows(self, ks: Sequence[int], row_rates: Sequence[Sequence[float]],
                    weights: Sequence[float] | None = None) -> list[int]:
        """Per-row widths for drafts already made (``ks[i]`` found for row i), for a target that packs: the
        ``m`` draft positions worth most over all rows (acceptance rate times the row's weight, see ``choose``),
        ``m`` chosen as ``choose`` chooses a width."""
        self.steps += 1
        self.measuring, self._best_estimate = False, None
        weights = weights or [1.0] * len(ks)
        # Rates never rise with the position, so the m worth most are a prefix of every row's drafts.
        ranked = sorted(((rates[j] * wt, j, i) for i, (k, rates, wt) in enumerate(zip(ks, row_rates, weights, strict=True))
                         for j in range(k)), key=lambda c: (-c[0], c[1]))
        batch = len(ks)
        gains = [float(batch)]
        for rate, _, _ in ranked:
            gains.append(gains[-1] + rate)
        tokens = [batch + m for m in range(len(ranked) + 1)]
        # The drafts are made: drafting costs nothing more whatever is verified.
        m = self._pick(tokens, gains, [0.0] * len(tokens), [True] * len(tokens), retime_near=True, rows=batch)
        widths = [0] * batch
        for _, _, i in ranked[:m]:
            widths[i] += 1
        return widths

    def _pick(self, tokens: Sequence[int], gains: Sequence[float], drafting: Sequence[float], pays: Sequence[bool],
              retime_near: bool, rows: int | None = None) -> int:
        """Of options (option 0: no drafts) feeding ``tokens[o]`` for an expected ``gains[o]`` tokens after
        ``drafting[o]`` seconds of drafting over ``rows`` rows: the best by the model, or now and then one whose cost
        needs measuring."""
        estimate = self._estimator(rows)

        def value(o: int, secs: float) -> float:
            t = secs + drafting[o]
            return gains[o] / t if t > 0 else float("inf")

        def beats(o: int, secs: float, best_o: int, best_value: float) -> bool:
            # Drafting must beat plain decoding by MARGIN, and any other option outright.
            return value(o, secs) > best_value * (1.0 + MARGIN * (best_o == 0 < o))

        est = [estimate(t) for t in tokens]
        best_o, best_value = 0, -1.0
        for o, secs in enumerate(est):
            if secs is not None and beats(o, secs, best_o, best_value):
                best_o, best_value = o, value(o, secs)
        self.retime_gap.pop(tokens[best_o], None)  # the best is timed every step it runs anyway
        floor = self._floors(tokens)
        promising = [o for o in range(len(tokens)) if pays[o] and beats(o, floor[o], best_o, best_value)]
        if retime_near:
            promising = [o for o in promising
                         if est[o] is None or value(o, est[o]) >= (1.0 - RETIME_NEAR) * best_value]
        affordable = self.explore_seconds <= EXPLORE_BUDGET * self.pass_seconds
        explore = self._to_measure(tokens, est, promising, untimed=not retime_near) if affordable else None
        if explore is not None:
            self.explored_at, self.measuring = self.steps, True
            # Charged against the best's estimate, else its floor (0 when nothing below is timed: all of the pass).
            self._best_estimate = est[best_o] if est[best_o] is not None else floor[best_o]
            return explore
        return best_o

    def _estimator(self, rows: int | None = None):  # noqa: ANN202 - (tokens) -> seconds | None
        """``estimate`` over the cost tables as they are now, by bisection (a per-row choice asks it for every size).
        With ``rows``: within the sizes timed over that many rows, those timings; elsewhere the table by tokens."""
        by_tokens = _interpolator(self.cost)
        table = self.shaped.get(rows) if rows else None  # filled only where the target packs
        if not table or len(table) < 2:
            return by_tokens
        own, lo, hi = _interpolator(table), min(table), max(table)

        def estimate(tokens: int) -> float | None:
            return own(tokens) if lo <= tokens <= hi else by_tokens(tokens)

        return estimate

    def _floors(self, tokens: Sequence[int]) -> list[float]:
        """A low guess at what a pass feeding each of ``tokens`` may cost, to decide what is worth timing: the
        cheapest size below, not the nearest (one slow timing under load would hide every size above it for good);
        0 below the smallest size timed, so that one stays a candidate for re-timing too."""
        sizes = sorted(self.cost)
        lows, low = [], float("inf")
        for m in sizes:
            low = min(low, self.cost[m])
            lows.append(low)
        out = []
        for t in tokens:
            i = bisect.bisect_left(sizes, t)
            out.append(lows[i - 1] if i > 0 else 0.0)
        return out

    def _to_measure(self, tokens: Sequence[int], est: Sequence[float | None], promising: Sequence[int],
                    untimed: bool = True) -> int | None:
        """Of ``promising`` options: one whose cost cannot be estimated (the largest, so one pass brackets the
        rest); else now and then (``untimed``) one only interpolated (a step-shaped curve can hide a cheap size), or
        the one timed longest ago whose own wait (``retime_gap``) is over (load may have inflated its timing)."""
        outside = [o for o in promising if est[o] is None]
        if outside:
            return outside[-1]
        since = self.steps - self.explored_at
        fresh = [o for o in promising if tokens[o] not in self.timed_at]
        if untimed and fresh:
            return fresh[0] if since >= MEASURE_UNTIMED_EVERY else None
        if since < REMEASURE_EVERY:
            return None
        due = [o for o in promising if tokens[o] in self.timed_at
               and self.steps - self.timed_at[tokens[o]] >= self.retime_gap.get(tokens[o], REMEASURE_EVERY)]
        if due:
            o = min(due, key=lambda x: self.timed_at[tokens[x]])
            self.retime_gap[tokens[o]] = min(2 * self.retime_gap.get(tokens[o], REMEASURE_EVERY), REMEASURE_MAX)
            return o
        return None


def _interpolator(cost: dict[int, float]):  # noqa: ANN202 - (tokens) -> seconds | None
    """Seconds by tokens fed over a table of timed sizes: a timed size's own, linear between timed neighbours, None
    outside them."""
    sizes = sorted(cost)
    costs = [cost[m] for m in sizes]

    def estimate(tokens: int) -> float | None:
        i = bisect.bisect_left(sizes, tokens)
        if i < len(sizes) and sizes[i] == tokens:
            return costs[i]
        if i == 0 or i == len(sizes):
            return None
        lo, hi = costs[i - 1], costs[i]
        return lo + (hi - lo) * (tokens - sizes[i - 1]) / (sizes[i] - sizes[i - 1])

    return estimate


def record(offered: list[int], accepted: list[int], n_offered: int, n_accepted: int) -> None:
    """Add one step to per-position counters: positions < n_offered were offered, < n_accepted accepted."""
    if n_offered > len(offered):
        grow = n_offered - len(offered)
        offered.extend([0] * grow)
        accepted.extend([0] * grow)
    for j in range(n_offered):
        offered[j] += 1
        accepted[j] += j < n_accepted


def _shrunk(offered: Sequence[int], accepted: Sequence[int], k: int, pool: Sequence[float] | None) -> list[float]:
    """Observed rates per position, each pulled towards a prior by ``PRIOR_WEIGHT`` pseudo-observations.

    The prior continues the trend of earlier positions (for a row: its rate at j-1 times the pool's rate of j
    given j-1), since a pessimistic prior on a position never offered would lock the width low for good. Rates
    never rise with the position (accepting j implies accepting everything before it).
    """
    out: list[float] = []
    for j in range(k):
        if pool is not None:
            prior = pool[0] if j == 0 else out[-1] * _ratio(pool[j], pool[j - 1])
        elif j == 0:
            prior = PRIOR_RATE
        else:
            prior = out[-1] * (out[0] if j == 1 else _ratio(out[-1], out[-2]))
        d = offered[j] if j < len(offered) else 0
        a = accepted[j] if j < len(accepted) else 0
        rate = (a + PRIOR_WEIGHT * prior) / (d + PRIOR_WEIGHT)
        out.append(min(rate, out[-1]) if out else rate)
    return out


def _ratio(num: float, den: float) -> float:
    return min(1.0, num / den) if den > 0 else 0.0


def _average(old: float | None, new: float) -> float:
    if old is None:
        return new
    weight = FASTER if new < old else SLOWER
    return old + weight * (new - old)
