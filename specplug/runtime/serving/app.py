"""The FastAPI application: OpenAI-compatible routes over a :class:`~.scheduler.Scheduler`.

Every failure a client can cause is a 4xx JSON body in OpenAI's error shape; the ASGI layers below the
routes (body size, API key) answer in the same shape, and a catch-all turns a bug of ours into a 500 body
rather than a dropped connection. Overload and shutdown are 503s in the same shape, with ``Retry-After``.
The event loop only parses, tokenizes short texts and relays events: the model runs on the scheduler's
engine thread, so ``/health`` and ``/metrics`` answer while it decodes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from specplug.runtime.serving.lifecycle import Drain
from specplug.runtime.serving.logprobs import LogprobFormatter
from specplug.runtime.serving.metrics import CONTENT_TYPE, ServerMetrics
from specplug.runtime.serving.scheduler import (
    SHUTDOWN_MESSAGE,
    SHUTTING_DOWN,
    Event,
    QueueFull,
    RequestHandle,
    SamplingParams,
    Scheduler,
    ShuttingDown,
)
from specplug.runtime.serving.schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelList,
    UnsupportedParameter,
    error_body,
)

log = logging.getLogger("specplug.server")

OPEN_PATHS = frozenset({"/health"})  # reachable without the API key (load balancers, specplug's health wait)
PROBE_PATHS = frozenset({"/health", "/metrics"})  # answered while draining; not requests the drain waits for
RETRY_AFTER_S = "1"


@dataclass
class ServerSettings:
    model_name: str
    max_model_len: int
    aliases: list[str] = field(default_factory=list)
    api_key: str | None = field(default=None, repr=False)  # never printed
    max_prompt_tokens: int = 4096
    max_tokens_limit: int = 1024
    default_max_tokens: int = 256
    max_body_bytes: int = 1 << 20
    info: dict[str, Any] = field(default_factory=dict)  # speculation settings shown on /v1/models and /health
    per_request_spec_metrics: str = "none"  # vLLM's --per-request-spec-decode-metrics: none, summary, detailed
    num_spec_tokens: int = 0


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self) -> JSONResponse:
        headers = {"Retry-After": RETRY_AFTER_S} if self.status == 503 else None
        return JSONResponse(error_body(self.message, self.type, self.param, self.code), self.status, headers=headers)


def shutting_down() -> ApiError:
    return ApiError(503, SHUTDOWN_MESSAGE, "server_error", code=SHUTTING_DOWN)


def _event_error(ev: Event) -> ApiError:
    """The answer for a request the scheduler ended with an error: shutdown is a 503, a model failure a 500."""
    if ev.error_code == SHUTTING_DOWN:
        return shutting_down()
    return ApiError(500, ev.error or "The engine failed.", "server_error", code=ev.error_code)


def _error_json(status: int, message: str, type_: str, code: str | None = None) -> tuple[dict, bytes]:
    body = json.dumps(error_body(message, type_, None, code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", RETRY_AFTER_S.encode()))
    return {"type": "http.response.start", "status": status, "headers": headers}, body


class _Reply:
    """``send`` for one request, remembering what went out; while draining it adds ``Connection: close``."""

    def __init__(self, send: Callable, drain: Drain) -> None:
        self._send = send
        self._drain = drain
        self.started = False
        self.finished = False
        self.sse = False

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            headers = list(message.get("headers", []))
            self.sse = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)
            if self._drain.draining:  # the client must not send its next request down this connection
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.finished = True
        await self._send(message)


class GuardMiddleware:
    """API key on every route but /health, a hard cap on body size (counted, not trusted from headers), and the
    drain: 503s for new requests once shutdown began, and a count of the requests in flight."""

    def __init__(self, app: Callable[..., Awaitable[None]], settings: ServerSettings, metrics: ServerMetrics,
                 drain: Drain) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.drain = drain

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reply = _Reply(send, self.drain)
        probe = scope.get("path") in PROBE_PATHS
        if self.drain.draining and not probe:
            self.metrics.requests_rejected.inc(reason="shutting_down")
            err = shutting_down()
            await _send_error(reply, err.status, err.message, err.type, err.code)
            return
        weight = 0 if probe else 1  # the drain waits for requests, not for probes
        self.drain.in_flight += weight
        try:
            await self._guarded(scope, receive, reply)
        except asyncio.CancelledError:
            if not self.drain.draining:
                raise
            await _finish_cancelled(reply)  # uvicorn cancelled it past the grace: end it cleanly, no traceback
        finally:
            self.drain.in_flight -= weight

    async def _guarded(self, scope: dict, receive: Callable, send: Callable) -> None:
        key = self.settings.api_key
        if key and scope.get("path") not in OPEN_PATHS:
            given = _bearer(scope)
            if given is None or not hmac.compare_digest(given.encode(), key.encode()):
                self.metrics.requests_rejected.inc(reason="auth")
                msg = (
                    "Incorrect API key provided."
                    if given is not None
                    else "No API key provided: send 'Authorization: Bearer YOUR_KEY'."
                )
                await _send_error(send, 401, msg, "invalid_request_error", "invalid_api_key")
                return
        limit = self.settings.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > limit
            except ValueError:
                await _send_error(send, 400, "Content-Length is not a number.", "invalid_request_error")
                return
            if too_big:
                self.metrics.requests_rejected.inc(reason="body_too_large")
                await _send_error(send, 413, f"Request body is larger than {limit} bytes.", "invalid_request_error", "request_too_large")
                return

        if scope.get("method") in ("POST", "PUT", "PATCH"):
            # Read the body here, bounded, so chunked uploads without Content-Length are capped too; the
            # app then reads it from memory, and later receive() calls still report a disconnect.
            chunks: list[bytes] = []
            seen = 0
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > limit:
                    self.metrics.requests_rejected.inc(reason="body_too_large")
                    await _send_error(send, 413, f"Request body is larger than {limit} bytes.", "invalid_request_error", "request_too_large")
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
            replay: list[dict] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

            async def replay_receive() -> dict:
                if replay:
                    return replay.pop()
                return await receive()

            await self.app(scope, replay_receive, send)
            return
        await self.app(scope, receive, send)




async def _send_error(send: Callable, status: int, message: str, type_: str, code: str | None = None) -> None:
    start, body = _error_json(status, message, type_, code)
    await send(start)
    await send({"type": "http.response.body", "body": body})


async def _finish_cancelled(reply: _Reply) -> None:
    """End a response cut short by shutdown: a 503 if nothing was sent, else the stream's error event and [DONE]."""
    if reply.finished:
        return
    err = shutting_down()
    if not reply.started:
        await _send_error(reply, err.status, err.message, err.type, err.code)
    elif reply.sse:
        tail = _sse_line({"error": error_body(err.message, err.type, None, err.code)["error"]}) + SSE_DONE
        await reply({"type": "http.response.body", "body": tail, "more_body": False})
    else:
        await reply({"type": "http.response.body", "body": b"", "more_body": False})


