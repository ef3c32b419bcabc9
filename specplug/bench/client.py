"""A small async OpenAI-compatible client: streamed requests with timings, greedy completions with token
detail, and ``/metrics`` scrapes. httpx is imported here only, when a bench/verify/calibrate command runs."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

try:
    import httpx
except ImportError:  # the [bench] extra is not installed
    from specplug.bench import missing_httpx

    raise missing_httpx() from None

from specplug.bench.metrics import Snapshot, parse_exposition
from specplug.bench.prompts import Prompt
from specplug.errors import SpecplugError

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


@dataclass
class Endpoint:
    """An OpenAI-compatible server: ``root`` is scheme://host:port[/prefix] without the trailing /v1."""

    root: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    # Set False once the server refuses logprobs, so verify stops asking (and paying a second request).
    logprobs: bool = True

    @property
    def v1(self) -> str:
        return self.root + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.root + "/metrics"

    @property
    def loopback(self) -> bool:
        return (urlsplit(self.root).hostname or "") in _LOOPBACK

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def parse_endpoint(url: str, what: str = "--endpoint") -> str:
    """Normalise a user URL to the server root; a bad URL is a SpecplugError naming the flag."""
    text = url.strip()
    if "://" not in text and text and not text.startswith("/"):
        text = "http://" + text  # "127.0.0.1:8000" is what people type
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    host_ok = bool(parts.hostname) and (
        re.fullmatch(r"[A-Za-z0-9._-]+", parts.hostname or "") is not None or ":" in (parts.hostname or "")
    )
    if parts.scheme not in ("http", "https") or not host_ok or port == -1:
        raise SpecplugError(
            f"{what} '{url}' is not a usable URL.", "Give the server's base URL, e.g. http://127.0.0.1:8000 (or .../v1)."
        )
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/v1"):
        path = path.removesuffix(suffix)
    return f"{parts.scheme}://{parts.netloc}{path}"


def api_key_from_env(var: str | None) -> str | None:
    """The API key named by --api-key-env: read from the environment, never stored or printed."""
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise SpecplugError(f"--api-key-env names {var}, but that environment variable is empty or unset.")
    return key


def make_client(endpoint: Endpoint, concurrency: int, timeout_s: float) -> httpx.AsyncClient:
    # Loopback servers ignore proxy variables: a corporate HTTP_PROXY would otherwise swallow 127.0.0.1.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
        limits=httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2),
        trust_env=not endpoint.loopback,
        headers=endpoint.headers(),
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}".strip()


async def preflight(client: httpx.AsyncClient, ep: Endpoint, what: str) -> str:
    """Check the server answers and return the model to request (``--model``, else the first it serves)."""
    try:
        r = await client.get(ep.v1 + "/models", timeout=15.0)
    except httpx.HTTPError as exc:
        raise SpecplugError(
            f"Cannot reach {what} {ep.root}: {_describe(exc)}.", "Is the server running? Check the URL and port."
        ) from None
    if r.status_code in (401, 403):
        raise SpecplugError(f"{what} {ep.root} refused the request (HTTP {r.status_code}).", "Pass --api-key-env VAR.")
    if ep.model:
        return ep.model
    try:
        data = r.json()["data"]
        return str(data[0]["id"])
    except Exception:
        raise SpecplugError(
            f"{what} {ep.root}/v1/models did not list a model (HTTP {r.status_code}).", "Pass --model NAME."
        ) from None


@dataclass
class RequestResult:
    prompt_id: str
    start: float
    end: float
    ttft: float | None = None
    output_tokens: int = 0
    text: str = ""
    error: str | None = None
    # The response's own acceptance block where the server sends one (llama.cpp's timings, vLLM's
    # metrics.speculative_decoding): tokens drafted and accepted for this request alone.
    timings: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (the decode speed speculation changes)."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.end - self.start - self.ttft) / (self.output_tokens - 1)


