"""The load generator: per level, a closed loop of N concurrent streams or an open loop of Poisson arrivals at a
request rate (:class:`Rate`), bounded in requests and time, with ``/metrics`` scraped before and after (and
sampled during, for gauge-only stacks)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

try:
    import httpx
except ImportError:  # the [bench] extra is not installed
    from specplug.bench import missing_httpx

    raise missing_httpx() from None

from specplug.bench.client import Endpoint, RequestResult, make_client, preflight, scrape, stream_request
from specplug.bench.metrics import Snapshot, detect_stack, needs_sampling, read_acceptance
from specplug.bench.prompts import Prompt
from specplug.bench.record import BenchRecord, Level, Percentiles, RunStats
from specplug.errors import SpecplugError

# Seconds of arrivals an open-loop level sends by default: long enough for the running batch to settle.
OPEN_LOOP_S = 20.0
# Connections an open-loop level may hold at once (arrivals do not wait for answers).
OPEN_LOOP_CONNECTIONS = 256


@dataclass(frozen=True)
class Rate:
    """An open-loop level: requests sent at Poisson arrival times, ``per_s`` a second on average, whatever the
    server answers (a closed loop sends the next request only when one finishes)."""

    per_s: float

    def __str__(self) -> str:
        return f"{self.per_s:g}/s"


# A level: concurrent streams (closed loop) or a request rate (open loop).
LevelSpec = int | Rate

# Called once per finished request with the role and the level being measured.
ProgressFn = Callable[[str, LevelSpec, int], None]


def level_label(level: LevelSpec) -> str:
    """How a level reads in a message: 'concurrency 4' or 'request rate 2/s'."""
    return f"request rate {level}" if isinstance(level, Rate) else f"concurrency {level}"


def within_slo(r: RequestResult, slo_tpot_ms: float | None, slo_ttft_ms: float | None) -> bool:
    """Whether a finished request met the latency targets given (a one-token answer has no TPOT to miss)."""
    if slo_ttft_ms is not None and (r.ttft is None or r.ttft * 1000.0 > slo_ttft_ms):
        return False
    tpot = r.tpot
    return slo_tpot_ms is None or tpot is None or tpot * 1000.0 <= slo_tpot_ms


@dataclass
class LevelRun:
    """Requests of one endpoint at one concurrency, kept as they finish so Ctrl-C loses nothing done."""

    role: str
    concurrency: int
    results: list[RequestResult] = field(default_factory=list)
    request_rate: float | None = None
    started: float = 0.0
    finished: float = 0.0
    before: Snapshot | None = None
    after: Snapshot | None = None
    during: list[Snapshot] = field(default_factory=list)

    def stats(self, interrupted: bool = False, slo_tpot_ms: float | None = None,
              slo_ttft_ms: float | None = None) -> RunStats:
        """The level's figures; with latency targets, also the goodput (tokens/s of the requests within them)."""
        ok = [r for r in self.results if r.ok]
        end = self.finished or max((r.end for r in self.results), default=self.started)
        wall = max(end - self.started, 1e-9) if self.results else 0.0
        tokens = sum(r.output_tokens for r in ok)
        errors: list[str] = []
        for r in self.results:
            if r.error and r.error not in errors and len(errors) < 3:
                errors.append(r.error)
        acc = read_acceptance(self.before, self.after, self.during, [r.timings for r in ok if r.timings])
        if interrupted and self.after is None:
            acc = None  # no after-scrape: a before/after diff would be meaningless
        good = None
        if ok and (slo_tpot_ms is not None or slo_ttft_ms is not None):
            good = sum(r.output_tokens for r in ok if within_slo(r, slo_tpot_ms, slo_ttft_ms)) / wall
        return RunStats(
            role=self.role,
            concurrency=self.concurrency,
            request_rate=self.request_rate,
            requests=len(ok),
            failed=len(self.results) - len(ok),
            errors=errors,
            wall_s=round(wall, 4),
            output_tokens=tokens,
            requests_per_s=len(ok) / wall if ok else None,
            output_tokens_per_s=tokens / wall if ok else None,
            goodput_tokens_per_s=good,
            ttft_s=Percentiles.of([r.ttft for r in ok if r.ttft is not None]),
            tpot_s=Percentiles.of([t for r in ok if (t := r.tpot) is not None]),
            latency_s=Percentiles.of([r.end - r.start for r in ok]),
            acceptance=acc,
            interrupted=interrupted,
        )


@dataclass
class BenchPlan:
    endpoint: Endpoint
    baseline: Endpoint | None
    prompts: list[Prompt]
    concurrency: list[LevelSpec]  # levels in run order: concurrent streams, or a Rate
    max_tokens: int
    temperature: float
    num_prompts: int | None
    duration_s: float | None
    api: str
    timeout_s: float = 300.0
    warmup: int = 1
    slo_tpot_ms: float | None = None
    slo_ttft_ms: float | None = None
    seed: int = 0  # the open loop's arrival times: the same for every server compared


def requests_for(plan: BenchPlan, level: LevelSpec) -> list[Prompt]:
    """The prompts one level sends: --num-prompts of them, else the set but at least 4 per stream (closed loop)
    or OPEN_LOOP_S seconds of arrivals, at least 8 (open loop)."""
    if plan.num_prompts is not None:
        n = plan.num_prompts
    elif isinstance(level, Rate):
        n = max(len(plan.prompts), 8, math.ceil(OPEN_LOOP_S * level.per_s))
    else:
        n = max(len(plan.prompts), 4 * level)
    return [plan.prompts[i % len(plan.prompts)] for i in range(n)]