def _header(scope: dict, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _bearer(scope: dict) -> str | None:
    value = _header(scope, b"authorization")
    if value is not None and value[:7].lower() == "bearer ":
        return value[7:].strip()
    alt = _header(scope, b"x-api-key")
    return alt.strip() if alt is not None else None


def _validation_error(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    if not errors:
        return ApiError(400, "Invalid request body.")
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    etype = err.get("type", "")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, UnsupportedParameter):
        return ApiError(400, cause.message, param=cause.param, code="unsupported_parameter")
    if etype == "json_invalid":
        return ApiError(400, "The request body is not valid JSON: " + str(err.get("msg", "")) + ".", code="invalid_json")
    if etype == "extra_forbidden":
        return ApiError(400, f"Unrecognized request argument supplied: {param}", param=param, code="unknown_parameter")
    if etype == "missing" and not loc:
        return ApiError(400, "A JSON request body is required.", code="missing_body")
    if etype == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    where = f"'{param}'" if param else "The request body"
    return ApiError(400, f"Invalid value for {where}: {msg}.", param=param, code="invalid_value")


def build_app(scheduler: Scheduler, tokenizer: Any, settings: ServerSettings, metrics: ServerMetrics,
              drain: Drain | None = None) -> FastAPI:
    """The ASGI app; its lifespan starts and stops ``scheduler``. ``drain`` is the shutdown state a
    :class:`~.lifecycle.DrainingServer` drives (default: one that never drains)."""
    from contextlib import asynccontextmanager

    drain = drain or Drain()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        scheduler.start()
        yield
        scheduler.stop()

    app = FastAPI(
        title="specplug embedded server",
        summary="OpenAI-compatible completions over specplug's speculative-decoding runtime.",
        version=_version(),
        lifespan=lifespan,
    )
    names = {settings.model_name, *settings.aliases}
    created = int(time.time())
    vocab_size = _vocab_size(tokenizer)
    lp_format = LogprobFormatter(tokenizer)
    grammars: list[Any] = []  # the GrammarCompiler, made by the first request that asks for structure
    errors = {400: {"model": ErrorResponse}, 401: {"model": ErrorResponse}, 404: {"model": ErrorResponse},
              413: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status in (400, 404):
            metrics.requests_rejected.inc(reason="invalid_request")
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.requests_rejected.inc(reason="invalid_request")
        return _validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = f"{request.method} {request.url.path} is not a route of this server." if exc.status_code in (404, 405) else str(exc.detail)
        return ApiError(exc.status_code, message, code=code).response()

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return ApiError(500, f"Internal server error ({type(exc).__name__}); this is a bug in specplug.", "server_error").response()

    # -------------------------------------------------------------------- helpers

    def check_model(name: str) -> None:
        if name not in names:
            raise ApiError(
                404,
                f"The model '{name[:200]}' does not exist on this server; it serves '{settings.model_name}'.",
                param="model",
                code="model_not_found",
            )

    async def grammar_for(req: CompletionRequest | ChatCompletionRequest) -> Any:
        """The request's compiled grammar (None without one); llguidance is imported here, on first use only."""
        asked = req.structure()
        if asked is None:
            return None
        param, fmt, spec = asked
        from specplug.runtime.structured import GrammarCompiler, GrammarError, StructuredOutputUnavailable

        if not grammars:
            grammars.append(GrammarCompiler(tokenizer, getattr(scheduler.backend, "eos_token_ids", None)))
        try:
            # Off the event loop: the first request builds llguidance's tokenizer, and a big schema takes a while.
            return await asyncio.to_thread(grammars[0].compile, fmt, spec)
        except GrammarError as exc:
            raise ApiError(400, f"Invalid {param}: {exc}", param=param, code="invalid_value") from None
        except StructuredOutputUnavailable as exc:
            raise ApiError(400, str(exc), param=param, code="unsupported_parameter") from None

    def sampling_from(req: CompletionRequest | ChatCompletionRequest, grammar: Any = None) -> SamplingParams:
        temperature = 1.0 if req.temperature is None else float(req.temperature)
        top_k = 0 if req.top_k in (None, -1) else int(req.top_k)
        if vocab_size and top_k >= vocab_size:
            top_k = 0  # keeping every token is the same as no top-k
        return SamplingParams(
            temperature=temperature,
            top_p=1.0 if req.top_p is None else float(req.top_p),
            top_k=top_k,
            seed=None if req.seed is None else int(req.seed) % (2**64),
            ignore_eos=bool(req.ignore_eos),
            include_stop_str_in_output=bool(req.include_stop_str_in_output),
            skip_special_tokens=req.skip_special_tokens is not False,
            spaces_between_special_tokens=req.spaces_between_special_tokens is not False,
            min_tokens=int(req.min_tokens or 0),
            stop_token_ids=tuple(dict.fromkeys(req.stop_token_ids or ())),
            grammar=grammar,
            logprobs=_logprobs_asked(req),
        )

    def check_stop_tokens(req: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> None:
        bad = next((t for t in req.stop_token_ids or () if vocab_size and t >= vocab_size), None)
        if bad is not None:
            raise ApiError(400, f"Stop token id {bad} is outside the vocabulary (0..{vocab_size - 1}).",
                           param="stop_token_ids", code="invalid_value")
        if (req.min_tokens or 0) > max_tokens:
            raise ApiError(400, f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {req.min_tokens}.",
                           param="min_tokens", code="invalid_value")

    def ignored(req: CompletionRequest | ChatCompletionRequest) -> dict[str, str]:
        # vLLM accepts fields it does not know and ignores them; say which, in the log and to the client.
        names_ = req.ignored_fields()
        if not names_:
            return {}
        # Field names are client text: keep the header (printable ASCII, no separator, no whitespace, which HTTP
        # servers refuse at a value's ends) and the log line safe.
        shown = ",".join(
            "".join(ch if ch.isascii() and ch.isprintable() and ch not in ", " else "?" for ch in n[:64]) for n in names_[:32]
        )
        log.info("request fields ignored: %s", shown)
        return {"X-Ignored-Fields": shown}

    def spec(handle: RequestHandle) -> dict[str, Any] | None:
        level = settings.per_request_spec_metrics
        if level == "none" or settings.num_spec_tokens < 1:
            return None
        return {"speculative_decoding": handle.spec_metrics(settings.num_spec_tokens, level == "detailed")}

    def budget(prompt_len: int, requested: int | None) -> int:
        if prompt_len > settings.max_prompt_tokens:
            raise ApiError(
                400,
                f"The prompt is {prompt_len} tokens; this server accepts at most {settings.max_prompt_tokens} (--max-prompt-tokens).",
                param="prompt",
                code="context_length_exceeded",
            )
        room = settings.max_model_len - prompt_len
        if requested is not None:
            if requested > settings.max_tokens_limit:
                raise ApiError(
                    400,
                    f"max_tokens is {requested}; this server allows at most {settings.max_tokens_limit} (--max-tokens-limit).",
                    param="max_tokens",
                    code="invalid_value",
                )
            if requested > room:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {settings.max_model_len} tokens. However, you requested "
                    f"{prompt_len + requested} tokens ({prompt_len} in the prompt, {requested} for the completion).",
                    param="max_tokens",
                    code="context_length_exceeded",
                )
            return requested
        if room < 1:
            raise ApiError(400, f"The prompt fills the model's context ({settings.max_model_len} tokens).", param="prompt", code="context_length_exceeded")
        return min(settings.default_max_tokens, settings.max_tokens_limit, room)

    async def encode(text: str) -> list[int]:
        # Long texts tokenize off the event loop so other requests keep streaming meanwhile.
        if len(text) > 20_000:
            return await asyncio.to_thread(_encode, tokenizer, text)
        return _encode(tokenizer, text)

    def overloaded(detail: str) -> ApiError:
        metrics.requests_rejected.inc(reason="queue_full")
        return ApiError(503, f"The server is at capacity: {detail} Retry shortly.", "server_overloaded", code="queue_full")

    def check_capacity() -> None:
        # Before tokenizing: under overload most requests are refused, and refusing must stay cheap.
        if not scheduler.healthy:
            raise ApiError(503, "The engine failed and the server cannot decode; restart it.", "server_error", code="engine_dead")
        if drain.draining:
            raise shutting_down()
        if not scheduler.has_room():
            raise overloaded(f"{scheduler.num_waiting} requests are already waiting.")

    def submit(prompt_ids: list[int], max_tokens: int, sampling: SamplingParams, stop: list[str]) -> RequestHandle:
        check_capacity()  # again: tokenizing took time, and the engine or the drain may have moved meanwhile
        try:
            return scheduler.submit(prompt_ids, max_tokens, sampling, stop)
        except QueueFull as exc:
            raise overloaded(str(exc)) from None
        except ShuttingDown:
            raise shutting_down() from None

    # -------------------------------------------------------------------- routes

    @app.get("/health", summary="Liveness: 200 while the engine can decode (503 once it failed or shutdown began).")
    async def health() -> JSONResponse:
        status = "draining" if drain.draining else ("ok" if scheduler.healthy else "engine_failed")
        body = {"status": status, "model": settings.model_name,
                "running": scheduler.num_running, "waiting": scheduler.num_waiting, **settings.info}
        return JSONResponse(body, 200 if status == "ok" else 503)

    @app.get("/version")
    async def version() -> dict:
        return {"version": _version()}

    @app.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics (vLLM names).")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", response_model=ModelList, responses=errors)
    async def models() -> dict:
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": created, "owned_by": "specplug", "max_model_len": settings.max_model_len}
                for n in [settings.model_name, *settings.aliases]
            ],
        }

    @app.post("/v1/completions", responses={200: {"model": CompletionResponse}, **errors})
    async def completions(body: CompletionRequest, request: Request) -> Response:
        check_model(body.model)
        check_capacity()
        prompt = body.prompt_text_or_ids()
        if isinstance(prompt, str):
            if not prompt:
                raise ApiError(400, "prompt must not be empty.", param="prompt", code="invalid_value")
            ids = await encode(prompt)
        else:
            bad = next((t for t in prompt if t < 0 or (vocab_size and t >= vocab_size)), None)
            if bad is not None:
                raise ApiError(400, f"Token id {bad} is outside the vocabulary (0..{vocab_size - 1}).", param="prompt", code="invalid_value")
            ids = prompt
        if not ids:
            raise ApiError(400, "prompt must not be empty.", param="prompt", code="invalid_value")
        if body.max_tokens is not None:
            max_tokens = budget(len(ids), body.max_tokens)
        else:  # OpenAI's default for completions, within the room the context leaves (not a 400 for asking 16)
            max_tokens = min(16, budget(len(ids), None))
        check_stop_tokens(body, max_tokens)
        echo = (prompt if isinstance(prompt, str) else tokenizer.decode(ids)) if body.echo else ""
        grammar = await grammar_for(body)
        handle = submit(ids, max_tokens, sampling_from(body, grammar), body.stop_list())
        rid = "cmpl-" + uuid.uuid4().hex
        include_usage, continuous = _stream_usage(body)
        headers = ignored(body)
        lp = lp_format if body.logprobs is not None else None
        if body.stream:
            return _sse(_completion_stream(handle, rid, body.model, echo, include_usage, continuous, spec, lp), headers)
        text, reason, entries = await _collect(handle, request)
        if text is None:
            return Response(status_code=499)
        return JSONResponse(
            {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.model,
                "choices": [{"index": 0, "text": echo + text, "finish_reason": reason,
                             "logprobs": lp.completion(entries) if lp is not None else None}],
                "usage": _usage(handle),
                **_metrics(spec(handle)),
            },
            headers=headers,
        )

    @app.post("/v1/chat/completions", responses={200: {"model": ChatCompletionResponse}, **errors})
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        check_model(body.model)
        check_capacity()
        if not getattr(tokenizer, "chat_template", None):
            raise ApiError(400, f"The model '{settings.model_name}' has no chat template; use /v1/completions.", code="no_chat_template")
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages]
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as exc:  # a template may refuse an ordering of roles
            raise ApiError(400, f"The chat template refused these messages: {exc}", param="messages", code="invalid_value") from None
        ids = await encode(text) if len(text) else []
        max_tokens = budget(len(ids), body.requested_max_tokens())
        check_stop_tokens(body, max_tokens)
        grammar = await grammar_for(body)
        handle = submit(ids, max_tokens, sampling_from(body, grammar), body.stop_list())
        rid = "chatcmpl-" + uuid.uuid4().hex
        include_usage, continuous = _stream_usage(body)
        headers = ignored(body)
        lp = lp_format if body.logprobs else None
        if body.stream:
            return _sse(_chat_stream(handle, rid, body.model, include_usage, continuous, spec, lp), headers)
        out, reason, entries = await _collect(handle, request)
        if out is None:
            return Response(status_code=499)
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": out}, "finish_reason": reason,
                             "logprobs": lp.chat(entries) if lp is not None else None}],
                "usage": _usage(handle),
                **_metrics(spec(handle)),
            },
            headers=headers,
        )

    default_openapi = app.openapi

    def openapi() -> dict:
        # Publish the served names as the only valid 'model', so clients and schema-driven fuzzers know them.
        doc = default_openapi()
        for schema in doc.get("components", {}).get("schemas", {}).values():
            props = schema.get("properties", {})
            if schema.get("title") in ("CompletionRequest", "ChatCompletionRequest") and "model" in props:
                props["model"] = {**props["model"], "enum": sorted(names)}
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(GuardMiddleware, settings=settings, metrics=metrics, drain=drain)
    return app


