"""A pair of real embedded servers (SmolLM2-135M on the CPU): n-gram speculation on, and off."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(method: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    argv = [
        sys.executable, "-m", "specplug.runtime.server", "--model", "smollm2-135m", "--method", method,
        "--num-speculative-tokens", "4", "--port", str(port), "--threads", "2", "--log-level", "warning",
        # A fixed k, as the stacks run it: calibrate compares with the policy's fixed-k estimate.
        "--no-pace",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    fh = log.open("w")
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def _wait(proc: subprocess.Popen, url: str, log: Path, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"embedded server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"embedded server not healthy after {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def embedded_pair(tmp_path_factory):
    """(speculative URL, baseline URL): both load at once, two threads each (they take turns: bench and verify
    send to one server at a time), stopped at the end."""
    pytest.importorskip("torch", reason="the embedded server needs specplug[runtime]")
    logs = tmp_path_factory.mktemp("embedded")
    spec, spec_url = _start("ngram", logs / "ngram.log")
    base, base_url = _start("none", logs / "none.log")
    try:
        _wait(spec, spec_url, logs / "ngram.log")
        _wait(base, base_url, logs / "none.log")
        yield spec_url, base_url
    finally:
        _stop(spec)
        _stop(base)
