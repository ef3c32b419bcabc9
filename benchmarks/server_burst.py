"""Burst benchmark for the embedded server: 1000 concurrent keep-alive clients with a fault mix.

    .venv/bin/python benchmarks/server_burst.py                          # smollm2-135m, 1000 clients
    .venv/bin/python benchmarks/server_burst.py --clients 200 --json     # smaller, with the raw figures

Starts `python -m specplug.runtime.server` on 127.0.0.1, then runs every client at once over a few shared
httpx.AsyncClient pools, so connections are kept alive and reused (a retry after a 503 usually goes out on
the connection that carried the 503). The mix, by share of clients: completions, chats and full streams (the
model requests; a 503 is retried after its Retry-After), streams dropped after their first chunk, malformed
bodies, oversized bodies, and /health and /metrics pollers that run for the whole burst.

Prints model requests sent / completed / 4xx / 503 (given up after --max-retries) / read errors, what the
other clients saw, and /health p50/p99/max latency twice: as a separate process probing every 0.1 s sees it
(a load balancer's view of the server), and as the pollers inside the burst see it (which adds the loaded
client's own event-loop lag). Exits 1 if any request was lost (a transport error, a 5xx other than 503, an
answer not in OpenAI's error shape) or the prober ever waited longer than --health-slo for /health.
Loopback only; bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling _servers and _prompts
from _servers import free_port, start, stop  # noqa: E402

from specplug.runtime.serving.loadgen import require_loopback  # noqa: E402

PROMPTS = ["Hello, my name is", "The capital of France is", "1, 2, 3, 4,", "Once upon a time"]
# Shares of the clients, in order; whatever is left after rounding goes to completions.
MIX = {"completion": 0.30, "chat": 0.15, "stream": 0.15, "dropped_stream": 0.10, "malformed": 0.10,
       "oversized": 0.05, "health": 0.10, "metrics": 0.05}
MODEL_ROLES = ("completion", "chat", "stream")
MALFORMED = [
    b"{",  # not JSON
    b'{"model": "MODEL", "prompt": 5}',  # wrong type
    b'{"model": "no-such-model", "prompt": "x"}',  # unknown model: 404
    b'{"model": "MODEL", "prompt": "x", "max_tokens": -3}',  # out of range
]


@dataclass
class Tally:
    """What every client saw; one instance for the whole burst (asyncio: no locking needed)."""

    outcomes: Counter = field(default_factory=Counter)  # (role, outcome) -> count
    retried_503: int = 0
    bad_503: int = 0  # 503s without Retry-After or not in OpenAI's error shape
    health_s: list[float] = field(default_factory=list)
    health_bad: Counter = field(default_factory=Counter)
    metrics_s: list[float] = field(default_factory=list)
    client_lag_s: float = 0.0  # the burst's own event loop, late by this much at worst (inflates its timings)
    errors: list[str] = field(default_factory=list)

    def note(self, role: str, outcome: str, detail: str = "") -> None:
        self.outcomes[(role, outcome)] += 1
        if detail and len(self.errors) < 20:
            self.errors.append(f"{role}: {outcome}: {detail}"[:300])

    def count(self, roles: tuple[str, ...], outcome: str | None = None) -> int:
        return sum(n for (r, o), n in self.outcomes.items() if r in roles and (outcome is None or o == outcome))


def is_openai_error(body: object) -> bool:
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and {"message", "type", "code"} <= set(err) and bool(err["message"])


def retry_after(headers) -> float | None:
    try:
        return float(headers["retry-after"])
    except (KeyError, ValueError):
        return None


def roles_for(clients: int) -> list[str]:
    counts = {role: int(clients * share) for role, share in MIX.items()}
    counts["completion"] += clients - sum(counts.values())
    return [role for role, n in counts.items() for _ in range(n)]


def request_for(role: str, model: str, i: int, max_tokens: int) -> tuple[str, dict]:
    prompt = PROMPTS[i % len(PROMPTS)]
    if role == "chat":
        return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": prompt}],
                                        "max_tokens": max_tokens, "temperature": 0}
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if role in ("stream", "dropped_stream"):
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return "/v1/completions", body


async def read_stream(resp, drop: bool) -> str:
    """'completed' when the stream ends with [DONE] after a finish_reason; 'dropped' once a chunk came and drop."""
    reason = None
    async for line in resp.aiter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return "completed" if reason else "no_finish_reason"
        chunk = json.loads(line[6:])
        if "error" in chunk:
            return "stream_error"
        if drop:
            return "dropped"  # leaving the context unread closes this connection mid-stream
        for c in chunk.get("choices", []):
            reason = c.get("finish_reason") or reason
    return "no_done"


async def model_request(client, role: str, path: str, body: dict, tally: Tally, max_retries: int) -> None:
    """One model request, retried after each 503 as its Retry-After says; its final outcome is tallied."""
    import httpx

    for _attempt in range(max_retries + 1):
        try:
            async with client.stream("POST", path, json=body) as r:
                if r.status_code == 200:
                    outcome = await read_stream(r, role == "dropped_stream") if body.get("stream") else await whole(r)
                    tally.note(role, outcome, "" if outcome in ("completed", "dropped") else outcome)
                    return
                await r.aread()
        except httpx.TransportError as exc:
            tally.note(role, "read_error", f"{type(exc).__name__}: {exc}")
            return
        if not is_json_error(r):
            tally.note(role, "not_openai_error", f"HTTP {r.status_code}: {r.text[:120]}")
            return
        if r.status_code != 503:
            tally.note(role, "4xx" if r.status_code < 500 else "5xx", f"HTTP {r.status_code}: {r.text[:120]}")
            return
        wait = retry_after(r.headers)
        tally.bad_503 += wait is None
        tally.retried_503 += 1
        await asyncio.sleep(wait or 1.0)
    tally.note(role, "503", "gave up after retries")


async def whole(r) -> str:
    await r.aread()
    body = r.json()
    choice = body["choices"][0]
    ok = choice["finish_reason"] in ("stop", "length") and body["usage"]["completion_tokens"] > 0
    return "completed" if ok else "incomplete"


def is_json_error(r) -> bool:
    try:
        return is_openai_error(r.json())
    except ValueError:
        return False


async def bad_requests(client, role: str, model: str, max_body: int, tally: Tally, rounds: int) -> None:
    """Malformed or oversized bodies, several on one kept-alive connection; each must be an OpenAI 4xx."""
    import httpx

    for k in range(rounds):
        if role == "malformed":
            content = MALFORMED[k % len(MALFORMED)].replace(b"MODEL", model.encode())
        else:
            content = b'{"model": "' + model.encode() + b'", "prompt": "' + b"x" * (max_body + 1024) + b'"}'
        if role == "oversized" and k % 2:
            payload = content

            async def chunks(data: bytes = payload):  # no Content-Length: the server must count, not trust
                for i in range(0, len(data), 65536):
                    yield data[i:i + 65536]

            content = chunks()
        try:
            r = await client.post("/v1/completions", content=content, headers={"content-type": "application/json"})
        except httpx.TransportError as exc:
            tally.note(role, "read_error", f"{type(exc).__name__}: {exc}")
            continue
        if 400 <= r.status_code < 500 and is_json_error(r):
            tally.note(role, "4xx")
        else:
            tally.note(role, "unexpected", f"HTTP {r.status_code}: {r.text[:120]}")


async def poll(client, role: str, tally: Tally, done: asyncio.Event, every_s: float) -> None:
    """GET /health or /metrics until the burst is over, timing each answer."""
    import httpx

    path = "/health" if role == "health" else "/metrics"
    while not done.is_set():
        t0 = time.perf_counter()
        try:
            r = await client.get(path)
        except httpx.TransportError as exc:
            tally.note(role, "read_error", f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(every_s)
            continue
        took = time.perf_counter() - t0
        (tally.health_s if role == "health" else tally.metrics_s).append(took)
        tally.note(role, "ok" if r.status_code == 200 else f"HTTP {r.status_code}")
        await asyncio.sleep(every_s)


async def watch_lag(tally: Tally, done: asyncio.Event, tick_s: float = 0.05) -> None:
    """How late this process's event loop runs: the burst's own timings include that much client lag."""
    while not done.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(tick_s)
        tally.client_lag_s = max(tally.client_lag_s, time.perf_counter() - t0 - tick_s)


async def burst(base: str, args: argparse.Namespace) -> tuple[Tally, float]:
    import httpx

    require_loopback(base)
    tally = Tally()
    roles = roles_for(args.clients)
    pools = [
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(args.time_budget),
                          limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        for _ in range(args.pools)
    ]
    done = asyncio.Event()

    async def client(i: int, role: str) -> None:
        pool = pools[i % len(pools)]
        if role in ("health", "metrics"):
            await poll(pool, role, tally, done, args.poll_every)
        elif role in ("malformed", "oversized"):
            await bad_requests(pool, role, args.model, args.max_body_bytes, tally, args.bad_rounds)
        else:
            for j in range(args.requests_per_client):
                path, body = request_for(role, args.model, i + j, args.max_tokens)
                await model_request(pool, role, path, body, tally, args.max_retries)

    t0 = time.perf_counter()
    pollers = [asyncio.create_task(client(i, r)) for i, r in enumerate(roles) if r in ("health", "metrics")]
    pollers.append(asyncio.create_task(watch_lag(tally, done)))
    workers = [client(i, r) for i, r in enumerate(roles) if r not in ("health", "metrics")]
    try:
        await asyncio.wait_for(asyncio.gather(*workers), args.time_budget)
    finally:
        done.set()
        await asyncio.gather(*pollers, return_exceptions=True)
        for p in pools:
            await p.aclose()
    return tally, time.perf_counter() - t0


def probe_health(base: str, every_s: float, stop, out) -> None:
    """In its own process: GET /health on a new connection every ``every_s`` until ``stop`` is set, as a
    Kubernetes probe does; sends (latencies, failures) down ``out``. The server's view, without client lag."""
    url = urlparse(base)
    latencies: list[float] = []
    failures: list[str] = []
    while not stop.is_set():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            latencies.append(time.perf_counter() - t0)
            if resp.status != 200:
                failures.append(f"HTTP {resp.status}")
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()
        stop.wait(every_s)
    out.send((latencies, failures))


