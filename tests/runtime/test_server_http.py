"""The HTTP layer of the embedded server, over a scripted backend: fast, no model.

These check what a client sees: OpenAI's response and error shapes, SSE framing, limits, the API key, the
bounded queue (503), cancellation on disconnect and the Prometheus text. The real model is exercised in
test_server_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from specplug.runtime.serving.app import ServerSettings, build_app  # noqa: E402
from specplug.runtime.serving.lifecycle import Drain  # noqa: E402
from specplug.runtime.serving.metrics import ServerMetrics  # noqa: E402
from specplug.runtime.serving.scheduler import Scheduler, StepOutput  # noqa: E402

REPLY = "Hello there, general Kenobi! "


class CharTokenizer:
    """One token per character (ids = code points); EOS is id 0."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    eos_token_id = 0

    def __len__(self) -> int:
        return 0x3000

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool, tokenize: bool) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


class ScriptedBackend:
    """Replies REPLY cyclically, two tokens per step (one draft of 2 with 1 accepted), EOS after `eos_after`."""

    def __init__(self, max_batch_size: int = 4, step_s: float = 0.0, eos_after: int | None = None) -> None:
        self.max_batch_size = max_batch_size
        self.step_s = step_s
        self.eos_after = eos_after
        self.live: dict[str, list[int]] = {}
        self.batch_sizes: list[int] = []
        self.removed: list[str] = []
        self.lock = threading.Lock()

    def add(self, rid, prompt_ids, max_tokens, sampling) -> None:
        self.live[rid] = [0, max_tokens]

    def step(self) -> list[StepOutput]:
        time.sleep(self.step_s)
        self.batch_sizes.append(len(self.live))
        outs = []
        for rid, state in list(self.live.items()):
            pos, limit = state
            new = []
            for _ in range(2):
                if self.eos_after is not None and pos == self.eos_after:
                    new.append(0)
                    break
                new.append(ord(REPLY[pos % len(REPLY)]))
                pos += 1
            state[0] = pos
            done_eos = new[-1] == 0
            done_len = pos >= limit
            finished = done_eos or done_len
            outs.append(StepOutput(rid, new, finished, "stop" if done_eos else ("length" if done_len else None), [(2, 1)]))
            if finished:
                del self.live[rid]
        return outs

    def remove(self, rid) -> None:
        self.removed.append(rid)
        self.live.pop(rid, None)


def make_client(backend=None, max_waiting=64, drain=None, **settings_kw):
    backend = backend or ScriptedBackend()
    tok = CharTokenizer()
    metrics = ServerMetrics("tiny")
    settings = ServerSettings(model_name="tiny", max_model_len=512, **{"max_tokens_limit": 256, **settings_kw})
    scheduler = Scheduler(backend, tok, metrics, max_waiting=max_waiting)
    app = build_app(scheduler, tok, settings, metrics, drain)
    return TestClient(app), backend, scheduler


@pytest.fixture
def client():
    c, backend, _ = make_client()
    with c:
        yield c


def assert_openai_error(resp, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param
    return err


def test_completion_text_usage_and_finish_reason(client):
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "abc", "max_tokens": 7})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == REPLY[:7]
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}


def test_a_completion_without_max_tokens_gets_the_room_left(client):
    # Completions default to 16 new tokens (as OpenAI's); a prompt leaving 7 gets those 7, not a 400 saying that
    # the client asked for 16.
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "y" * 505})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 7
    assert client.post("/v1/completions", json={"model": "tiny", "prompt": "y"}).json()["usage"]["completion_tokens"] == 16


def test_eos_is_finish_reason_stop_and_not_in_text():
    c, _, _ = make_client(ScriptedBackend(eos_after=5))
    with c:
        body = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 50}).json()
    assert body["choices"][0] == {"index": 0, "text": REPLY[:5], "logprobs": None, "finish_reason": "stop"}
    assert body["usage"]["completion_tokens"] == 6  # the EOS token counts, as in vLLM


def test_stop_string_truncates_and_ends_decoding(client):
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 200, "stop": ["general"]})
    choice = r.json()["choices"][0]
    assert choice["text"] == "Hello there, "
    assert choice["finish_reason"] == "stop"
    assert r.json()["usage"]["completion_tokens"] < 30


