"""A bounded, loopback-only load generator for the embedded server (used by the load test and benchmark).

N concurrent clients each send a fixed number of requests back to back; every answer is checked for
completeness (HTTP 200, a finish_reason, usage that matches the text), so "zero errors" means every response
was whole, not merely that sockets stayed open.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import statistics
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

LOOPBACK_NAMES = {"localhost"}


def require_loopback(base_url: str) -> None:
    """Load is only ever sent to this machine."""
    host = urlparse(base_url).hostname or ""
    if host in LOOPBACK_NAMES:
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"refusing to send load to {host!r}: only loopback addresses (127.0.0.0/8, ::1) are allowed")


@dataclass
class LoadResult:
    clients: int
    requests: int = 0
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    wall_s: float = 0.0

    @property
    def requests_per_s(self) -> float:
        return self.ok / self.wall_s if self.wall_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0

    def pct(self, q: float, values: list[float] | None = None) -> float:
        vals = sorted(self.latencies if values is None else values)
        if not vals:
            return float("nan")
        if len(vals) == 1:
            return vals[0]
        return statistics.quantiles(vals, n=100, method="inclusive")[int(q) - 1] if 1 <= q <= 99 else vals[-1]

    def summary(self) -> dict:
        return {
            "clients": self.clients,
            "requests": self.requests,
            "ok": self.ok,
            "errors": len(self.errors),
            "wall_s": round(self.wall_s, 2),
            "requests_per_s": round(self.requests_per_s, 3),
            "p50_latency_s": round(self.pct(50), 3),
            "p99_latency_s": round(self.pct(99), 3),
            "p50_ttft_s": round(self.pct(50, self.ttfts), 3) if self.ttfts else None,
            "completion_tokens": self.completion_tokens,
            "tokens_per_s": round(self.tokens_per_s, 2),
        }


async def _one(client, url: str, payload: dict, stream: bool) -> tuple[float, float | None, int]:
    """(latency, ttft, completion tokens); raises AssertionError with the reason when the answer is incomplete."""
    t0 = time.perf_counter()
    if not stream:
        r = await client.post(url, json=payload)
        latency = time.perf_counter() - t0
        assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:200]}"
        body = r.json()
        choice = body["choices"][0]
        assert choice["finish_reason"] in ("stop", "length"), f"finish_reason {choice['finish_reason']!r}"
        text = choice.get("text", choice.get("message", {}).get("content"))
        assert isinstance(text, str), "no text"
        n = body["usage"]["completion_tokens"]
        if choice["finish_reason"] == "length":
            assert n == payload["max_tokens"], f"length-finished with {n} of {payload['max_tokens']} tokens"
        return latency, None, n
    ttft = None
    done = False
    usage = None
    reason = None
    async with client.stream("POST", url, json={**payload, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, f"HTTP {r.status_code}"
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if ttft is None and chunk.get("choices"):
                c = chunk["choices"][0]
                if c.get("text") or (c.get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - t0
            for c in chunk.get("choices", []):
                reason = c.get("finish_reason") or reason
            usage = chunk.get("usage") or usage
    assert done, "stream ended without [DONE]"
    assert reason in ("stop", "length"), f"finish_reason {reason!r}"
    assert usage is not None, "no usage chunk"
    return time.perf_counter() - t0, ttft, usage["completion_tokens"]


async def run_load(
    base_url: str,
    model: str,
    prompts: list[str],
    *,
    clients: int = 64,
    requests_per_client: int = 1,
    max_tokens: int = 32,
    temperature: float = 0.0,
    stream_every: int = 0,
    timeout_s: float = 600.0,
    api_key: str | None = None,
) -> LoadResult:
    """Run the load; ``stream_every=k`` makes every k-th request a streaming one (0: none)."""
    import httpx

    require_loopback(base_url)
    res = LoadResult(clients=clients)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    url = base_url.rstrip("/") + "/v1/completions"
    deadline = time.monotonic() + timeout_s

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, headers=headers) as client:

        async def worker(i: int) -> None:
            for j in range(requests_per_client):
                if time.monotonic() > deadline:
                    res.errors.append("time budget exhausted")
                    return
                n = i * requests_per_client + j
                payload = {"model": model, "prompt": prompts[n % len(prompts)], "max_tokens": max_tokens, "temperature": temperature}
                stream = bool(stream_every) and n % stream_every == 0
                res.requests += 1
                try:
                    latency, ttft, ntok = await _one(client, url, payload, stream)
                except Exception as exc:  # counted and reported, never raised: the run goes on
                    res.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                res.ok += 1
                res.latencies.append(latency)
                if ttft is not None:
                    res.ttfts.append(ttft)
                res.completion_tokens += ntok

        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(clients))), timeout_s + 30)
        res.wall_s = time.perf_counter() - t0
    return res
