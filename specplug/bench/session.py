"""One bench run as a library call: both endpoints at each concurrency, the record finished and written.

The CLI's ``specplug bench`` and ``specplug calibrate`` call :func:`measure` and draw the progress bar; a script
calls it the same way with its own ``tick`` (or none).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from pathlib import Path

from specplug.bench.record import BenchRecord
from specplug.errors import SpecplugError

# (role, concurrency, requests done at that level): called once per finished request.
Tick = Callable[[str, int, int], None]


def measure(
    *,
    endpoint: str,
    baseline: str | None,
    levels: list[int],
    prompts: list,
    workload: str | None = None,
    prompts_file: str | None = None,
    model: str | None = None,
    num_prompts: int | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    duration_s: float | None = None,
    api: str = "auto",
    api_key_env: str | None = None,
    timeout_s: float = 300.0,
    min_speedup: float = 1.0,
    out_dir: str | Path | None = None,
    tick: Tick | None = None,
    on_total: Callable[[int], None] | None = None,
) -> tuple[BenchRecord, list[Path]]:
    """Bench ``endpoint`` (and ``baseline``) at each concurrency in ``levels``: the record and the files written to
    ``out_dir`` when given, also with the finished levels when a server dies mid-run (the error is re-raised) or
    after Ctrl-C (the record says it was cut short: ``record.complete`` is False)."""
    from specplug import __version__
    from specplug.bench.client import Endpoint, api_key_from_env, parse_endpoint
    from specplug.bench.loadgen import BenchPlan, LevelRun, requests_for, run_bench

    key = api_key_from_env(api_key_env)
    spec_ep = Endpoint(parse_endpoint(endpoint, "--endpoint"), model=model, api_key=key)
    base_ep = Endpoint(parse_endpoint(baseline, "--baseline"), model=model, api_key=key) if baseline else None
    plan = BenchPlan(
        endpoint=spec_ep, baseline=base_ep, prompts=prompts, concurrency=levels, max_tokens=max_tokens,
        temperature=temperature, num_prompts=num_prompts, duration_s=duration_s, api=api, timeout_s=timeout_s,
    )
    record = BenchRecord(
        specplug_version=__version__,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        endpoint=spec_ep.root, baseline=base_ep.root if base_ep else None, workload=workload,
        prompts_file=prompts_file, api=api, num_prompts=num_prompts, max_tokens=max_tokens, temperature=temperature,
        duration_s=duration_s, api_key_env=api_key_env, concurrency=levels,
    )
    if base_ep is None:
        record.notes.append("No baseline: pass --baseline URL or --launch-baseline for speedups.")
    if on_total is not None:
        on_total(sum(len(requests_for(plan, c)) for c in levels) * (2 if base_ep else 1))
    current: list[LevelRun] = []
    try:
        asyncio.run(run_bench(plan, record, current, tick or (lambda role, conc, done: None)))
        record.complete = True
    except SpecplugError as exc:
        # A server that dies mid-run: keep the levels that finished on disk, then report the failure.
        record.levels = [lv for lv in record.levels if lv.speculative is not None]
        if record.levels and out_dir:
            record.notes.append(f"Stopped early: {exc.message}")
            record.finish(min_speedup)
            _write(record, out_dir)
            exc.hint = ((exc.hint or "") + f" The levels that finished are in {out_dir}/bench.json.").strip()
        raise
    except KeyboardInterrupt:
        # Keep the level in flight: its finished requests are real measurements, marked as cut.
        for run in current:
            if run.results and record.levels:
                stats = run.stats(interrupted=True)
                if stats.requests:
                    setattr(record.levels[-1], run.role, stats)
        record.levels = [lv for lv in record.levels if lv.speculative is not None]
        record.notes.append("Stopped with Ctrl-C before the end.")
    record.finish(min_speedup)
    return record, (_write(record, out_dir) if out_dir else [])


def _write(record: BenchRecord, out_dir: str | Path) -> list[Path]:
    from specplug.bench.report import write_outputs

    return write_outputs(record, out_dir)