def test_tokens_a_step_accepted_past_a_stop_string_are_not_counted(client):
    # The scripted engine emits two tokens a step; "genera" ends on the first of a step's two (19 tokens in all).
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 200, "stop": ["genera"]})
    assert r.json()["choices"][0]["text"] == "Hello there, "
    assert r.json()["usage"]["completion_tokens"] == len("Hello there, genera")


def test_chat_completion_uses_template(client):
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": REPLY[:5]}
    assert body["usage"]["prompt_tokens"] == len("<user>hi<assistant>")


def sse_events(resp) -> list:
    events = []
    for block in resp.text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_streaming_completion_with_usage_chunk(client):
    with client.stream(
        "POST", "/v1/completions",
        json={"model": "tiny", "prompt": "x", "max_tokens": 9, "stream": True, "stream_options": {"include_usage": True}},
    ) as r:
        r.read()
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 9
    text = "".join(e["choices"][0]["text"] for e in events[:-2])
    assert text == REPLY[:9]
    assert events[-3]["choices"][0]["finish_reason"] == "length"


def test_streaming_chat_deltas_and_no_usage_unless_asked(client):
    # vLLM streams usage only when stream_options.include_usage asks; strict clients reject an unasked field.
    with client.stream(
        "POST", "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True},
    ) as r:
        r.read()
    events = sse_events(r)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1] == "[DONE]"
    last = events[-2]
    assert last["choices"][0]["finish_reason"] == "length"
    assert not any("usage" in e for e in events[:-1])
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == REPLY[:6]


def test_streaming_completion_has_no_usage_unless_asked(client):
    with client.stream("POST", "/v1/completions",
                       json={"model": "tiny", "prompt": "x", "max_tokens": 5, "stream": True}) as r:
        r.read()
    events = sse_events(r)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert not any("usage" in e for e in events[:-1])


def test_the_role_chunk_comes_with_the_first_token():
    # Clients time the first chunk as time to first token: it must not leave before the model has run.
    c, backend, _ = make_client(ScriptedBackend(step_s=0.3))
    with c, c.stream("POST", "/v1/chat/completions",
                     json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                           "stream": True}) as r:
        start = time.monotonic()
        lines = r.iter_lines()
        first = next(line for line in lines if line.strip())
        waited = time.monotonic() - start
    assert json.loads(first[len("data: "):])["choices"][0]["delta"]["role"] == "assistant"
    assert waited >= 0.25


def test_streaming_holds_back_partial_stop_string(client):
    with client.stream(
        "POST", "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 100, "stop": "Kenobi", "stream": True}
    ) as r:
        r.read()
    events = sse_events(r)
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert text == "Hello there, general "
    assert "Ken" not in text


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"model": "tiny", "prompt": "x", "max_tokens": -1}, "max_tokens", "greater than or equal to 1"),
        ({"model": "tiny", "prompt": "x", "max_tokens": "5"}, "max_tokens", "valid integer"),
        ({"model": "tiny", "prompt": "x", "max_tokens": True}, "max_tokens", "valid integer"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 10**30}, "max_tokens", "less than"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 257}, "max_tokens", "--max-tokens-limit"),
        ({"model": "tiny", "prompt": "x", "temperature": 3}, "temperature", "less than or equal to 2"),
        ({"model": "tiny", "prompt": "x", "top_p": 0}, "top_p", "greater than 0"),
        ({"model": "tiny", "prompt": "x", "n": 2}, "n", "not supported"),
        ({"model": "tiny", "prompt": "x", "logprobs": 2, "echo": True}, "logprobs", "not supported"),
        ({"model": "tiny", "prompt": "x", "logprobs": 21}, "logprobs", "less than or equal to 20"),
        ({"model": "tiny", "prompt": "x", "presence_penalty": 1.0}, "presence_penalty", "not supported"),
        ({"model": "tiny", "prompt": "x", "ignore_eos": "yes"}, "ignore_eos", ""),
        ({"model": "tiny", "prompt": "x", "repetition_penalty": 1.3}, "repetition_penalty", "not supported"),
        ({"model": "tiny", "prompt": "x", "min_tokens": -1}, "min_tokens", ""),
        ({"model": "tiny", "prompt": ["a", "b"]}, "prompt", "one prompt per request"),
        ({"model": "tiny", "prompt": ""}, "prompt", "must not be empty"),
        ({"model": "tiny", "prompt": [99999999]}, "prompt", "outside the vocabulary"),
        ({"model": "tiny", "prompt": "x" * 600, "max_tokens": 1}, "prompt", "at most"),
        ({"model": "tiny", "prompt": "x", "stop": [""]}, "stop", "1 to 256"),
        ({"prompt": "x"}, "model", "Missing required parameter"),
    ],
)
def test_bad_completion_requests_are_openai_400s(client, body, param, fragment):
    kwargs = {"max_prompt_tokens": 500} if param == "prompt" and body.get("prompt") == "x" * 600 else {}
    c = client
    if kwargs:
        c, _, _ = make_client(**kwargs)
        c.__enter__()
    try:
        err = assert_openai_error(c.post("/v1/completions", json=body), 400, param)
        assert fragment in err["message"]
        assert err["type"] == "invalid_request_error"
    finally:
        if kwargs:
            c.__exit__(None, None, None)


