"""A continuous-batching server under open-loop (Poisson) load: running batch, TPOT, TTFT and throughput per
request rate, for one arm (no speculation, or a speculative plan) given what one decode step costs.

The steady state is a fixed point of Little's law: a request spends ``output_len`` tokens x TPOT decoding, so the
running batch (its time average, ``L``) is ``rate x output_len x TPOT``, where TPOT is the step time over the
tokens a step yields per request, stretched by the share of GPU time prefills take from it (a stack that runs prefills
as passes of their own stalls the running requests for the whole pass; one that mixes a prefill into the running
batch's step, for its extra cost over a plain step). The number of requests in
decode is Poisson (an M/G/infinity system) far below capacity, and a request decodes beside the others present:
by Poisson arrivals seeing time averages, its batch is 1 + Poisson(L), not L (at a low rate a request is often
alone, yet it pays for the one that joins it), and near the capacity every slot is taken (see ``seen_batches``),
so TPOT averages the step over that batch. The batch stops at the arm's capacity (what its KV cache and the
stack's request cap hold); above the rate that fills it, requests queue (the saturation rate). The wait for a free
slot follows Sakasegawa's M/M/c approximation near it. Pure Python: the CLI imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

# z of the 90th percentile of a normal (the Poisson batch's spread at p90).
_Z90 = 1.2816


@dataclass(frozen=True)
class Arm:
    """One server configuration: ``step_ms(batch)`` is one decode step at that running batch (fractional batches
    interpolate), ``tokens_per_step(batch)`` the output tokens a step yields per request (1 without speculation,
    the acceptance length with it), ``prefill_ms`` one request's prefill alone (a pass yielding its first token),
    ``capacity`` the most requests it runs at once, ``mixes_prefill`` whether the stack runs a joining request's
    prefill inside the running batch's decode step (chunked prefill, in-flight batching) instead of as a pass of
    its own, and ``absorbed_ms`` the part of that prefill the step pays anyway (default: ``step_ms(1)``; a
    speculative arm's drafting runs apart from the pass the prefill rides in). ``median_share`` is the median
    request's tokens per step as a share of the mean: requests that speculate unevenly (copy-heavy ones accept
    more) leave the median request slower than the mean, and TPOT's percentiles are over requests."""

    step_ms: Callable[[int], float]
    tokens_per_step: Callable[[int], float]
    prefill_ms: float
    capacity: int
    mixes_prefill: bool = False
    absorbed_ms: float | None = None
    median_share: float = 1.0

    @property
    def stall_ms(self) -> float:
        """How long one arriving request's prefill holds up the running requests: the whole pass where it runs on
        its own; where it rides in a decode step, its cost over the plain pass (that pass yields tokens too)."""
        if not self.mixes_prefill:
            return self.prefill_ms
        absorbed = self.step_ms(1) if self.absorbed_ms is None else self.absorbed_ms
        return max(0.0, self.prefill_ms - absorbed)

    def tpot_ms(self, batch: float, rate: float) -> float:
        """Time per output token at ``batch`` running requests while prefills arrive at ``rate`` per second."""
        busy = rate * self.stall_ms / 1000.0  # share of the time prefills hold the running batch up
        if busy >= 1.0:
            return math.inf
        return _interp(self.step_ms, batch) / _interp(self.tokens_per_step, batch) / (1.0 - busy)

    def request_tpot_ms(self, load: float, rate: float) -> float:
        """A request's time per output token while ``load`` requests decode on average: the step averaged over the
        batch it decodes in, itself and the others present (see the module doc)."""
        return sum(p * self.tpot_ms(b, rate) for b, p in seen_batches(load, self.capacity))


# Above this mean the count of other requests is summed by 5-point Gauss-Hermite quadrature over its normal
# approximation: exact sums over a wide window would cost hundreds of step evaluations per fixed-point iteration.
_EXACT_UP_TO = 25.0
_HERMITE = ((0.0, 8.0 / 15.0), (1.355626, 0.222076), (-1.355626, 0.222076), (2.856970, 0.011257),
            (-2.856970, 0.011257))
_HERMITE_SUM = sum(w for _, w in _HERMITE)  # the rounded weights, made to sum to 1


