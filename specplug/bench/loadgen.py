"""The load generator: a closed loop of N concurrent streams per level, bounded in requests and time,
with ``/metrics`` scraped before and after (and sampled during, for gauge-only stacks)."""

from __future__ import annotations

import asyncio
import contextlib
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

# Called once per finished request with the role and concurrency being measured.
ProgressFn = Callable[[str, int, int], None]


@dataclass
class LevelRun:
    """Requests of one endpoint at one concurrency, kept as they finish so Ctrl-C loses nothing done."""

    role: str
    concurrency: int
    results: list[RequestResult] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    before: Snapshot | None = None
    after: Snapshot | None = None
    during: list[Snapshot] = field(default_factory=list)

    def stats(self, interrupted: bool = False) -> RunStats:
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
        return RunStats(
            role=self.role,
            concurrency=self.concurrency,
            requests=len(ok),
            failed=len(self.results) - len(ok),
            errors=errors,
            wall_s=round(wall, 4),
            output_tokens=tokens,
            requests_per_s=len(ok) / wall if ok else None,
            output_tokens_per_s=tokens / wall if ok else None,
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
    concurrency: list[int]
    max_tokens: int
    temperature: float
    num_prompts: int | None
    duration_s: float | None
    api: str
    timeout_s: float = 300.0
    warmup: int = 1


def requests_for(plan: BenchPlan, concurrency: int) -> list[Prompt]:
    """The prompts one level sends: --num-prompts of them, else the set but at least 4 per stream."""
    n = plan.num_prompts if plan.num_prompts is not None else max(len(plan.prompts), 4 * concurrency)
    return [plan.prompts[i % len(plan.prompts)] for i in range(n)]


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
    top = max(plan.concurrency)
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
            level = Level(concurrency=conc)
            record.levels.append(level)
            prompts = requests_for(plan, conc)
            for role, ep in eps:
                run = LevelRun(role=role, concurrency=conc)
                current[:] = [run]
                await run_level(clients[role], ep, run, prompts, plan, progress)
                stats = run.stats()
                if stats.requests == 0:
                    raise SpecplugError(
                        f"Every request to {ep.root} failed at concurrency {conc}: {'; '.join(stats.errors) or 'no answer'}."
                    )
                setattr(level, role, stats)
                current[:] = []
            level.compute()
    finally:
        for c in clients.values():
            await c.aclose()