def test_unknown_model_is_404_model_not_found(client):
    err = assert_openai_error(client.post("/v1/completions", json={"model": "gpt-4", "prompt": "x"}), 404, "model")
    assert err["code"] == "model_not_found"


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b"[]", b'"a string"', b"null", b"", b'{"model": "tiny", "prompt": "x", "max_tokens": NaN}', b"\xff\xfe"],
)
def test_malformed_bodies_are_400(client, raw):
    for path in ("/v1/completions", "/v1/chat/completions"):
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        assert_openai_error(r, 400)
    assert client.get("/health").status_code == 200


def test_bad_chat_messages(client):
    bad = [
        {"model": "tiny", "messages": []},
        {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]},
        {"model": "tiny", "messages": [{"role": "user", "content": 5}]},
        {"model": "tiny", "messages": "hi"},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
    ]
    for body in bad:
        assert_openai_error(client.post("/v1/chat/completions", json=body), 400)


def test_structured_output_without_a_fast_tokenizer_is_a_400_that_says_why(client):
    pytest.importorskip("llguidance")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}
    err = assert_openai_error(client.post("/v1/chat/completions", json=body), 400, "response_format")
    assert "fast Hugging Face tokenizer" in err["message"]


def test_body_size_limit_declared_and_chunked():
    c, _, _ = make_client(max_body_bytes=1000)
    with c:
        big = json.dumps({"model": "tiny", "prompt": "x" * 5000}).encode()
        assert_openai_error(c.post("/v1/completions", content=big, headers={"content-type": "application/json"}), 413)

        def chunks():
            for i in range(0, len(big), 100):
                yield big[i : i + 100]

        assert_openai_error(c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"}), 413)
        assert c.get("/health").status_code == 200


def test_api_key_on_every_route_but_health():
    c, _, _ = make_client(api_key="s3cret")
    with c:
        assert c.get("/health").status_code == 200
        for method, path in [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/completions"), ("GET", "/openapi.json")]:
            err = assert_openai_error(c.request(method, path, json={"model": "tiny", "prompt": "x"}), 401)
            assert err["code"] == "invalid_api_key"
            assert "s3cret" not in err["message"]
        assert_openai_error(c.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        ok = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_unknown_route_and_method_are_openai_errors(client):
    assert_openai_error(client.get("/v1/nothing"), 404)
    assert_openai_error(client.get("/v1/completions"), 405)


def test_models_route(client):
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["tiny"]


def test_concurrent_requests_share_batches():
    backend = ScriptedBackend(max_batch_size=8, step_s=0.01)
    c, _, _ = make_client(backend)
    with c:
        results = []

        def one(i):
            r = c.post("/v1/completions", json={"model": "tiny", "prompt": f"p{i}", "max_tokens": 20})
            results.append(r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert [r.status_code for r in results] == [200] * 8
    assert all(r.json()["choices"][0]["text"] == (REPLY * 2)[:20] for r in results)
    assert max(backend.batch_sizes) > 1, "requests were decoded one after another"


def test_full_queue_is_503_with_retry_after():
    backend = ScriptedBackend(max_batch_size=1, step_s=0.05)
    c, _, scheduler = make_client(backend, max_waiting=1)
    with c:
        statuses = []

        def one():
            statuses.append(c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 30}))

        threads = [threading.Thread(target=one) for _ in range(5)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        for t in threads:
            t.join(30)
        codes = sorted(r.status_code for r in statuses)
        assert codes.count(200) >= 2 and 503 in codes
        rejected = next(r for r in statuses if r.status_code == 503)
        err = assert_openai_error(rejected, 503)
        assert err["code"] == "queue_full" and "capacity" in err["message"]
        assert rejected.headers["retry-after"] == "1"
        assert c.get("/health").status_code == 200


async def _cancelled_during_drain(app) -> tuple[list[dict], Drain]:
    """Run ``app`` behind the guard, begin the drain, cancel it as uvicorn does past its timeout: what went out."""
    from specplug.runtime.serving.app import GuardMiddleware

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    drain = Drain()
    guard = GuardMiddleware(app, ServerSettings(model_name="tiny", max_model_len=8), ServerMetrics("tiny"), drain)
    task = asyncio.create_task(guard({"type": "http", "path": "/v1/completions", "method": "GET", "headers": []},
                                     receive, send))
    await asyncio.sleep(0.05)
    assert drain.in_flight == 1
    drain.begin()
    task.cancel()
    await task  # no CancelledError out of the guard: uvicorn would log it with a traceback
    return sent, drain


def test_a_request_cancelled_in_the_drain_still_gets_an_openai_503():
    async def hangs(scope, receive, send):
        await asyncio.sleep(60)

    sent, drain = asyncio.run(_cancelled_during_drain(hangs))
    assert sent[0]["status"] == 503 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["code"] == "server_shutting_down"
    assert drain.in_flight == 0


def test_a_stream_cancelled_in_the_drain_ends_with_an_error_event_and_done():
    async def streams(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b'data: {"choices":[]}\n\n', "more_body": True})
        await asyncio.sleep(60)

    sent, _ = asyncio.run(_cancelled_during_drain(streams))
    tail = sent[-1]
    assert tail["more_body"] is False
    error, done = tail["body"].decode().strip().split("\n\n")
    assert json.loads(error.removeprefix("data: "))["error"]["code"] == "server_shutting_down"
    assert done == "data: [DONE]"


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a /metrics body, read by prometheus_client's own parser: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_draining_refuses_new_work_with_openai_503_and_closes_the_connection():
    drain = Drain()
    c, _, _ = make_client(drain=drain)
    with c:
        assert c.get("/health").json()["status"] == "ok"
        drain.begin()
        for method, path in [("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models")]:
            r = c.request(method, path, json={"model": "tiny", "prompt": "x"})
            err = assert_openai_error(r, 503)
            assert err["code"] == "server_shutting_down"
            assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"
        health = c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        metrics = c.get("/metrics")
        assert metrics.status_code == 200 and 'reason="shutting_down"' in metrics.text
        assert drain.in_flight == 0


def test_in_flight_requests_are_counted_for_the_drain():
    drain = Drain()
    backend = ScriptedBackend(max_batch_size=1, step_s=0.05)
    c, _, _ = make_client(backend, drain=drain)
    with c:
        seen = []
        t = threading.Thread(target=lambda: seen.append(
            c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 40})))
        t.start()
        deadline = time.time() + 5
        while drain.in_flight == 0 and time.time() < deadline:
            time.sleep(0.01)
        assert drain.in_flight == 1
        c.get("/health")
        assert drain.in_flight == 1  # probes are not requests the drain waits for
        t.join(10)
    assert seen[0].status_code == 200 and drain.in_flight == 0


