"""SIGTERM drains the embedded server: a real `python -m specplug.runtime.server` process on SmolLM2-135M.

With requests in flight (a long stream, a long completion, a short completion and one still queued), SIGTERM
must: refuse new connections, answer a new request on a connection already open with an OpenAI-shaped 503
(Retry-After, Connection: close), say 'draining' on /health, let the short request finish, then end the
stream with an SSE error event and `data: [DONE]` and the others with OpenAI-shaped 503s once the grace is
over; exit soon after, with no traceback in the log. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
GRACE_S = 8.0
STARTUP_S = 600  # first start converts the GGUF once (cached afterwards)
LONG = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True, "temperature": 0}
# Long enough to be decoding when the signal comes, short enough to finish within the grace.
SHORT = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4, "ignore_eos": True, "temperature": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path, smollm2_folder):
    port = _free_port()
    log_path = tmp_path / "server.log"
    argv = [sys.executable, "-m", "specplug.runtime.server", "--model", MODEL, "--method", "ngram",
            "--port", str(port), "--max-batch-size", "3", "--max-tokens-limit", "2048",
            "--shutdown-grace", str(GRACE_S), "--log-level", "info"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, base, log_path)
        yield proc, base, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _wait_healthy(proc: subprocess.Popen, base: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    pytest.fail(f"server not healthy after {STARTUP_S}s:\n{log_path.read_text()[-3000:]}")


def _openai_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert {"message", "type", "code"} <= set(err) and err["message"]
    assert err["code"] == code
    return err


async def _stream(client: httpx.AsyncClient, started: asyncio.Event) -> list:
    """Every SSE payload of a long stream ('[DONE]' as a string); sets ``started`` at the first text."""
    events: list = []
    async with client.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                events.append(data if data == "[DONE]" else json.loads(data))
                started.set()
    return events


async def _in_flight(base: str, running: int, waiting: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:
        for _ in range(1200):
            health = (await c.get("/health")).json()
            if health["running"] >= running and health["waiting"] >= waiting:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"never {running} requests decoding and {waiting} waiting")


async def _scenario(proc: subprocess.Popen, base: str) -> dict:
    out: dict = {}
    async with (
        httpx.AsyncClient(base_url=base, timeout=120) as client,
        httpx.AsyncClient(base_url=base, timeout=30) as idle_api,
        httpx.AsyncClient(base_url=base, timeout=30) as idle_health,
    ):
        # Two connections kept alive and idle from before the signal.
        assert (await idle_api.get("/v1/models")).status_code == 200
        assert (await idle_health.get("/health")).status_code == 200
        started = asyncio.Event()
        stream = asyncio.create_task(_stream(client, started))
        await asyncio.wait_for(started.wait(), 120)
        long = asyncio.create_task(client.post("/v1/completions", json=LONG))
        await _in_flight(base, running=2, waiting=0)
        short = asyncio.create_task(client.post("/v1/completions", json=SHORT))
        await _in_flight(base, running=3, waiting=0)
        queued = asyncio.create_task(client.post("/v1/completions", json=LONG))  # batch of 3: this one waits
        await _in_flight(base, running=3, waiting=1)

        os.kill(proc.pid, signal.SIGTERM)
        out["signalled"] = time.monotonic()
        await asyncio.sleep(0.5)
        out["new_request"] = await idle_api.post("/v1/completions", json=SHORT)
        out["health"] = await idle_health.get("/health")
        try:
            async with httpx.AsyncClient(base_url=base, timeout=5) as fresh:
                await fresh.get("/health")
            out["new_connection"] = "accepted"
        except httpx.ConnectError:
            out["new_connection"] = "refused"
        out["short"] = await short
        out["short_done"] = time.monotonic()
        out["stream"], out["long"], out["queued"] = await asyncio.gather(stream, long, queued)
        out["ended"] = time.monotonic()
    return out


def test_sigterm_drains_in_flight_requests_then_ends_them_openai_shaped(server):
    proc, base, log_path = server
    out = asyncio.run(asyncio.wait_for(_scenario(proc, base), 300))

    # New work after the signal: no new connections; an open one gets a 503 and is told to close.
    assert out["new_connection"] == "refused"
    r = out["new_request"]
    _openai_error(r, 503, "server_shutting_down")
    assert r.headers["retry-after"] and r.headers["connection"] == "close"
    assert out["health"].status_code == 503 and out["health"].json()["status"] == "draining"

    # In flight at the signal and quick: finished normally, within the grace.
    assert out["short"].status_code == 200, out["short"].text
    assert out["short"].json()["choices"][0]["finish_reason"] == "length"
    assert out["short_done"] - out["signalled"] < GRACE_S

    # Still running (or queued) when the grace ran out: ended in OpenAI's shapes, soon after it.
    assert GRACE_S - 0.5 < out["ended"] - out["signalled"] < GRACE_S + 5
    for name in ("long", "queued"):
        _openai_error(out[name], 503, "server_shutting_down")
        assert out[name].headers["retry-after"]
    events = out["stream"]
    assert events[-1] == "[DONE]"
    assert set(events[-2]) == {"error"}, events[-3:]
    err = events[-2]["error"]
    assert err["code"] == "server_shutting_down" and err["message"] and err["type"]
    assert any(e.get("choices") and e["choices"][0]["text"] for e in events[:-2])  # it had been streaming

    # The process is gone, and said why without a traceback.
    code = proc.wait(15)
    assert code in (0, -signal.SIGTERM), code
    log = log_path.read_text()
    assert "draining" in log
    for bad in ("Traceback", "CancelledError", "ERROR", "Internal Server Error"):
        assert bad not in log, log[-3000:]
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/health", timeout=2)
