"""The launcher against a harmless stub server: argv reaches it verbatim (no shell), health wait, early death,
signals (a stop specplug passes on is a clean stop), no orphans, missing stacks, dry runs (exit 1 when a check
would fail), the embedded server's shutdown grace and the fallback hook."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specplug import launcher
from specplug.errors import StackError
from specplug.stacks.base import BaseAdapter
from specplug.stacks.protocol import LaunchSpec

sys.path.insert(0, str(Path(__file__).parent))
from tests.adapters.conftest import make_plan  # noqa: E402

HOSTILE = ["; rm -rf ~", "$(id)", "`id`", "a\nb", "x' \"y", "--flag=$(touch /tmp/pwned)"]

STUB = textwrap.dedent(
    """
    import http.server, json, os, subprocess, sys, time
    out = os.environ["STUB_OUT"]
    with open(out, "w") as fh:
        json.dump(sys.argv[1:], fh)
    if os.environ.get("STUB_DIE"):
        print("stub: loading weights", flush=True)
        print("stub: CUDA error: out of memory", flush=True)
        sys.exit(3)
    time.sleep(float(os.environ.get("STUB_SLOW", "0")))  # a server that takes a while to come up
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a grandchild to clean up
    with open(out + ".child", "w") as fh:
        fh.write(str(child.pid))
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StubAdapter(BaseAdapter):
    """Renders ``python stub.py MODEL --port P EXTRA...`` like a real adapter renders its server."""

    name = "vllm"
    display_name = "Stub"
    install_hint = "pip install stub-stack"
    oldest = "0.1.0"
    method_table = {}

    def __init__(self, stub: Path, version: str | None = "1.0.0", cpu: bool = True) -> None:
        self.stub, self.version, self.cpu = stub, version, cpu

    def installed_version(self):
        return self.version

    def runs_without_gpu(self, version):
        return self.cpu

    def build(self, plan, version):
        p = plan.serve.port
        return LaunchSpec(stack="vllm", argv=[sys.executable, str(self.stub), plan.model.hf_id, "--port", str(p),
                                              *plan.serve.extra_args],
                          env={"STUB_OUT": str(self.stub.with_suffix(".json"))},
                          health_url=f"http://127.0.0.1:{p}/health", base_url=f"http://127.0.0.1:{p}/v1")


@pytest.fixture
def stub(tmp_path, monkeypatch):
    path = tmp_path / "stub.py"
    path.write_text(STUB, encoding="utf-8")
    adapter = StubAdapter(path)
    registry = {"vllm": adapter}
    import importlib

    monkeypatch.setattr(launcher, "get_adapter", lambda n: registry[n])
    monkeypatch.setattr(importlib.import_module("specplug.rendering"), "get_adapter", lambda n: registry[n])
    monkeypatch.chdir(tmp_path)
    return adapter, registry


def _plan(model="tiny", extra=(), port=None):
    return make_plan("vllm", "1.0.0", model=model, method="none", serve={"port": port or _port(), "extra_args": list(extra)})


def test_hostile_model_and_extra_args_arrive_verbatim_as_single_argv_elements(stub, tmp_path):
    adapter, _ = stub
    plan = _plan(model="; rm -rf ~ $(id) `id` 'q' \\next", extra=HOSTILE)
    out = io.StringIO()
    res = launcher.launch("vllm", plan=plan, wait=False, timeout=60, out=out)
    try:
        got = json.loads(adapter.stub.with_suffix(".json").read_text())
    finally:
        res.server.stop()
    assert got[0] == "; rm -rf ~ $(id) `id` 'q' \\next"
    assert got[3:] == HOSTILE
    assert not Path("/tmp/pwned").exists()


def test_server_is_supervised_and_its_whole_group_is_stopped(stub):
    adapter, _ = stub
    out = io.StringIO()
    res = launcher.launch("vllm", plan=_plan(), wait=False, timeout=60, out=out)
    text = out.getvalue()
    assert "endpoint: http://127.0.0.1:" in text and "healthy after" in text
    child = int(Path(str(adapter.stub.with_suffix(".json")) + ".child").read_text())
    pgid = res.server.pgid
    # The stub dies of the SIGTERM stop() sends: that is the stop asked for, not a failure with -15.
    assert res.server.stop(grace=5) == 0 and res.server.proc.returncode == -signal.SIGTERM
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_sigterm_to_specplug_is_forwarded_and_nothing_is_left(stub):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    out = io.StringIO()
    pgids = []

    def stop_soon():
        while not pgids:
            time.sleep(0.1)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)  # our own process, as `kill` or systemd would

    orig = launcher.Server.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        pgids.append(self.pgid)

    launcher.Server.__init__ = spy
    try:
        threading.Thread(target=stop_soon, daemon=True).start()
        res = launcher.launch("vllm", plan=_plan(), timeout=60, out=out)
    finally:
        launcher.Server.__init__ = orig
    # The stub dies of the forwarded SIGTERM: a clean stop (exit 0, said so), not 143 or -15.
    assert res.exit_code == 0, out.getvalue()
    assert "server stopped (SIGTERM from specplug)." in out.getvalue()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgids[0], 0)