def test_abort_ends_streams_with_an_error_event_then_done_and_others_with_503():
    """What the end of the shutdown grace does: every request still running or queued ends OpenAI-shaped."""
    backend = ScriptedBackend(max_batch_size=1, step_s=0.02)
    c, _, scheduler = make_client(backend)
    with c:
        results: dict = {}

        def stream():
            body = {"model": "tiny", "prompt": "x", "max_tokens": 256, "stream": True}
            with c.stream("POST", "/v1/completions", json=body) as r:
                r.read()
            results["stream"] = sse_events(r)

        def plain():
            results["plain"] = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 256})

        threads = [threading.Thread(target=stream), threading.Thread(target=plain)]
        for t in threads:
            t.start()
        deadline = time.time() + 5
        while (scheduler.num_running + scheduler.num_waiting) < 2 and time.time() < deadline:
            time.sleep(0.01)
        assert scheduler.abort_all() == 2
        for t in threads:
            t.join(10)
        events = results["stream"]
        assert events[-1] == "[DONE]"
        assert events[-2]["error"]["code"] == "server_shutting_down" and events[-2]["error"]["type"] == "server_error"
        err = assert_openai_error(results["plain"], 503)
        assert err["code"] == "server_shutting_down" and results["plain"].headers["retry-after"] == "1"
        assert_openai_error(c.post("/v1/completions", json={"model": "tiny", "prompt": "x"}), 503)  # no new work


