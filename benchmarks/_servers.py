"""Starting and stopping a server under benchmark: a free local port, a process in its own session with its
output in a log file, healthy once /health answers 200."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

HEALTHY_WITHIN_S = 900  # vLLM-CPU compiles its kernels on first start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(argv: list[str], env: dict[str, str], cwd: Path, log: Path, name: str, port: int) -> tuple[subprocess.Popen, str]:
    """Run ``argv`` and wait until it serves /health on ``port``; (process, base URL). A server that exits or
    stays unhealthy raises with the end of its log."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        time.sleep(1)
    stop(proc)
    raise RuntimeError(f"{name} not healthy after {HEALTHY_WITHIN_S} s; log: {log}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's session, SIGKILL after a minute."""
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
