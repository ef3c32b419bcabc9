"""End to end: a real `python -m specplug.runtime.server` process on the packaged SmolLM2-135M model.

One server (n-gram speculation, k=4) is shared by the module: the official `openai` client unchanged, greedy
output equal to the runtime's own plain greedy decoding (`specplug generate --method none`), metrics that
show accepted draft tokens growing, 64 concurrent clients with zero errors, and schema-driven fuzzing that
gets only 4xx answers and leaves the server healthy. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("fastapi")

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
STARTUP_S = 600  # first start converts the GGUF once (cached afterwards)

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The capital of France is Paris. The capital of Spain is Madrid. The capital of Italy is",
    "List three colours: red, green, blue. List three colours again:",
]


# Short prompts for the load test: 64 prefills on 2 cores are the bulk of its time.
SHORT_PROMPTS = ["Hello, my name is", "The capital of France is", "1, 2, 3, 4,", "Once upon a time"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    argv = [
        sys.executable, "-m", "specplug.runtime.server", "--model", MODEL, "--method", "ngram", "-k", "4",
        "--port", str(port), "--max-batch-size", "16", "--max-tokens-limit", "64", "--max-prompt-tokens", "256",
        "--max-queue", "128", "--log-level", "warning",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if _get(base + "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not healthy after {STARTUP_S}s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _metric(base: str, name: str) -> float:
    status, text = _get(base + "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_openai_client_completion_chat_and_streaming(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)

    assert [m.id for m in client.models.list().data] == [MODEL]

    c = client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=8, temperature=0)
    assert c.choices[0].text.strip()
    assert c.choices[0].finish_reason in ("stop", "length")
    assert c.usage.prompt_tokens > 10 and 0 < c.usage.completion_tokens <= 8

    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello in one word."}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content.strip()
    assert chat.usage.completion_tokens > 0

    pieces, usage = [], None
    for chunk in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to five."}], max_tokens=8, temperature=0,
        stream=True, stream_options={"include_usage": True},
    ):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces).strip()
    assert usage is not None and usage.completion_tokens > 0

    streamed = "".join(
        ch.choices[0].text for ch in client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=8, temperature=0, stream=True)
    )
    assert streamed == c.choices[0].text  # streaming and non-streaming agree

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, n=3)
    assert "n > 1" in str(err.value)


def _runtime_greedy(prompts: list[str], max_tokens: int) -> list[str]:
    """The runtime's own plain greedy decoding, in-process (no server, no speculation)."""
    from specplug.runtime.engine import GenerationParams
    from specplug.runtime.models import build_engine

    engine = build_engine(MODEL, method="none")
    tok = engine.tokenizer
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    results = engine.generate(ids, GenerationParams(max_new_tokens=max_tokens))
    return [tok.decode(r.tokens, skip_special_tokens=True) for r in results]


def test_greedy_through_server_equals_runtime_greedy(server):
    """Speculation behind the server, batched with other requests, changes no token of greedy output."""
    import concurrent.futures

    import httpx

    def ask(prompt: str) -> str:
        r = httpx.post(server + "/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0}, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        served = list(pool.map(ask, PROMPTS))  # concurrently, so they share decode batches
    expected = _runtime_greedy(PROMPTS, 24)
    assert served == expected


def test_metrics_show_accepted_draft_tokens_growing(server):
    import httpx

    before = _metric(server, "vllm:spec_decode_num_accepted_tokens_total")
    drafts_before = _metric(server, "vllm:spec_decode_num_drafts_total")
    # Code that repeats itself: n-gram lookup finds its drafts in the prompt.
    r = httpx.post(server + "/v1/completions", json={"model": MODEL, "prompt": PROMPTS[0] * 2, "max_tokens": 32, "temperature": 0}, timeout=300)
    assert r.status_code == 200
    assert _metric(server, "vllm:spec_decode_num_drafts_total") > drafts_before
    assert _metric(server, "vllm:spec_decode_num_accepted_tokens_total") > before
    assert _metric(server, 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="smollm2-135m",position="0"}') > 0
    assert _metric(server, "vllm:e2e_request_latency_seconds_count") >= 1


def test_64_concurrent_clients_zero_errors(server):
    import asyncio

    from specplug.runtime.serving.loadgen import run_load

    res = asyncio.run(run_load(server, MODEL, SHORT_PROMPTS, clients=64, requests_per_client=1, max_tokens=8,
                               stream_every=4, timeout_s=420))
    print(json.dumps(res.summary()))
    assert res.errors == []
    assert res.ok == res.requests == 64
    assert res.completion_tokens >= 64
    assert _get(server + "/health")[0] == 200


def test_an_idle_kept_alive_connection_outlives_client_pools(server):
    """httpx and the OpenAI SDK keep an idle connection 5 s: the server must keep it longer, or a request sent
    just as the server closes it is lost with a read error (uvicorn's default is also 5 s)."""
    import http.client
    from urllib.parse import urlparse

    url = urlparse(server)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("GET", "/health")
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        time.sleep(6)
        conn.request("GET", "/health")
        second = conn.getresponse()
        second.read()
        assert (first.status, second.status) == (200, 200)
        assert conn.sock is sock, "the second request needed a new connection"
    finally:
        conn.close()


def _fuzz(schema, server: str, path: str, mode, examples: int, seen: dict[int, int]) -> None:
    from hypothesis import HealthCheck, given, settings

    positive = mode.name == "POSITIVE"

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=schema[path]["POST"].as_strategy(generation_mode=mode))
    def check(case):
        if positive and isinstance(case.body, dict):
            case.body["max_tokens"] = 2  # valid requests really decode; keep them short
        r = case.call(base_url=server, timeout=120)
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500, r.text
        if r.status_code >= 400:
            assert set(r.json()) == {"error"}
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}

    check()


def test_schema_fuzzing_gets_only_4xx_and_server_stays_healthy(server):
    """schemathesis against the server's own OpenAPI document: malformed and valid-but-odd bodies."""
    schemathesis = pytest.importorskip("schemathesis")

    schema = schemathesis.openapi.from_url(server + "/openapi.json")
    seen: dict[int, int] = {}
    for path in ("/v1/completions", "/v1/chat/completions"):
        _fuzz(schema, server, path, schemathesis.GenerationMode.NEGATIVE, 40, seen)
        _fuzz(schema, server, path, schemathesis.GenerationMode.POSITIVE, 10, seen)
    assert any(400 <= s < 500 for s in seen)
    assert 200 in seen
    assert _get(server + "/health")[0] == 200