def test_metrics_have_vllm_spec_decode_names(client):
    client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 8})
    values = _samples(client.get("/metrics").text)

    def value(name: str, **labels: str) -> float:
        return values[(name, frozenset({"model_name": "tiny", **labels}.items()))]

    assert value("vllm:spec_decode_num_drafts_total") == 4
    assert value("vllm:spec_decode_num_draft_tokens_total") == 8
    assert value("vllm:spec_decode_num_accepted_tokens_total") == 4
    assert value("vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0") == 4
    assert value("vllm:spec_decode_num_accepted_tokens_per_pos_total", position="1") == 0
    assert value("vllm:generation_tokens_total") == 8
    assert value("vllm:request_success_total", finished_reason="length") == 1
    assert value("vllm:e2e_request_latency_seconds_count") == 1


def test_running_gauge_reads_zero_once_idle(client):
    # The gauge followed admissions only, so it kept the last batch's size after it finished.
    for n in (3, 8):
        client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": n})
    values = _samples(client.get("/metrics").text)
    assert values[("vllm:num_requests_running", frozenset({("model_name", "tiny")}))] == 0
    assert values[("vllm:num_requests_waiting", frozenset({("model_name", "tiny")}))] == 0


class SpeculatingBackend(ScriptedBackend):
    """Says, as the engine backend does, what speculation did in each step: on in odd steps, not paying in even."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = {"on": 0, "no_draft": 0, "not_paying": 0, "at_length": 0}

    def step(self) -> list[StepOutput]:
        self.steps["on" if sum(self.steps.values()) % 2 == 0 else "not_paying"] += 1
        return super().step()

    def speculation_steps(self) -> dict[str, int]:
        return dict(self.steps)


def test_metrics_say_how_often_and_why_speculation_was_off():
    c, backend, _ = make_client(SpeculatingBackend())
    with c:
        c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 8})  # 4 steps
        values = _samples(c.get("/metrics").text)

    def value(state: str) -> float:
        return values[("specplug:spec_decode_steps_total", frozenset({"model_name": "tiny", "state": state}.items()))]

    assert value("on") == 2 and value("not_paying") == 2 and value("no_draft") == 0 and value("at_length") == 0


class CachingBackend(ScriptedBackend):
    """Reports prefix-cache lookups as the engine's backend does: each prompt looked up, all but 2 tokens found."""

    def __init__(self) -> None:
        super().__init__()
        self.queried = self.hit = 0

    def add(self, rid, prompt_ids, max_tokens, sampling) -> None:
        self.queried += len(prompt_ids)
        self.hit += max(0, len(prompt_ids) - 2)
        super().add(rid, prompt_ids, max_tokens, sampling)

    def prefix_cache_tokens(self) -> tuple[int, int]:
        return self.queried, self.hit


def test_metrics_count_prompt_tokens_found_in_the_prefix_cache():
    c, _, _ = make_client(CachingBackend())
    with c:
        for _ in range(2):
            c.post("/v1/completions", json={"model": "tiny", "prompt": "abcdef", "max_tokens": 4})
        values = _samples(c.get("/metrics").text)
    labels = frozenset({"model_name": "tiny"}.items())
    assert values[("vllm:prefix_cache_queries_total", labels)] == 12
    assert values[("vllm:prefix_cache_hits_total", labels)] == 8