# ------------------------------------------------------------------------------------ request helpers


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _vocab_size(tokenizer: Any) -> int:
    try:
        return len(tokenizer)
    except TypeError:
        return int(getattr(tokenizer, "vocab_size", 0) or 0)


def _usage(handle: RequestHandle) -> dict:
    return {
        "prompt_tokens": handle.num_prompt_tokens,
        "completion_tokens": handle.num_generated,
        "total_tokens": handle.num_prompt_tokens + handle.num_generated,
    }


async def _gather(handle: RequestHandle) -> tuple[str, str | None, list[Any]]:
    """A request's whole text, finish reason and token logprobs (empty unless asked for); raises the
    :class:`ApiError` for an error event."""
    parts: list[str] = []
    reason: str | None = None
    logprobs: list[Any] = []
    async for ev in handle.events():
        if ev.error:
            raise _event_error(ev)
        parts.append(ev.text)
        logprobs.extend(ev.logprobs or ())
        if ev.finished:
            reason = ev.finish_reason
    return "".join(parts), reason, logprobs


async def _disconnected(request: Request) -> None:
    """Returns once the client hangs up (the body was read already: receive() now only reports that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _collect(handle: RequestHandle, request: Request) -> tuple[str | None, str | None, list[Any]]:
    """All of a request's text (with :func:`_gather`'s reason and logprobs), or (None, None, []) if the client went
    away first (the request is then cancelled).

    Waits on the result and the disconnect together rather than polling, so a thousand waiting requests
    cost the event loop nothing until something happens."""
    result = asyncio.ensure_future(_gather(handle))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        handle.cancel()
        _discard(result, gone)
        raise
    _discard(gone)
    if result.done():
        return result.result()
    handle.cancel()
    _discard(result)
    return None, None, []


def _discard(*tasks: asyncio.Future) -> None:
    """Cancel helper tasks nobody awaits any more, and swallow what they end with (no 'never retrieved' log)."""
    for task in tasks:
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _stream_usage(body: CompletionRequest | ChatCompletionRequest) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) as vLLM reads them: continuous only counts with include_usage."""
    so = body.stream_options
    include = bool(so and so.include_usage)
    return include, bool(include and so and so.continuous_usage_stats)