def seen_batches(load: float, capacity: int) -> list[tuple[float, float]]:
    """(batch, probability) pairs for the batch a request decodes in when ``load`` requests decode on average:
    itself and the others present. Each of the other ``capacity - 1`` slots is taken with probability
    ``load / capacity``: about Poisson(load) while the batch is far from full, and every slot taken once it is full."""
    cap = max(1, capacity)
    p = min(1.0, max(0.0, load) / cap)
    if p <= 0.0 or cap == 1:
        return [(1.0, 1.0)]
    if p >= 1.0:
        return [(float(cap), 1.0)]
    n, q = cap - 1, 1.0 - p
    mean, sd = n * p, math.sqrt(n * p * q)
    if mean > _EXACT_UP_TO:
        return [(min(float(cap), max(1.0, 1.0 + mean + sd * x)), w / _HERMITE_SUM) for x, w in _HERMITE]
    out, tail = [], 1.0
    top = min(n, int(mean + 8.0 * sd + 8.0))
    lp, lq, ln = math.log(p), math.log(q), math.lgamma(n + 1)
    for k in range(top + 1):  # in logs: q**n underflows when nearly every slot is taken
        pk = math.exp(ln - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
        out.append((1.0 + k, pk))
        tail -= pk
    if top < n and tail > 0.0:
        out.append((2.0 + top, tail))
    return out


def _interp(f: Callable[[int], float], x: float) -> float:
    lo = max(1, math.floor(x))
    hi = max(1, math.ceil(x))
    if lo == hi:
        return f(lo)
    return f(lo) + (f(hi) - f(lo)) * (x - lo)


@dataclass(frozen=True)
class LoadPoint:
    """One arm at one request rate (ms and tokens/s; None where the arm cannot keep up: requests queue without
    bound)."""

    request_rate: float
    running_batch: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    output_tokens_per_s: float
    saturated: bool


def running_batch(arm: Arm, rate: float, output_len: int) -> float:
    """The steady-state number of requests decoding at ``rate`` requests/s (the arm's capacity once it is full)."""
    if rate <= 0:
        return 0.0

    def excess(b: float) -> float:
        return rate * output_len * arm.request_tpot_ms(b, rate) / 1000.0 - b

    if excess(arm.capacity) >= 0:
        return float(arm.capacity)
    lo, hi = 0.0, float(arm.capacity)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def saturation_rate(arm: Arm, output_len: int) -> float:
    """The request rate at which the arm's running batch reaches its capacity: above it requests queue."""
    full = arm.step_ms(arm.capacity) / arm.tokens_per_step(arm.capacity)
    return arm.capacity / (output_len * full / 1000.0 + arm.capacity * arm.stall_ms / 1000.0)


def _wait_quantile_ms(arm: Arm, rate: float, output_len: int, q: float) -> float | None:
    """The q-quantile of the wait for a free slot (M/M/c, Sakasegawa's approximation); None at or past saturation."""
    sat = saturation_rate(arm, output_len)
    if rate >= sat:
        return None
    waits = (rate / sat) ** (math.sqrt(2 * (arm.capacity + 1)) - 1)  # probability that an arrival waits
    if waits <= 1 - q:
        return 0.0
    # Slots free at ``sat`` per second when all are busy: the queue drains at sat - rate.
    return 1000.0 * math.log(waits / (1 - q)) / (sat - rate)


def predict(arm: Arm, rate: float, output_len: int) -> LoadPoint:
    """The arm at ``rate`` requests/s (Poisson arrivals) with ``output_len`` output tokens per request."""
    sat = saturation_rate(arm, output_len)
    saturated = rate >= sat
    admitted = min(rate, sat)  # past saturation the rest wait in the queue
    b = running_batch(arm, admitted, output_len)
    bb = max(b, 1.0)
    tpot = arm.request_tpot_ms(b, admitted) / arm.median_share
    # The 90th percentile request decodes beside that many more others than the mean.
    b90 = min(float(arm.capacity), 1.0 + b + _Z90 * math.sqrt(b))
    tpot90 = max(tpot, arm.tpot_ms(b90, admitted) / arm.median_share)
    step = _interp(arm.step_ms, bb)
    w50, w90 = _wait_quantile_ms(arm, rate, output_len, 0.5), _wait_quantile_ms(arm, rate, output_len, 0.9)
    # A new request waits for the step in flight (half a step at the median), then its prefill runs: alone, or
    # inside a step of the whole running batch.
    prefill = step + arm.stall_ms if arm.mixes_prefill else arm.prefill_ms
    ttft50 = None if w50 is None else prefill + step / 2 + w50
    ttft90 = None if w90 is None else prefill + step * 0.9 + w90
    tokens_s = admitted * output_len
    return LoadPoint(rate, b, tpot, tpot90, ttft50, ttft90, tokens_s, saturated)


def crossover_rate(base: Arm, spec: Arm, output_len: int) -> float | None:
    """The lowest request rate at which the speculative arm's median TPOT is no better than the baseline's (it
    also counts as lost once the speculative arm saturates first); None where speculation pays up to the
    baseline's saturation; 0.0 where it never pays."""
    top = saturation_rate(base, output_len)

    def loses(rate: float) -> bool:
        if rate >= saturation_rate(spec, output_len):
            return True
        return predict(spec, rate, output_len).tpot_ms_p50 >= predict(base, rate, output_len).tpot_ms_p50

    low = top * 1e-4
    if loses(low):
        return 0.0
    # Scan a geometric grid for the first loss, then bisect: TPOT curves may cross only once, but a stepped
    # schedule can make the difference non-monotone between grid points.
    grid = [low * (top / low) ** (i / 48) for i in range(49)]
    prev = low
    for r in grid[1:]:
        if loses(r):
            lo, hi = prev, r
            for _ in range(40):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if loses(mid) else (mid, hi)
            return hi
        prev = r
    return None


def max_rate_within(arm: Arm, output_len: int, slo_tpot_ms: float | None, slo_ttft_ms: float | None) -> float:
    """The highest request rate at which the arm's p90 TPOT and p90 TTFT stay within the targets given (0.0 when
    not even a trickle of requests meets them)."""

    def meets(rate: float) -> bool:
        p = predict(arm, rate, output_len)
        if p.saturated:
            return False
        if slo_tpot_ms is not None and p.tpot_ms_p90 > slo_tpot_ms:
            return False
        return slo_ttft_ms is None or (p.ttft_ms_p90 is not None and p.ttft_ms_p90 <= slo_ttft_ms)

    hi = saturation_rate(arm, output_len)
    lo = hi * 1e-6
    if not meets(lo):
        return 0.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


def cached(f: Callable[[int], float]) -> Callable[[int], float]:
    """``f`` memoised per batch size (the cost model is pure, and the fixed point asks for the same batches)."""
    return cache(f)