def start_prober(base: str) -> tuple:
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=probe_health, args=(base, 0.1, stop, send), daemon=True)
    proc.start()
    return proc, stop, recv


def stop_prober(prober: tuple) -> tuple[list[float], list[str]]:
    proc, stop, recv = prober
    stop.set()
    result = recv.recv() if recv.poll(60) else ([], ["prober sent nothing"])
    proc.join(10)
    return result


def server_argv(args: argparse.Namespace, port: int) -> list[str]:
    argv = [sys.executable, "-m", "specplug.runtime.server", "--model", args.model, "--method", args.method,
            "--port", str(port), "--max-batch-size", str(args.max_batch_size), "--max-queue", str(args.max_queue),
            "--max-body-bytes", str(args.max_body_bytes), "--max-tokens-limit", "64", "--log-level", "warning"]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    return argv


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(t: Tally, wall_s: float, probe: tuple[list[float], list[str]], args: argparse.Namespace) -> dict:
    model = MODEL_ROLES
    bad = ("malformed", "oversized")
    return {
        "clients": args.clients,
        "wall_s": round(wall_s, 1),
        "model_sent": t.count(model),
        "model_completed": t.count(model, "completed"),
        "model_4xx": t.count(model, "4xx"),
        "model_503_final": t.count(model, "503"),
        "model_read_errors": t.count(model, "read_error"),
        "model_other_failures": t.count(model) - sum(t.count(model, o) for o in ("completed", "4xx", "503", "read_error")),
        "retries_after_503": t.retried_503,
        "503_without_retry_after": t.bad_503,
        "dropped_streams": t.count(("dropped_stream",), "dropped"),
        "dropped_stream_failures": t.count(("dropped_stream",)) - t.count(("dropped_stream",), "dropped"),
        "bad_bodies_sent": t.count(bad),
        "bad_bodies_4xx": t.count(bad, "4xx"),
        "bad_bodies_read_errors": t.count(bad, "read_error"),
        "health_probe_polls": len(probe[0]),
        "health_probe_failures": len(probe[1]),
        "health_probe_p50_s": round(pct(probe[0], 50), 3),
        "health_probe_p99_s": round(pct(probe[0], 99), 3),
        "health_probe_max_s": round(max(probe[0], default=float("nan")), 3),
        "health_polls": len(t.health_s),
        "health_non_200": t.count(("health",)) - t.count(("health",), "ok"),
        "health_p50_s": round(pct(t.health_s, 50), 3),
        "health_p99_s": round(pct(t.health_s, 99), 3),
        "health_max_s": round(max(t.health_s, default=float("nan")), 3),
        "metrics_polls": len(t.metrics_s),
        "metrics_max_s": round(max(t.metrics_s, default=float("nan")), 3),
        "client_loop_lag_max_s": round(t.client_lag_s, 3),
        "read_errors_all": sum(n for (_, o), n in t.outcomes.items() if o == "read_error"),
        "first_errors": t.errors[:8] + probe[1][:3],
    }


