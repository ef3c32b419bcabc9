"""How many tokens to draft this step, chosen against what a verification pass measurably costs here.

Why: a target pass over ``n`` columns costs very differently on different hardware. On a memory-bound GPU it
is nearly flat in ``n``; on these CPUs it is flat up to 3 columns and then jumps by half (the BLAS switches
kernels), so a fixed k either wastes passes or leaves tokens on the table. The pacer picks the width ``w``
(drafts per row, at most each row's k) that maximises expected new tokens per second:

    value(w) = sum over rows of (1 + sum_{j < min(k_row, w)} a_row[j])  /  (cost(B * (w + 1)) + w * draft_cost)

``a_row[j]`` is the row's rate of getting draft position j accepted (which implies all before it). A free
proposer (n-gram: no model to run) drafts first, so the pacer sees each row's draft length and reads rates
per drafted position; a costly one (a draft model) is told the width before drafting, so its rates are per
position offered, and a draft stopped early counts as a miss (``k_row`` is what the row may draft, or what a
free proposer found). Rates are shrunk towards the engine-wide rate while a row has few observations. ``cost(m)`` is the measured seconds of
a target pass that feeds ``m`` tokens in all (batch x columns), learnt from the engine's own passes and
interpolated between them. Widths outside what was measured get a probe pass that is rolled back (at most
``PROBES_PER_STEP`` per step), and a width not timed for ``REPROBE_AFTER`` steps is probed again.
``draft_cost`` is the proposer's measured seconds per drafted column (near zero for n-gram).

Verification stays exact: a draft model's width is fixed before it samples, from past outcomes only, and an
n-gram draft is a deterministic function of the history, so cutting it by its length is one as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

PROBES_PER_STEP = 2
# A width measured only once (or long ago) by an unlucky probe could stay excluded for good; the stalest
# candidate is measured again when its last timing is this many steps old.
REPROBE_AFTER = 48
# Weights of a new timing in the moving average: other processes only ever add time, so a faster pass is
# believed at once and a slower one slowly (the cost still rises as contexts grow).
FASTER, SLOWER = 1.0, 0.1
PRIOR_WEIGHT = 4.0  # pseudo-observations of the engine-wide rate behind each row's own rate
PRIOR_RATE = 0.5  # before anything is observed: each position accepted half as often as the one before


class DraftPacer:
    """Per-engine cost table and acceptance pool; ``choose`` returns this step's draft width."""

    def __init__(self) -> None:
        self.cost: dict[int, float] = {}  # tokens fed per pass -> seconds (moving average)
        self.timed_at: dict[int, int] = {}  # tokens fed per pass -> step of its latest timing
        self.steps = 0
        self.draft_cost = 0.0  # seconds per drafted column
        self.pool_offered: list[int] = []  # per draft position: row-steps allowed to draft that far
        self.pool_accepted: list[int] = []

    # -- learning -------------------------------------------------------------------------------------------
    def observe_pass(self, tokens: int, seconds: float) -> None:
        self.cost[tokens] = _average(self.cost.get(tokens), seconds)
        self.timed_at[tokens] = self.steps

    def observe_draft(self, columns: int, seconds: float) -> None:
        if columns > 0:
            self.draft_cost = _average(self.draft_cost or None, seconds / columns)

    def observe_acceptance(self, offered: int, accepted: int) -> None:
        """A row was allowed ``offered`` drafts this step and got ``accepted`` of them through."""
        record(self.pool_offered, self.pool_accepted, offered, accepted)

    # -- deciding -------------------------------------------------------------------------------------------
    def estimate(self, tokens: int) -> float | None:
        """Seconds for a pass feeding ``tokens``: measured, or interpolated between measured neighbours.

        Batches shrink one request at a time; interpolating keeps that from costing a probe per width at
        every new batch size. Outside the measured range there is no estimate (it gets probed).
        """
        if tokens in self.cost:
            return self.cost[tokens]
        below = max((m for m in self.cost if m < tokens), default=None)
        above = min((m for m in self.cost if m > tokens), default=None)
        if below is None or above is None:
            return None
        lo, hi = self.cost[below], self.cost[above]
        return lo + (hi - lo) * (tokens - below) / (above - below)

    def _pool_rate(self, j: int) -> float:
        prior = PRIOR_RATE ** (j + 1)
        d = self.pool_offered[j] if j < len(self.pool_offered) else 0
        a = self.pool_accepted[j] if j < len(self.pool_accepted) else 0
        return (a + PRIOR_WEIGHT * prior) / (d + PRIOR_WEIGHT)

    def rates(self, offered: Sequence[int], accepted: Sequence[int], k: int) -> list[float]:
        """A row's acceptance rate per draft position 0..k-1, from its counters and the engine-wide pool."""
        out = []
        for j in range(k):
            d = offered[j] if j < len(offered) else 0
            a = accepted[j] if j < len(accepted) else 0
            out.append((a + PRIOR_WEIGHT * self._pool_rate(j)) / (d + PRIOR_WEIGHT))
        return out

    def choose(
        self,
        ks: Sequence[int],
        row_rates: Sequence[Sequence[float]],
        probe: Callable[[int], float],
    ) -> int:
        """The width for this step. ``probe(columns)`` runs a throwaway pass and returns its seconds."""
        self.steps += 1
        batch = len(ks)
        widest = max(ks, default=0)
        if widest == 0:
            return 0
        unknown = [w for w in range(widest + 1) if self.estimate(batch * (w + 1)) is None]
        if not unknown:
            timed = [w for w in range(widest + 1) if batch * (w + 1) in self.timed_at]
            stalest = min(timed, key=lambda w: self.timed_at[batch * (w + 1)], default=None)
            if stalest is not None and self.steps - self.timed_at[batch * (stalest + 1)] >= REPROBE_AFTER:
                unknown = [stalest]
        for w in unknown[:PROBES_PER_STEP]:
            self.observe_pass(batch * (w + 1), probe(w + 1))
        best_w, best_value = 0, -1.0
        for w in range(widest + 1):
            secs = self.estimate(batch * (w + 1))
            if secs is None:
                continue
            gain = sum(1.0 + sum(rates[: min(k, w)]) for k, rates in zip(ks, row_rates, strict=True))
            value = gain / (secs + w * self.draft_cost)
            if value > best_value:
                best_w, best_value = w, value
        return best_w


def record(offered: list[int], accepted: list[int], n_offered: int, n_accepted: int) -> None:
    """Add one step to per-position counters: positions < n_offered were offered, < n_accepted accepted."""
    if n_offered > len(offered):
        grow = n_offered - len(offered)
        offered.extend([0] * grow)
        accepted.extend([0] * grow)
    for j in range(n_offered):
        offered[j] += 1
        accepted[j] += j < n_accepted


def _average(old: float | None, new: float) -> float:
    if old is None:
        return new
    weight = FASTER if new < old else SLOWER
    return old + weight * (new - old)
