"""Continuous batching for the embedded server: a bounded queue in front of one engine thread.

The event loop never runs the model. Requests are queued (bounded; a full queue is refused at once so the
server answers 503 instead of letting latency grow without limit); one engine thread admits waiting requests
into the running batch *between* decode steps, runs one batched speculative step for everything running,
turns new tokens into text (with stop strings) and posts the deltas to each request's asyncio queue. A client
that goes away cancels its request, which leaves the batch before the next step.

The model-facing part is the small :class:`Backend` protocol, so the scheduler is independent of how the
runtime spells its decode loop; :mod:`specplug.runtime.serving.backend` adapts the embedded engine to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specplug.runtime.serving.metrics import ServerMetrics
from specplug.runtime.textstream import TextStream

log = logging.getLogger("specplug.server")
# How often the log sums up what speculation did (on, or why off; /metrics has it per step).
SPEC_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 (or below specplug.runtime.sampling.GREEDY_BELOW) = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    ignore_eos: bool = False
    # How token ids become text (vLLM's meaning); see specplug.runtime.serving.dialect.
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    # vLLM's min_tokens and stop_token_ids (the engine masks and stops; see specplug.runtime.engine).
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    # A compiled grammar the output must follow (specplug.runtime.structured.Grammar), and how many alternatives
    # each token's logprob comes with (None: no logprobs); see specplug.runtime.engine.GenerationParams.
    grammar: Any = None
    logprobs: int | None = None


@dataclass
class StepOutput:
    """What one batched step produced for one request."""

    rid: str
    new_token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # "stop" (EOS or a stop token) or "length"
    # One (drafted, accepted) pair per draft verified this step, for the spec-decode counters.
    drafts: list[tuple[int, int]] = field(default_factory=list)
    # Set when a member of the request's stop_token_ids ended it: the last new token, counted but not text.
    stop_token_id: int | None = None
    # One specplug.runtime.sampling.TokenLogprob per new token, where the request asked for logprobs.
    logprobs: list[Any] | None = None


class Backend(Protocol):
    """A batched decoder the scheduler drives from its one thread (never concurrently)."""

    max_batch_size: int

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, sampling: SamplingParams) -> None:
        """Join the running batch (prefill may happen here or in the next step)."""

    def step(self) -> list[StepOutput]:
        """One decode step over every running request; finished requests leave the batch by themselves."""

    def remove(self, rid: str) -> None:
        """Drop a request from the batch (cancelled, or a stop string matched); unknown ids are ignored."""


class QueueFull(Exception):
    """The waiting queue is at its bound; the server answers 503."""


class ShuttingDown(Exception):
    """The scheduler has stopped taking requests; the server answers 503."""


ENGINE_ERROR = "engine_error"  # the model failed: a 500 the client should not simply retry
SHUTTING_DOWN = "server_shutting_down"  # the server is stopping: a 503, retryable elsewhere or later
SHUTDOWN_MESSAGE = "The server is shutting down; retry the request (on another replica, or once it is back)."


@dataclass
class Event:
    text: str = ""
    num_new_tokens: int = 0
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    error_code: str = ENGINE_ERROR  # what kind of error: ENGINE_ERROR or SHUTTING_DOWN
    logprobs: list[Any] | None = None  # one TokenLogprob per new token, where the request asked for them


class RequestHandle:
    """The event-loop side of one request: an async stream of :class:`Event` and a cancel switch."""

    def __init__(self, scheduler: Scheduler, rid: str, num_prompt_tokens: int) -> None:
        self.scheduler = scheduler
        self.rid = rid
        self.num_prompt_tokens = num_prompt_tokens
        self.num_generated = 0
        # Per-request spec-decode record, vLLM's --per-request-spec-decode-metrics shape (filled by the engine thread).
        self.spec_histogram: list[int] = []
        self.spec_draft_tokens = 0
        self.spec_steps: list[tuple[int, int]] = []
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.done = False

    async def events(self) -> AsyncIterator[Event]:
        while True:
            ev = await self.queue.get()
            self.num_generated += ev.num_new_tokens
            yield ev
            if ev.finished or ev.error:
                self.done = True
                return

    def spec_metrics(self, num_spec_tokens: int, detailed: bool = False) -> dict[str, Any]:
        """vLLM's ``metrics.speculative_decoding`` body for this request (mean length counts the bonus token)."""
        hist = (self.spec_histogram + [0] * (num_spec_tokens + 1))[: max(num_spec_tokens + 1, len(self.spec_histogram))]
        steps = sum(hist)
        accepted = sum(j * c for j, c in enumerate(hist))
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.spec_draft_tokens if self.spec_draft_tokens else 0.0,
            "acceptance_histogram": hist,
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.spec_draft_tokens,
            "num_spec_tokens": num_spec_tokens,
        }
        if detailed and self.spec_steps:
            out["per_step_accepted"] = [a for a, _ in self.spec_steps]
            out["per_step_drafted"] = [d for _, d in self.spec_steps]
        return out

    def cancel(self) -> None:
        if not self.done:
            self.done = True
            self.scheduler.cancel(self.rid)