def _body(ep: Endpoint, p: Prompt, api: str, max_tokens: int, temperature: float, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ep.model,
        "max_tokens": min(max_tokens, p.max_tokens or max_tokens),
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if api == "chat":
        body["messages"] = p.as_messages()
    else:
        body["prompt"] = p.text()
    return body


@cache
def _acceptance_blocks() -> tuple[tuple[str, ...], ...]:
    """Where the stacks put a response's acceptance block (their metric declarations' ResponseTimings.block)."""
    from specplug.bench.metrics import declared

    return tuple(dict.fromkeys(m.timings.block for m in declared().values() if m.timings is not None))


def acceptance_block(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """The per-request acceptance block of a response or streamed chunk, None when it carries none."""
    for path in _acceptance_blocks():
        node: Any = chunk
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    return None


def _route(ep: Endpoint, api: str) -> str:
    return ep.v1 + ("/chat/completions" if api == "chat" else "/completions")


def _chunk_text(chunk: dict[str, Any], api: str) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if api == "chat":
        delta = c.get("delta") or {}
        return (delta.get("content") or "") + (delta.get("reasoning_content") or "")
    return c.get("text") or ""


async def stream_request(
    client: httpx.AsyncClient, ep: Endpoint, p: Prompt, api: str, max_tokens: int, temperature: float
) -> RequestResult:
    """One streamed request, timed: TTFT at the first non-empty text, tokens from ``usage`` when sent."""
    start = time.perf_counter()
    res = RequestResult(prompt_id=p.id, start=start, end=start)
    chunks = 0
    usage_tokens: int | None = None
    parts: list[str] = []
    try:
        async with client.stream("POST", _route(ep, api), json=_body(ep, p, api, max_tokens, temperature, True)) as r:
            if r.status_code != 200:
                body = (await r.aread()).decode("utf-8", "replace")[:300]
                res.error = f"HTTP {r.status_code}: {body}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    continue
                if "error" in chunk and not chunk.get("choices"):
                    res.error = f"server error: {str(chunk['error'])[:300]}"
                    break
                text = _chunk_text(chunk, api)
                if text:
                    if res.ttft is None:
                        res.ttft = time.perf_counter() - start
                    chunks += 1
                    parts.append(text)
                usage = chunk.get("usage")
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
                block = acceptance_block(chunk)
                if block is not None:
                    res.timings = block
    except httpx.HTTPError as exc:
        res.error = _describe(exc)
    finally:
        res.end = time.perf_counter()
    res.text = "".join(parts)
    # Without usage, one streamed chunk is about one token (speculative servers may send several per chunk).
    res.output_tokens = usage_tokens if usage_tokens is not None else chunks
    return res


@dataclass
class Completion:
    """A non-streamed greedy completion with its tokens where the server told them."""

    text: str
    tokens: list[str] | None = None
    # Per position: the alternatives the server listed with their logprobs (for near-tie detection).
    top: list[dict[str, float]] | None = None
    finish_reason: str | None = None
    error: str | None = None


def _parse_logprobs(choice: dict[str, Any], api: str) -> tuple[list[str] | None, list[dict[str, float]] | None]:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None, None
    if api == "chat":
        content = lp.get("content")
        if not isinstance(content, list):
            return None, None
        tokens = [str(c.get("token", "")) for c in content]
        top = [
            {str(t.get("token", "")): float(t.get("logprob", 0.0)) for t in (c.get("top_logprobs") or [])} or
            {str(c.get("token", "")): float(c.get("logprob", 0.0))}
            for c in content
        ]
        return tokens, top
    tokens = lp.get("tokens")
    if not isinstance(tokens, list):
        return None, None
    tops = lp.get("top_logprobs")
    top = None
    if isinstance(tops, list) and len(tops) == len(tokens):
        top = [{str(k): float(v) for k, v in (t or {}).items()} for t in tops]
    return [str(t) for t in tokens], top


async def complete(
    client: httpx.AsyncClient, ep: Endpoint, p: Prompt, api: str, max_tokens: int, top_logprobs: int = 2
) -> Completion:
    """Greedy (temperature 0) completion asking for token logprobs; retried without them when refused."""
    body = _body(ep, p, api, max_tokens, 0.0, False)
    with_lp = dict(body)
    if api == "chat":
        with_lp.update(logprobs=True, top_logprobs=top_logprobs)
    else:
        with_lp["logprobs"] = top_logprobs
    err = ""
    for attempt in (with_lp, body) if ep.logprobs else (body,):
        try:
            r = await client.post(_route(ep, api), json=attempt)
        except httpx.HTTPError as exc:
            return Completion(text="", error=_describe(exc))
        if r.status_code == 200:
            if attempt is body:
                ep.logprobs = False
            try:
                choice = r.json()["choices"][0]
            except Exception:
                return Completion(text="", error="response had no choices")
            text = choice.get("text") if api != "chat" else (choice.get("message") or {}).get("content")
            tokens, top = _parse_logprobs(choice, api)
            return Completion(text=text or "", tokens=tokens, top=top, finish_reason=choice.get("finish_reason"))
        err = f"HTTP {r.status_code}: {r.text[:300]}"
        if r.status_code not in (400, 422):
            break
    return Completion(text="", error=err)


async def scrape(client: httpx.AsyncClient, ep: Endpoint) -> Snapshot | None:
    """GET /metrics; None when the server exposes none (acceptance then comes from responses, if at all)."""
    try:
        r = await client.get(ep.metrics_url, timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return parse_exposition(r.text)
