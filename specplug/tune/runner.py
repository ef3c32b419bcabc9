"""One trial for real: the candidate's plan, launched with launch's preflight and supervision, warmed up and
loaded at every concurrency by bench's load generator (acceptance from the stack's own metrics), then a few
greedy completions kept for the comparison with the control. The server is stopped on every way out."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from specplug.bench.client import Endpoint, complete, make_client
from specplug.bench.loadgen import BenchPlan, LevelRun, LevelSpec, Rate, run_bench
from specplug.bench.prompts import Prompt
from specplug.bench.record import BenchRecord
from specplug.config import Config, ScheduleEntry, SpeculationSpec
from specplug.errors import SpecplugError
from specplug.plan import Plan
from specplug.stacks.registry import get_adapter
from specplug.tune.settings import TuneSettings
from specplug.tune.state import Output, TrialResult
from specplug.tune.trials import Trial

LOG_TAIL_LINES = 20
# The log of a trial's previous attempt (a resumed tune retries it): kept aside, out of this attempt's excerpt.
PREVIOUS_LOG = "server.previous.log"

# (trial id, level: concurrency or Rate, requests finished in this level)
TickFn = Callable[[str, LevelSpec, int], None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trial_config(cfg: Config, trial: Trial, stack: str, port: int) -> Config:
    """The user's config with the trial's speculation (k fixed at every batch size) on a free loopback port."""
    if trial.control:
        spec = SpeculationSpec(method="none")
        extra = list(cfg.serve.extra_args)
    else:
        spec = SpeculationSpec(
            method=trial.method,  # type: ignore[arg-type]
            drafter=trial.drafter, num_speculative_tokens=trial.k,
            schedule=[ScheduleEntry(min_batch=1, num_speculative_tokens=trial.k)], **trial.extra,
        )
        fixed = get_adapter(stack).fixed_k_args  # a stack that picks k itself would hide the step cost per k
        extra = [*cfg.serve.extra_args, *(a for a in fixed if a not in cfg.serve.extra_args)]
    serve = cfg.serve.model_copy(update={"port": port, "host": "127.0.0.1", "extra_args": extra})
    return cfg.model_copy(update={"speculation": spec, "serve": serve})


def trial_plan(cfg: Config, config_path: str | Path, trial: Trial, port: int) -> Plan:
    from specplug.lock import plan_fresh

    return plan_fresh(trial_config(cfg, trial, cfg.stack.name, port), config_path)


def fresh_log(run_dir: Path) -> Path:
    """This attempt's server.log, empty: launch appends to it, and a retried trial's excerpt must be its own."""
    log = run_dir / "server.log"
    if log.is_file():
        os.replace(log, run_dir / PREVIOUS_LOG)
    return log


def exit_status(code: int | None) -> str:
    """A server's exit code the way a user reads it: a signal by name (a SIGKILL is often the OOM killer)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _first_line(message: str) -> str:
    """launch's error without the log lines it goes on with (log_tail holds them), a signal named."""
    first = message.split("\n", 1)[0].removesuffix(" Last lines:")
    return re.sub(r"exited with code (-\d+)", lambda m: f"was {exit_status(int(m[1]))}", first)


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
    except OSError:
        return []