@dataclass
class _Live:
    rid: str
    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    text: TextStream
    loop: asyncio.AbstractEventLoop
    handle: RequestHandle
    arrived: float
    first_token_at: float | None = None
    generated: int = 0


def _text_stream(tokenizer: Any, stop: Sequence[str], sampling: SamplingParams) -> TextStream:
    from specplug.runtime.serving.dialect import DialectTextStream

    if (sampling.include_stop_str_in_output or not sampling.skip_special_tokens or not sampling.spaces_between_special_tokens
            or (sampling.min_tokens and stop)):
        return DialectTextStream(tokenizer, stop, sampling.include_stop_str_in_output, sampling.skip_special_tokens,
                                 sampling.spaces_between_special_tokens, sampling.min_tokens)
    return TextStream(tokenizer, stop)


def _post(live: _Live, ev: Event) -> None:
    # RuntimeError: the request's event loop is gone (server shutting down): nobody left to tell.
    with contextlib.suppress(RuntimeError):
        live.loop.call_soon_threadsafe(live.handle.queue.put_nowait, ev)


class Scheduler:
    """Bounded queue + one engine thread doing continuous batching over a :class:`Backend`."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        metrics: ServerMetrics,
        max_waiting: int = 256,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._waiting: deque[_Live] = deque()
        self._running: dict[str, _Live] = {}
        self._cancelled: set[str] = set()
        self._ids = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.healthy = True
        self.last_error: str | None = None
        self._spec_seen: dict[str, int] = {}  # the backend's speculation step counts, as last read
        self._prefix_seen = (0, 0)  # the backend's prefix-cache token counts, as last read
        self._spec_window: dict[str, int] = {}  # the same since the last log line
        self._spec_logged = time.monotonic()

    # ------------------------------------------------------------------ event-loop side

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="specplug-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def abort_all(self, message: str = SHUTDOWN_MESSAGE) -> int:
        """End every waiting and running request now with a retryable :data:`SHUTTING_DOWN` error, and take no
        more; returns how many were ended. Called from the event loop when the shutdown grace is over: it does not
        wait for the step in progress, whose tokens are then dropped."""
        with self._cond:
            self._stopping = True
            ended = self._fail_all(message, SHUTTING_DOWN)
            self._cond.notify_all()
        return ended

    def has_room(self) -> bool:
        """Whether a request submitted now would be queued (a hint for rejecting before tokenizing)."""
        return not self._stopping and len(self._waiting) < self.max_waiting

    def submit(self, prompt_ids: list[int], max_tokens: int, sampling: SamplingParams, stop: Sequence[str]) -> RequestHandle:
        """Queue a request; raises :class:`QueueFull` when the waiting queue is at its bound and
        :class:`ShuttingDown` once the scheduler is stopping."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._stopping:
                raise ShuttingDown(SHUTDOWN_MESSAGE)
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull(f"{len(self._waiting)} requests are already waiting (bound {self.max_waiting}).")
            rid = f"r{next(self._ids)}"
            handle = RequestHandle(self, rid, len(prompt_ids))
            self._waiting.append(
                _Live(rid, list(prompt_ids), max_tokens, sampling, _text_stream(self.tokenizer, stop, sampling), loop, handle,
                      time.monotonic())
            )
            self.metrics.num_waiting.set(len(self._waiting))
            self._cond.notify_all()
        return handle

    def cancel(self, rid: str) -> None:
        with self._cond:
            for live in self._waiting:
                if live.rid == rid:
                    self._waiting.remove(live)
                    self.metrics.num_waiting.set(len(self._waiting))
                    self.metrics.requests_cancelled.inc()
                    return
            if rid in self._running:
                self._cancelled.add(rid)
                self._cond.notify_all()

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------------ engine thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._waiting and not self._running and not self._cancelled:
                    self._cond.wait()
                if self._stopping:
                    self._fail_all(SHUTDOWN_MESSAGE, SHUTTING_DOWN)
                    return
                cancelled, self._cancelled = self._cancelled, set()
                admit: list[_Live] = []
                while self._waiting and len(self._running) + len(admit) < self.backend.max_batch_size:
                    admit.append(self._waiting.popleft())
                for live in admit:
                    self._running[live.rid] = live
                self.metrics.num_waiting.set(len(self._waiting))
            try:
                for rid in cancelled:
                    if self._running.pop(rid, None) is not None:
                        self.backend.remove(rid)
                        self.metrics.requests_cancelled.inc()
                for live in admit:
                    self.backend.add(live.rid, live.prompt_ids, live.max_tokens, live.sampling)
                    self.metrics.prompt_tokens.inc(len(live.prompt_ids))
                    self.metrics.prompt_len.observe(len(live.prompt_ids))
                self.metrics.num_running.set(len(self._running))
                if not self._running:
                    continue
                outputs = self.backend.step()
                self.metrics.engine_steps.inc()
                self._count_speculation()
                self._count_prefix_cache()
                for out in outputs:
                    self._deliver(out)
                # Requests that finished in this step have left: an idle server reads 0, not its last batch.
                self.metrics.num_running.set(len(self._running))
            except Exception as exc:  # an engine failure must fail the requests, not hang them
                log.exception("engine step failed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                with self._cond:
                    self._fail_all(f"The engine failed: {self.last_error}")
                self._reset_backend()

    def _count_prefix_cache(self) -> None:
        read = getattr(self.backend, "prefix_cache_tokens", None)
        if read is None:
            return
        (queried, hit), (q0, h0) = read(), self._prefix_seen
        if queried > q0:
            self.metrics.prefix_queries.inc(queried - q0)
        if hit > h0:
            self.metrics.prefix_hits.inc(hit - h0)
        self._prefix_seen = (queried, hit)

    def _count_speculation(self) -> None:
        """Move the backend's per-step speculation counts into /metrics, and now and then into the log."""
        read = getattr(self.backend, "speculation_steps", None)
        if read is None:
            return
        counts = read()
        for state, n in counts.items():
            delta = n - self._spec_seen.get(state, 0)
            if delta > 0:
                self.metrics.spec_steps.inc(delta, state=state)
                self._spec_window[state] = self._spec_window.get(state, 0) + delta
        self._spec_seen = counts
        now = time.monotonic()
        total = sum(self._spec_window.values())
        if total and now - self._spec_logged >= SPEC_LOG_EVERY_S:
            shares = ", ".join(f"{state} {n / total:.0%}" for state, n in sorted(self._spec_window.items(),
                                                                                key=lambda kv: -kv[1]) if n)
            log.info("speculation over the last %d steps: %s (batch now %d)", total, shares, len(self._running))
            self._spec_window, self._spec_logged = {}, now

    def _deliver(self, out: StepOutput) -> None:
        live = self._running.get(out.rid)
        if live is None:  # cancelled while the step ran
            return
        for drafted, accepted in out.drafts:
            self.metrics.record_draft(drafted, accepted)
            h = live.handle
            if len(h.spec_histogram) <= accepted:
                h.spec_histogram.extend([0] * (accepted + 1 - len(h.spec_histogram)))
            h.spec_histogram[accepted] += 1
            h.spec_draft_tokens += drafted
            h.spec_steps.append((accepted, drafted))
        new_ids = out.new_token_ids
        finished, reason = out.finished, out.finish_reason
        stop_token = out.stop_token_id is not None and out.finished
        room = live.max_tokens - live.generated
        if len(new_ids) >= room:  # a speculative step can overshoot max_tokens; cut it here
            if len(new_ids) > room or not finished:
                reason, stop_token = "length", False
            new_ids, finished = new_ids[:room], True
        now = time.monotonic()
        if new_ids and live.first_token_at is None:
            live.first_token_at = now
            self.metrics.ttft.observe(now - live.arrived)
        # A stop token counts as output but its text is not sent, unless the client asked to keep stops (vLLM).
        texted = new_ids[:-1] if stop_token and not live.sampling.include_stop_str_in_output else new_ids
        delta, kept, stopped = live.text.push(texted, final=finished)
        if stopped:
            finished, reason = True, "stop"
            new_ids = new_ids[:kept]
        live.generated += len(new_ids)
        lps = out.logprobs[: len(new_ids)] if out.logprobs is not None else None
        self.metrics.generation_tokens.inc(len(new_ids))
        if finished:
            self._running.pop(out.rid, None)
            if not out.finished:
                self.backend.remove(out.rid)
            self._finish_metrics(live, now, reason or "stop")
        ev = Event(text=delta, num_new_tokens=len(new_ids), finished=finished, finish_reason=(reason or "stop") if finished else None,
                   logprobs=lps)
        if delta or finished or new_ids:
            _post(live, ev)

    def _finish_metrics(self, live: _Live, now: float, reason: str) -> None:
        m = self.metrics
        m.request_success.inc(finished_reason=reason)
        m.e2e_latency.observe(now - live.arrived)
        m.generation_len.observe(live.generated)
        if live.first_token_at is not None and live.generated > 1:
            m.tpot.observe((now - live.first_token_at) / (live.generated - 1))

    def _fail_all(self, message: str, code: str = ENGINE_ERROR) -> int:
        """Post ``message`` to every running and waiting request and forget them (hold ``self._cond``)."""
        doomed = list(self._running.values()) + list(self._waiting)
        for live in doomed:
            _post(live, Event(error=message, finished=True, error_code=code))
        self._running.clear()
        self._waiting.clear()
        self.metrics.num_waiting.set(0)
        self.metrics.num_running.set(0)
        return len(doomed)

    def _reset_backend(self) -> None:
        reset = getattr(self.backend, "reset", None)
        try:
            if reset is not None:
                reset()
        except Exception:  # the engine is unusable: say so on /health
            log.exception("engine reset failed")
            self.healthy = False