# Every family /metrics exports, with the type a Prometheus server must see (vLLM's names and types).
EXPECTED_FAMILIES = {
    "vllm:spec_decode_num_drafts": "counter",
    "vllm:spec_decode_num_draft_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "specplug:requests_rejected": "counter",
    "specplug:requests_cancelled": "counter",
    "specplug:engine_steps": "counter",
    "specplug:spec_decode_steps": "counter",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
}


def test_metrics_are_valid_exposition_for_the_official_parser(client):
    """prometheus_client's parser reads every family with its type: no empty counter, no untyped sample."""
    from prometheus_client.parser import text_string_to_metric_families

    client.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 8})
    client.post("/v1/completions", json={"model": "tiny", "prompt": ""})  # a rejection, so a labelled series exists
    r = client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    created = {n for n in families if n.endswith("_created")}  # prometheus_client's creation-time gauges
    assert all(families[n].type == "gauge" for n in created)
    assert {n: f.type for n, f in families.items() if n not in created} == EXPECTED_FAMILIES
    for name, fam in families.items():
        assert fam.type in ("counter", "gauge", "histogram"), f"{name} is {fam.type}"
        assert fam.samples, f"{name} has no samples"
        for s in fam.samples:
            assert isinstance(s.value, float) and s.value >= 0, s
            assert s.labels["model_name"] == "tiny", s
    assert families["vllm:spec_decode_num_drafts"].samples[0].name == "vllm:spec_decode_num_drafts_total"
    assert "# TYPE vllm:spec_decode_num_drafts_total counter" in r.text  # HELP/TYPE name what samples carry
    ttft = {s.name for s in families["vllm:time_to_first_token_seconds"].samples}
    assert ttft == {"vllm:time_to_first_token_seconds_" + k for k in ("bucket", "count", "sum")}
    rejected = families["specplug:requests_rejected"].samples
    assert any(s.labels.get("reason") == "invalid_request" and s.value == 1 for s in rejected)


def test_each_app_has_its_own_metrics():
    a, b = ServerMetrics("a"), ServerMetrics("b")
    a.engine_steps.inc(3)
    assert a.engine_steps.value() == 3 and b.engine_steps.value() == 0
    assert 'model_name="a"' not in b.render()


def test_disconnect_cancels_the_request():
    """A client that hangs up mid-stream frees its batch slot: the backend is told to drop it."""
    import uvicorn

    backend = ScriptedBackend(max_batch_size=2, step_s=0.02)
    tok = CharTokenizer()
    metrics = ServerMetrics("tiny")
    scheduler = Scheduler(backend, tok, metrics)
    app = build_app(scheduler, tok, ServerSettings(model_name="tiny", max_model_len=4096, max_tokens_limit=4000), metrics)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]

        async def hang_up(stream: bool) -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 3000, "stream": stream}).encode()
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.close()

        for stream in (True, False):
            before = len(backend.removed)
            asyncio.run(hang_up(stream))
            deadline = time.time() + 5
            while len(backend.removed) == before and time.time() < deadline:
                time.sleep(0.05)
            assert len(backend.removed) == before + 1, f"stream={stream}: request kept decoding after disconnect"
        assert metrics.requests_cancelled.value() == 2
        assert not backend.live
    finally:
        server.should_exit = True
        thread.join(10)


def test_vllm_dialect_extras_accepted_and_unknown_fields_ignored(client):
    body = {"model": "tiny", "prompt": "x", "max_tokens": 4, "ignore_eos": True, "min_tokens": 0, "stop": None,
            "skip_special_tokens": True, "repetition_penalty": 1.0, "frobnicate": 1}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-ignored-fields"] == "frobnicate"
    assert r.json()["usage"]["completion_tokens"] == 4


def test_continuous_usage_stats_streams_usage_on_every_chunk(client):
    body = {"model": "tiny", "prompt": "x", "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with client.stream("POST", "/v1/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert all("usage" in c for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_per_request_spec_decode_metrics_summary():
    c, _, _ = make_client(per_request_spec_metrics="summary", num_spec_tokens=2)
    with c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 6})
    sd = r.json()["metrics"]["speculative_decoding"]
    # The scripted backend drafts 2 and accepts 1 every step.
    assert sd["acceptance_histogram"] == [0, 3, 0] and sd["num_draft_tokens"] == 6
    assert sd["mean_acceptance_length"] == 2.0 and sd["draft_acceptance_rate"] == 0.5