@contextlib.contextmanager
def _own_signals():
    """launch(wait=False) leaves SIGINT forwarded to the server; a tune wants Ctrl-C back as KeyboardInterrupt
    once the server is up, so its own clean-up runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in saved.items():
            with contextlib.suppress(Exception):
                signal.signal(s, h)


def run_trial(
    trial: Trial, plan: Plan, settings: TuneSettings, prompts: list[Prompt], run_dir: Path, tick: TickFn | None = None,
) -> TrialResult:
    """Launch, measure and stop one trial. A start that fails, or a server that dies while measured, is a
    'failed' result with its exit status and this attempt's log tail; Ctrl-C stops the server and propagates."""
    from specplug.launcher import launch

    run_dir.mkdir(parents=True, exist_ok=True)
    base = {"id": trial.id, "method": trial.method, "drafter": trial.drafter, "k": trial.k}
    server_log = fresh_log(run_dir)
    started = time.monotonic()
    with open(run_dir / "launch.log", "w", encoding="utf-8") as out, _own_signals():
        try:
            res = launch(plan.stack.name, plan=plan, wait=False, run_dir=str(run_dir),
                         timeout=settings.launch_timeout_s, out=out)
        except SpecplugError as exc:
            return TrialResult(**base, status="failed", error=_first_line(exc.message),
                               log_tail=_tail(server_log) or _tail(run_dir / "launch.log"),
                               log_file=str(server_log if server_log.is_file() else run_dir / "launch.log"),
                               finished=_now())
    server = res.server
    if server is None or server.forwarded is not None:
        if server is not None:
            server.stop()
        raise KeyboardInterrupt  # stopped by the user while it was starting
    launch_s = time.monotonic() - started
    try:
        # A deployment that requires a key gets it from the variable it names, as every client of it would.
        key = os.environ.get(plan.serve.api_key_env) if plan.serve.api_key_env else None
        ep = Endpoint(f"http://127.0.0.1:{plan.serve.port}", api_key=key)
        runs, outputs = asyncio.run(_measure(ep, trial, settings, prompts, tick))
        # A server that died before the end left levels cut short: a crash, not a measurement.
        error = None if server.alive() else f"The server died during the measurement ({exit_status(server.proc.poll())})."
    except SpecplugError as exc:
        error = exc.message + ("" if server.alive() else f" (the server died: {exit_status(server.proc.poll())})")
    finally:
        server.stop()
    if error is not None:
        return TrialResult(**base, status="failed", error=error, log_tail=_tail(server_log), log_file=str(server_log),
                           launch_s=round(launch_s, 2), finished=_now())
    return TrialResult(
        **base, status="done", launch_s=round(launch_s, 2), wall_s=round(time.monotonic() - started, 2),
        stack_version=res.spec.stack_version, runs=runs, outputs=outputs, log_file=str(server_log), finished=_now(),
    )


def levels(settings: TuneSettings) -> list[LevelSpec]:
    """One repeat's levels: the closed-loop concurrencies, then the open-loop request rates."""
    return [*settings.concurrency, *(Rate(r) for r in settings.request_rates)]


def level_order(settings: TuneSettings) -> list[LevelSpec]:
    """Repeats interleaved (1,4,16,1,4,16): a drift over the trial shows as spread, not as a fake speedup."""
    return [c for _ in range(settings.repeats) for c in levels(settings)]


async def _measure(ep: Endpoint, trial: Trial, settings: TuneSettings, prompts: list[Prompt], tick: TickFn | None):
    bp = BenchPlan(
        endpoint=ep, baseline=None, prompts=prompts, concurrency=level_order(settings), max_tokens=settings.max_tokens,
        temperature=settings.temperature, num_prompts=settings.num_prompts, duration_s=settings.level_seconds,
        api="auto", slo_tpot_ms=settings.slo_tpot_ms, slo_ttft_ms=settings.slo_ttft_ms,
    )
    # The record lists the closed-loop levels; an open-loop level's rate is on its Level and RunStats.
    record = BenchRecord(endpoint=ep.root, concurrency=[c for c in bp.concurrency if not isinstance(c, Rate)])
    current: list[LevelRun] = []

    def progress(_role: str, conc: int, done: int) -> None:
        if tick:
            tick(trial.id, conc, done)

    await run_bench(bp, record, current, progress)
    runs = []
    for lv in record.levels:
        if lv.speculative is not None:
            runs.append(lv.speculative.model_copy(update={"role": "control" if trial.control else "speculative"}))
    outputs = await _greedy_outputs(ep, prompts[: settings.check_prompts], settings.max_tokens)
    return runs, outputs


async def _greedy_outputs(ep: Endpoint, prompts: list[Prompt], max_tokens: int) -> list[Output]:
    """Temperature-0 completions one at a time (a fixed batch shape), with token detail where served."""
    if not prompts:
        return []
    client = make_client(ep, 1, 300.0)
    try:
        out = []
        for p in prompts:
            c = await complete(client, ep, p, p.api("auto"), max_tokens)
            out.append(Output(prompt_id=p.id, text=c.text, tokens=c.tokens, top=c.top, error=c.error))
        return out
    finally:
        await client.aclose()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