def _logprobs_asked(req: CompletionRequest | ChatCompletionRequest) -> int | None:
    """How many alternatives each token's logprob comes with; None where the request asked for no logprobs."""
    if isinstance(req, ChatCompletionRequest):
        return int(req.top_logprobs or 0) if req.logprobs else None
    return req.logprobs


def _metrics(m: dict | None) -> dict:
    return {"metrics": m} if m else {}


SpecFn = Callable[[RequestHandle], dict | None]


SSE_DONE = b"data: [DONE]\n\n"


def _sse_line(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _stream_error(ev: Event) -> dict:
    """The SSE error event (OpenAI's error shape) for a request the scheduler ended with an error."""
    err = _event_error(ev)
    return {"error": error_body(err.message, err.type, None, err.code)["error"]}


def _sse(chunks: AsyncIterator[dict], headers: dict[str, str] | None = None) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        async for chunk in chunks:
            yield _sse_line(chunk)
        yield SSE_DONE  # after an error event too: clients wait for it

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})


async def _completion_stream(
    handle: RequestHandle, rid: str, model: str, echo: str, include_usage: bool, continuous: bool = False,
    spec: SpecFn | None = None, lp: LogprobFormatter | None = None,
) -> AsyncIterator[dict]:
    created = int(time.time())
    offset = len(echo)

    def chunk(text: str, reason: str | None, logprobs: dict | None = None) -> dict:
        return {"id": rid, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}]}

    try:
        if echo:
            yield chunk(echo, None)
        async for ev in handle.events():
            if ev.error:
                yield _stream_error(ev)
                return
            # A chunk carries the logprobs of the tokens that arrived with it (its text may lag behind them).
            logprobs = lp.completion(ev.logprobs or [], offset) if lp is not None and ev.logprobs else None
            if logprobs is not None:
                offset += sum(len(t) for t in logprobs["tokens"])
            if ev.text or ev.finished or logprobs is not None:
                c = chunk(ev.text, ev.finish_reason if ev.finished else None, logprobs)
                if continuous:  # usage only where stream_options asks for it, as in vLLM
                    c["usage"] = _usage(handle)
                yield c
        if include_usage:
            yield {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [],
                   "usage": _usage(handle), **_metrics(spec(handle) if spec else None)}
    finally:
        handle.cancel()  # no-op once finished; stops decoding when the client went away mid-stream