def arrival_offsets(rate: float, count: int, seed: int) -> list[float]:
    """Seconds from the level's start at which each request is sent: a Poisson process (exponential gaps) whose
    first arrival is at 0, the same for a given seed."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def run_level(
    client: httpx.AsyncClient,
    ep: Endpoint,
    run: LevelRun,
    prompts: list[Prompt],
    plan: BenchPlan,
    progress: ProgressFn | None = None,
) -> None:
    run.before = await scrape(client, ep)
    sample = needs_sampling(run.before)
    next_index = 0
    run.started = time.perf_counter()
    deadline = run.started + plan.duration_s if plan.duration_s else None

    async def one(p: Prompt) -> None:
        res = await stream_request(client, ep, p, p.api(plan.api), plan.max_tokens, plan.temperature)
        run.results.append(res)
        if progress:
            progress(run.role, Rate(run.request_rate) if run.request_rate else run.concurrency, len(run.results))

    async def open_loop(rate: float) -> None:
        """Send each prompt at its arrival time, whether or not earlier ones were answered."""
        sent: list[asyncio.Task] = []
        try:
            for p, at in zip(prompts, arrival_offsets(rate, len(prompts), plan.seed), strict=True):
                delay = run.started + at - time.perf_counter()
                if deadline is not None and run.started + at >= deadline:
                    break
                if delay > 0:
                    await asyncio.sleep(delay)
                sent.append(asyncio.create_task(one(p)))
            await asyncio.gather(*sent)
        finally:
            for t in sent:
                t.cancel()

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(prompts) and (deadline is None or time.perf_counter() < deadline):
            p = prompts[next_index]
            next_index += 1
            res = await stream_request(client, ep, p, p.api(plan.api), plan.max_tokens, plan.temperature)
            run.results.append(res)
            if progress:
                progress(run.role, run.concurrency, len(run.results))

    async def sampler() -> None:
        while True:
            await asyncio.sleep(0.5)
            snap = await scrape(client, ep)
            if snap is not None:
                run.during.append(snap)

    sampler_task = asyncio.create_task(sampler()) if sample else None
    try:
        if run.request_rate:
            await open_loop(run.request_rate)
        else:
            await asyncio.gather(*(worker() for _ in range(run.concurrency)))
    finally:
        run.finished = time.perf_counter()
        if sampler_task:
            sampler_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler_task
    run.after = await scrape(client, ep)


async def _warmup(client: httpx.AsyncClient, ep: Endpoint, plan: BenchPlan) -> None:
    """A few short requests first: servers compile or allocate on the first one and would skew level 1."""
    for p in plan.prompts[: plan.warmup]:
        res = await stream_request(client, ep, p, p.api(plan.api), min(16, plan.max_tokens), plan.temperature)
        if res.error:
            raise SpecplugError(f"The warm-up request to {ep.root} failed: {res.error}.")


async def run_bench(
    plan: BenchPlan,
    record: BenchRecord,
    current: list[LevelRun],
    progress: ProgressFn | None = None,
) -> None:
    """Fill ``record.levels`` in place, one concurrency at a time (speculative, then baseline).

    ``current`` holds the level being measured, so an interrupted caller can still report its finished requests.
    """
    streams = [c for c in plan.concurrency if not isinstance(c, Rate)]
    top = max(streams, default=1)
    if len(streams) < len(plan.concurrency):
        top = max(top, OPEN_LOOP_CONNECTIONS)
    eps = [("speculative", plan.endpoint)] + ([("baseline", plan.baseline)] if plan.baseline else [])
    clients = {role: make_client(ep, top, plan.timeout_s) for role, ep in eps}
    try:
        for role, ep in eps:
            ep.model = await preflight(clients[role], ep, "--endpoint" if role == "speculative" else "--baseline")
        record.model = plan.endpoint.model
        record.baseline_model = plan.baseline.model if plan.baseline else None
        record.stack = detect_stack(await scrape(clients["speculative"], plan.endpoint))
        for role, ep in eps:
            await _warmup(clients[role], ep, plan)
        for conc in plan.concurrency:
            rate = conc.per_s if isinstance(conc, Rate) else None
            streams_n = 0 if isinstance(conc, Rate) else conc
            level = Level(concurrency=streams_n, request_rate=rate)
            record.levels.append(level)
            prompts = requests_for(plan, conc)
            for role, ep in eps:
                run = LevelRun(role=role, concurrency=streams_n, request_rate=rate)
                current[:] = [run]
                await run_level(clients[role], ep, run, prompts, plan, progress)
                stats = run.stats(slo_tpot_ms=plan.slo_tpot_ms, slo_ttft_ms=plan.slo_ttft_ms)
                if stats.requests == 0:
                    raise SpecplugError(
                        f"Every request to {ep.root} failed at {level_label(conc)}: "
                        f"{'; '.join(stats.errors) or 'no answer'}."
                    )
                setattr(level, role, stats)
                current[:] = []
            level.compute()
    finally:
        for c in clients.values():
            await c.aclose()