class AsciiTokenizer:
    """For the tiny random models: token i is the character chr(32 + i); EOS is id 1 ('!')."""

    eos_token_id = 1

    def __len__(self) -> int:
        return 96

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) - 32 for c in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(32 + i) for i in ids)


@pytest.fixture(scope="module")
def engine_client():
    pytest.importorskip("torch")
    from specplug.runtime.engine import SpeculativeEngine
    from specplug.runtime.proposers import NgramProposer
    from specplug.runtime.serving.backend import EngineBackend
    from specplug.runtime.tiny import tiny_llama

    engine = SpeculativeEngine(tiny_llama(layers=2, seed=3), proposer_factory=lambda: NgramProposer(1, 3), k=3)
    tok = AsciiTokenizer()
    metrics = ServerMetrics("tiny")
    settings = ServerSettings(model_name="tiny", max_model_len=512, max_tokens_limit=256)
    app = build_app(Scheduler(EngineBackend(engine, 4), tok, metrics), tok, settings, metrics)
    with TestClient(app) as c:
        yield c


def _complete(c, **kw) -> dict:
    body = {"model": "tiny", "prompt": "abcabcabcab", "max_tokens": 24, "temperature": 0, "ignore_eos": True, **kw}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_stop_token_ids_end_the_output_counted_and_not_in_the_text(engine_client):
    text = _complete(engine_client)["choices"][0]["text"]
    i = 5
    tok = ord(text[i]) - 32
    i = text.index(text[i])  # its first occurrence ends the output
    out = _complete(engine_client, stop_token_ids=[tok])
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == text[:i]
    assert out["usage"]["completion_tokens"] == i + 1  # vLLM counts the stop token
    kept = _complete(engine_client, stop_token_ids=[tok], include_stop_str_in_output=True)
    assert kept["choices"][0]["text"] == text[: i + 1]
    # Streamed: the same text and count.
    body = {"model": "tiny", "prompt": "abcabcabcab", "max_tokens": 24, "temperature": 0, "stop_token_ids": [tok],
            "stream": True, "stream_options": {"include_usage": True}}
    with engine_client.stream("POST", "/v1/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == text[:i]
    assert chunks[-1]["usage"]["completion_tokens"] == i + 1


def test_min_tokens_holds_stop_tokens_and_stop_strings_back(engine_client):
    text = _complete(engine_client)["choices"][0]["text"]
    tok = ord(text[2]) - 32
    first = text.index(text[2])
    assert first < 10
    out = _complete(engine_client, stop_token_ids=[tok], min_tokens=10)
    got = out["choices"][0]["text"]
    assert chr(32 + tok) not in got[:10]
    assert out["usage"]["completion_tokens"] > 10 or out["choices"][0]["finish_reason"] == "length"
    # A stop string inside the first min_tokens tokens' text does not count.
    held = _complete(engine_client, stop=[text[first]], min_tokens=10)["choices"][0]["text"]
    assert len(held) >= 10 and text[first] not in held[10:]


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"min_tokens": 30}, "min_tokens"),  # more than max_tokens (24)
        ({"stop_token_ids": [-1]}, "stop_token_ids.0"),
        ({"stop_token_ids": [96]}, "stop_token_ids"),  # outside the vocabulary
        ({"stop_token_ids": "3"}, "stop_token_ids"),
        ({"stop_token_ids": list(range(300))}, "stop_token_ids"),
    ],
)
def test_bad_min_tokens_and_stop_token_ids_are_400s(engine_client, extra, param):
    r = engine_client.post("/v1/completions", json={"model": "tiny", "prompt": "abc", "max_tokens": 24, **extra})
    assert_openai_error(r, 400, param)


def test_ignored_field_names_with_spaces_make_a_header_servers_accept(client):
    # A header value may not begin or end with whitespace: h11 would drop the connection instead of answering.
    body = {"model": "tiny", "prompt": "x", "max_tokens": 2, " ": None, " a b ": 1}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-ignored-fields"] == "?,?a?b?"
