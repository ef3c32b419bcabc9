"""The launcher against a harmless stub server: argv reaches it verbatim (no shell), health wait, early death,
signals, no orphans, missing stacks, dry runs and the fallback hook."""

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
from specplug.adapter import BaseAdapter, LaunchSpec
from specplug.errors import StackError

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
    res.server.stop(grace=5)
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
    assert res.exit_code in (143, 1, 0)  # the stub dies of SIGTERM (143) or exits on it
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
    assert res.exit_code == 143
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
    assert "command: " in text and "'$(id)'" in text  # shown shell-quoted
    assert not adapter.stub.with_suffix(".json").exists()


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

    plan = make_plan("vllm", "0.32.0", method="draft_model", drafter="Qwen/Qwen2.5-0.5B-Instruct", k=4, tp=3,
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