async def _chat_stream(
    handle: RequestHandle, rid: str, model: str, include_usage: bool, continuous: bool = False,
    spec: SpecFn | None = None, lp: LogprobFormatter | None = None,
) -> AsyncIterator[dict]:
    created = int(time.time())

    def chunk(delta: dict, reason: str | None, logprobs: dict | None = None) -> dict:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}]}

    try:
        first = True
        async for ev in handle.events():
            if first:
                # With the first token, as vLLM sends it: a client times its first chunk as time to first token.
                yield chunk({"role": "assistant", "content": ""}, None)
                first = False
            if ev.error:
                yield _stream_error(ev)
                return
            logprobs = lp.chat(ev.logprobs) if lp is not None and ev.logprobs else None
            if ev.text or logprobs is not None:
                c = chunk({"content": ev.text}, None, logprobs)
                if continuous:
                    c["usage"] = _usage(handle)
                yield c
            if ev.finished:
                c = chunk({}, ev.finish_reason)
                if continuous:
                    c["usage"] = _usage(handle)
                yield c
        if include_usage:
            yield {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                   "usage": _usage(handle), **_metrics(spec(handle) if spec else None)}
    finally:
        handle.cancel()


def _version() -> str:
    try:
        from specplug import __version__

        return __version__
    except Exception:  # pragma: no cover - the package is always importable when the server runs
        return "unknown"