def test_sigterm_while_the_server_starts_is_a_stop_not_a_failure(stub, monkeypatch):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    monkeypatch.setenv("STUB_SLOW", "30")  # never healthy before the signal
    out = io.StringIO()
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        res = launcher.launch("vllm", plan=_plan(), timeout=60, out=out)
    finally:
        timer.cancel()  # had launch failed before the signal, it must not reach pytest
    assert res.exit_code == 0
    assert "stopped before the server was healthy" in out.getvalue()


def test_early_death_shows_last_log_lines_and_fails(stub, monkeypatch):
    monkeypatch.setenv("STUB_DIE", "1")
    out = io.StringIO()
    with pytest.raises(launcher.StackUnavailable) as exc:
        launcher.launch("vllm", plan=_plan(), timeout=60, out=out)
    assert "exited with code 3" in exc.value.message
    assert "CUDA error: out of memory" in exc.value.message


def test_missing_stack_is_an_error_with_the_install_command(stub):
    adapter, _ = stub
    adapter.version = None
    with pytest.raises(StackError) as exc:
        launcher.launch("vllm", plan=_plan(), timeout=5, out=io.StringIO())
    assert "not installed" in exc.value.message
    assert "pip install stub-stack" in exc.value.hint


def test_dry_run_prints_everything_and_starts_nothing(stub):
    adapter, _ = stub
    adapter.version = None
    out = io.StringIO()
    res = launcher.launch("vllm", plan=_plan(extra=["$(id)"]), dry_run=True, out=out)
    text = out.getvalue()
    assert res.server is None and "dry run: nothing started." in text
    assert "would fail: Stub is not installed here." in text
    assert res.exit_code == 1 and "would stop a start here (exit 1)" in text  # scripts see the failure
    assert "command: " in text and "'$(id)'" in text  # shown shell-quoted
    assert not adapter.stub.with_suffix(".json").exists()


def test_a_dry_run_whose_checks_pass_exits_0(stub):
    out = io.StringIO()
    res = launcher.launch("vllm", plan=_plan(), dry_run=True, out=out)
    assert res.exit_code == 0 and "would fail" not in out.getvalue(), out.getvalue()


def test_a_server_that_exits_by_itself_keeps_its_code(tmp_path):
    srv = launcher.Server([sys.executable, "-c", "import sys; sys.exit(3)"], dict(os.environ), str(tmp_path),
                          tmp_path / "server.log")
    out = io.StringIO()
    assert launcher._wait_forever(srv, out) == 3
    assert "server exited with code 3" in out.getvalue()
    srv.stop()


EMBEDDED = [sys.executable, "-m", "specplug.runtime.server", "--model", "m", "--port", "8000"]


def test_the_embedded_server_gets_the_shutdown_grace_and_the_kill_waits_past_it():
    from specplug.runtime.server import DEFAULT_SHUTDOWN_GRACE_S, parser

    argv, kill_after = launcher.with_shutdown_grace(EMBEDDED, None)  # the server's own default, said explicitly
    assert argv[-2:] == ["--shutdown-grace", f"{DEFAULT_SHUTDOWN_GRACE_S:g}"]
    assert kill_after >= DEFAULT_SHUTDOWN_GRACE_S + launcher.STOP_MARGIN
    argv, kill_after = launcher.with_shutdown_grace(EMBEDDED, 45)
    assert argv[-2:] == ["--shutdown-grace", "45"] and kill_after == 45 + launcher.STOP_MARGIN
    assert parser().parse_args(argv[3:]).shutdown_grace == 45  # the server's own CLI reads what we pass
    # One the user passed among the extra args wins, and the kill waits for it.
    argv, kill_after = launcher.with_shutdown_grace([*EMBEDDED, "--shutdown-grace=120"], 5)
    assert argv.count("--shutdown-grace=120") == 1 and "--shutdown-grace" not in argv
    assert kill_after == 120 + launcher.STOP_MARGIN
    # Other stacks take no such flag: their argv is left alone; a grace still delays the SIGKILL.
    assert launcher.with_shutdown_grace(["vllm", "serve", "m"], None) == (["vllm", "serve", "m"], launcher.STOP_GRACE)
    assert launcher.with_shutdown_grace(["vllm", "serve", "m"], 60) == (["vllm", "serve", "m"], 70)


