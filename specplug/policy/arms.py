"""The two arms a deployment compares under load (no speculation, and the plan's speculation) as the cost model
prices them, and their prediction at a request rate (specplug.policy.load)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from specplug.methods import COPY_METHODS
from specplug.plan import ArmLoad, LoadPrediction, LoadSweepPoint, RateByArm, ScheduleEntry
from specplug.policy import engine as E
from specplug.policy import load as L
from specplug.policy import perf
from specplug.policy.perf import Shape


def prefill_ms(c: E.Context, d: E.DraftChoice | None, input_len: int) -> float:
    """One request's prompt through the target (and a drafter that keeps its own cache of it)."""
    ms = perf.forward_ms(c.target, c.device, c.factors, c.tp, input_len, 1, input_len / 2) + c.factors.step_overhead_ms
    if d is not None and d.method not in ("none", *COPY_METHODS):
        da = perf.draft_arch(d.method, c.target, d.drafter_arch)
        if da is not None:
            ms += perf.forward_ms(da, c.device, c.factors, c.tp if d.method != "draft_model" else 1, input_len, 1, input_len / 2)
    return ms


def _plain_step_ms(c: E.Context, b: int) -> float:
    return perf.forward_ms(c.target, c.device, c.factors, c.tp, b, b, c.ctx) + c.factors.step_overhead_ms


def baseline_arm(c: E.Context, input_len: int, capacity: int) -> L.Arm:
    @cache
    def step(b: int) -> float:
        return _plain_step_ms(c, b)

    return L.Arm(step, lambda b: 1.0, prefill_ms(c, None, input_len), max(capacity, 1), c.mixes_prefill)


def speculative_arm(
    c: E.Context, d: E.DraftChoice, alpha: float, shape: Shape, schedule: Sequence[ScheduleEntry] | None,
    input_len: int, capacity: int,
) -> L.Arm:
    """The plan's speculation at every batch: its schedule's k where the stack follows one, else its one shape."""

    def depth_at(b: int) -> int:
        if not schedule:
            return shape.depth
        entry = next((e for e in reversed(schedule) if e.min_batch <= b), schedule[0])
        return entry.num_speculative_tokens

    @cache
    def outcome(b: int) -> tuple[float, float]:
        k = depth_at(b)
        if k <= 0:
            return _plain_step_ms(c, b), 1.0
        pool = [shape] if shape.depth <= k else [Shape(k)]
        o = E.score(c, d, alpha, b, pool)
        return o.cost.spec_ms, o.acceptance_length

    # A mixed prefill rides in the verification pass; the drafter's forwards run apart from it.
    return L.Arm(lambda b: outcome(b)[0], lambda b: outcome(b)[1], prefill_ms(c, d, input_len), max(capacity, 1),
                 c.mixes_prefill, _plain_step_ms(c, 1))


def _arm_load(p: L.LoadPoint) -> ArmLoad:
    r = lambda x: None if x is None else round(x, 3)  # noqa: E731
    return ArmLoad(running_batch=round(p.running_batch, 2), tpot_ms_p50=r(p.tpot_ms_p50), tpot_ms_p90=r(p.tpot_ms_p90),
                   ttft_ms_p50=r(p.ttft_ms_p50), ttft_ms_p90=r(p.ttft_ms_p90),
                   output_tokens_per_s=round(p.output_tokens_per_s, 1), saturated=p.saturated)


BASIS = ("continuous-batching steady state (Little's law over the cost model's step times; {stall}; each request "
         "decodes beside the others present, a Poisson count; queueing by the M/M/c approximation near capacity): not "
         "yet checked against measured servers for this model; measure with 'specplug tune --request-rate'")
STALLS = {
    False: "a joining prefill runs as a pass of its own on this stack, and the running requests wait for all of it",
    True: "this stack mixes a joining prefill into the running batch's step, so the running requests wait only for "
          "its excess over a step",
}


def predict_load(
    base: L.Arm, spec: L.Arm, rate: float, output_len: int, slo_tpot_ms: float | None = None,
    slo_ttft_ms: float | None = None,
) -> LoadPrediction:
    """Both arms at ``rate`` requests/s, their saturation and crossover rates, and the rates within the targets."""
    cross = L.crossover_rate(base, spec, output_len)
    within = None
    if slo_tpot_ms is not None or slo_ttft_ms is not None:
        within = RateByArm(baseline=round(L.max_rate_within(base, output_len, slo_tpot_ms, slo_ttft_ms), 3),
                           speculative=round(L.max_rate_within(spec, output_len, slo_tpot_ms, slo_ttft_ms), 3))
    return LoadPrediction(
        request_rate=rate,
        capacity_requests=spec.capacity,
        baseline=_arm_load(L.predict(base, rate, output_len)),
        speculative=_arm_load(L.predict(spec, rate, output_len)),
        crossover_request_rate=None if cross is None else round(cross, 3),
        saturation_request_rate=RateByArm(baseline=round(L.saturation_rate(base, output_len), 3),
                                          speculative=round(L.saturation_rate(spec, output_len), 3)),
        max_request_rate_within_slo=within,
        sweep=sweep(base, spec, output_len),
        basis=BASIS.format(stall=STALLS[base.mixes_prefill]),
    )


SWEEP_POINTS = 24


def sweep(base: L.Arm, spec: L.Arm, output_len: int) -> list[LoadSweepPoint]:
    """Both arms at evenly spaced rates up to 1.2 x the later saturation rate."""
    top = 1.2 * max(L.saturation_rate(base, output_len), L.saturation_rate(spec, output_len))
    out = []
    for i in range(1, SWEEP_POINTS + 1):
        rate = top * i / SWEEP_POINTS
        b, s = L.predict(base, rate, output_len), L.predict(spec, rate, output_len)
        r = lambda x, sat: None if sat or x is None else round(x, 3)  # noqa: E731
        out.append(LoadSweepPoint(
            request_rate=round(rate, 4),
            baseline_tpot_ms_p50=r(b.tpot_ms_p50, b.saturated), speculative_tpot_ms_p50=r(s.tpot_ms_p50, s.saturated),
            baseline_ttft_ms_p50=r(b.ttft_ms_p50, b.saturated), speculative_ttft_ms_p50=r(s.ttft_ms_p50, s.saturated),
            baseline_output_tokens_per_s=round(b.output_tokens_per_s, 1),
            speculative_output_tokens_per_s=round(s.output_tokens_per_s, 1),
        ))
    return out