def print_report(row: dict, args: argparse.Namespace) -> None:
    print(f"model {args.model} ({args.method}), {row['clients']} clients over {args.pools} keep-alive pools, "
          f"batch {args.max_batch_size}, queue {args.max_queue}, max_tokens {args.max_tokens}, {os.cpu_count()} CPUs, "
          f"{row['wall_s']} s")
    print(f"model requests: sent {row['model_sent']}  completed {row['model_completed']}  4xx {row['model_4xx']}  "
          f"503 (gave up) {row['model_503_final']}  read errors {row['model_read_errors']}  "
          f"other failures {row['model_other_failures']}  (503s retried {row['retries_after_503']}, "
          f"without Retry-After {row['503_without_retry_after']})")
    print(f"dropped streams: {row['dropped_streams']} (failures {row['dropped_stream_failures']});  "
          f"malformed/oversized: sent {row['bad_bodies_sent']}  4xx {row['bad_bodies_4xx']}  "
          f"read errors {row['bad_bodies_read_errors']}")
    print(f"/health, separate prober: {row['health_probe_polls']} polls  p50 {row['health_probe_p50_s']} s  "
          f"p99 {row['health_probe_p99_s']} s  max {row['health_probe_max_s']} s  failures {row['health_probe_failures']}")
    print(f"/health, pollers in the burst: {row['health_polls']} polls  p50 {row['health_p50_s']} s  "
          f"p99 {row['health_p99_s']} s  max {row['health_max_s']} s  non-200 {row['health_non_200']};  "
          f"/metrics: {row['metrics_polls']} polls  max {row['metrics_max_s']} s;  "
          f"client event loop late by up to {row['client_loop_lag_max_s']} s")
    print(f"read errors (all clients): {row['read_errors_all']}")
    for e in row["first_errors"]:
        print("  " + e)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--method", default="ngram", choices=("none", "ngram", "draft_model"))
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--pools", type=int, default=10, help="httpx.AsyncClient pools the clients share.")
    p.add_argument("--requests-per-client", type=int, default=1, help="Model requests per model client.")
    p.add_argument("--bad-rounds", type=int, default=3, help="Requests per malformed/oversized client.")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--max-queue", type=int, default=256)
    p.add_argument("--max-body-bytes", type=int, default=1 << 16)
    p.add_argument("--max-retries", type=int, default=100, help="503s a model client retries before giving up.")
    p.add_argument("--poll-every", type=float, default=1.0, help="Seconds between a burst poller's requests.")
    p.add_argument("--health-slo", type=float, default=1.0, help="Slowest /health answer the prober may see (s).")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--time-budget", type=float, default=600)
    p.add_argument("--log-dir", default="/tmp")
    p.add_argument("--json", action="store_true", help="Print the figures as JSON too.")
    args = p.parse_args()

    port = free_port()
    log = Path(args.log_dir) / "server-burst.log"
    proc, base = start(server_argv(args, port), {**os.environ, "HF_HUB_OFFLINE": "1"}, REPO, log, "server", port)
    try:
        prober = start_prober(base)
        try:
            tally, wall = asyncio.run(burst(base, args))
        finally:
            probe = stop_prober(prober)
    finally:
        stop(proc)
    row = report(tally, wall, probe, args)
    print_report(row, args)
    print(f"server log: {log}")
    if args.json:
        print(json.dumps(row, indent=2))
    lost = row["read_errors_all"] + row["model_other_failures"] + row["dropped_stream_failures"]
    lost += row["bad_bodies_sent"] - row["bad_bodies_4xx"] + row["503_without_retry_after"]
    if lost or row["health_probe_failures"] or not row["health_probe_max_s"] <= args.health_slo:
        sys.exit(1)


if __name__ == "__main__":
    main()