def test_launch_hands_the_grace_to_the_server_it_supervises(stub):
    res = launcher.launch("vllm", plan=_plan(), wait=False, timeout=60, out=io.StringIO(), shutdown_grace=30)
    try:
        assert res.server.stop_grace == 30 + launcher.STOP_MARGIN
    finally:
        res.server.stop()


def test_no_gpu_is_an_error_unless_the_build_serves_on_cpu_or_allowed(stub):
    adapter, _ = stub
    adapter.cpu = False
    with pytest.raises(StackError) as exc:
        launcher.launch("vllm", plan=_plan(), timeout=5, out=io.StringIO())
    assert "No GPU found" in exc.value.message and "--allow-no-gpu" in exc.value.hint
    res = launcher.launch("vllm", plan=_plan(), timeout=60, out=io.StringIO(), allow_no_gpu=True, wait=False)
    res.server.stop()


def test_fallback_relaunches_the_plan_through_another_adapter(stub, tmp_path):
    adapter, registry = stub
    adapter.version = None  # the requested stack is missing
    fb_stub = tmp_path / "fb.py"
    fb_stub.write_text(STUB, encoding="utf-8")

    class Embedded(StubAdapter):
        name = "embedded"

        def fallback_plan(self, plan, reason):
            return plan.model_copy(update={"reasons": [*plan.reasons, f"fallback: {reason}"]})

        def build(self, plan, version):
            spec = super().build(plan, version)
            spec.stack = "embedded"
            return spec

    registry["embedded"] = Embedded(fb_stub)
    out = io.StringIO()
    res = launcher.launch("vllm", plan=_plan(), fallback="embedded", wait=False, timeout=60, out=out)
    try:
        assert res.fallback_used == "embedded"
        assert res.plan.stack.name == "embedded"
        assert "Launching with the embedded fallback instead." in out.getvalue()
        assert fb_stub.with_suffix(".json").exists()
    finally:
        res.server.stop()


def test_api_key_env_is_copied_at_launch_and_never_in_argv(stub, monkeypatch):
    adapter, _ = stub
    monkeypatch.setenv("MY_KEY", "s3cret-value")
    spec = LaunchSpec(stack="vllm", argv=["x"], env_from={"VLLM_API_KEY": "MY_KEY"})
    env = launcher.child_env(spec)
    assert env["VLLM_API_KEY"] == "s3cret-value"
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(Exception, match="MY_KEY is not set"):
        launcher.child_env(spec)


def test_an_invalid_plan_is_refused_before_preflight_even_in_a_dry_run(monkeypatch):
    from specplug.validate import InvalidPlan

    plan = make_plan("vllm", "0.27.1", method="draft_model", drafter="Qwen/Qwen2.5-0.5B-Instruct", k=4, tp=3,
                     draft_tensor_parallel_size=1)
    monkeypatch.setattr(launcher, "preflight", lambda *a, **k: pytest.fail("preflight ran for an invalid plan"))
    out = io.StringIO()
    with pytest.raises(InvalidPlan) as exc:
        launcher.launch("vllm", plan=plan, dry_run=True, out=out)
    assert len(exc.value.problems) == 2 and "different tokenizers" in exc.value.message
    assert out.getvalue() == ""  # nothing described, nothing started
    # an invalid plan is not "unavailable": no fallback stands in for it
    with pytest.raises(InvalidPlan):
        launcher.launch("vllm", plan=plan, dry_run=True, fallback="embedded", out=io.StringIO())


def test_a_second_ctrl_c_while_stopping_kills_the_whole_group(tmp_path):
    # A server (and its child) that ignores SIGTERM, as one stuck in a CUDA call does.
    code = textwrap.dedent(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(tmp_path / "child")!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    srv = launcher.Server([sys.executable, "-c", code], dict(os.environ), str(tmp_path), tmp_path / "server.log")
    pgid = srv.pgid
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "child").is_file() or not (tmp_path / "child").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int((tmp_path / "child").read_text())
        real_wait, calls = srv.proc.wait, []

        def interrupted(timeout=None):
            if not calls:  # the second Ctrl-C lands while stop() waits out the grace period
                calls.append(timeout)
                raise KeyboardInterrupt
            return real_wait(timeout=timeout)

        srv.proc.wait = interrupted
        with pytest.raises(KeyboardInterrupt):
            srv.stop(grace=30)
        assert calls == [30] and srv.proc.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 5  # the child, killed too, is reaped by init
        while os.path.exists(f"/proc/{child}") and "Z" not in _state(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{child}") or "Z" in _state(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
