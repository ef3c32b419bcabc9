"""Structured output and logprobs through the embedded server's HTTP API, on the packaged SmolLM2 in process:
response_format json_schema / json_object (and vLLM's guided_* fields), the openai SDK's ``parse``, logprobs in
OpenAI's shapes that equal plain decoding's under n-gram speculation, and the legacy ``functions`` refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
from fastapi.testclient import TestClient  # noqa: E402

from specplug.runtime.serving.app import ServerSettings, build_app  # noqa: E402
from specplug.runtime.serving.metrics import ServerMetrics  # noqa: E402
from specplug.runtime.serving.scheduler import Scheduler  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe a person named Bob who is 41, as JSON."}]


@pytest.fixture(scope="module")
def clients(smollm2_folder, device):
    """(speculative client, plain client): one SmolLM2, served with n-gram speculation (k=4) and without."""
    from specplug.runtime.engine import SpeculativeEngine
    from specplug.runtime.models import load_model
    from specplug.runtime.proposers import NgramProposer
    from specplug.runtime.serving.backend import EngineBackend

    target, tok = load_model(str(smollm2_folder), device, torch.float32)
    out = []
    for factory in (lambda: NgramProposer(1, 4), None):
        engine = SpeculativeEngine(target, None, factory, k=4, device=device)
        metrics = ServerMetrics("smol")
        settings = ServerSettings(model_name="smol", max_model_len=2048, max_tokens_limit=256)
        out.append(TestClient(build_app(Scheduler(EngineBackend(engine, 4), tok, metrics), tok, settings, metrics)))
    for c in out:
        c.__enter__()
    yield out
    for c in out:
        c.__exit__(None, None, None)


def _chat(c, **kw) -> dict:
    body = {"model": "smol", "messages": ASK, "max_tokens": 64, "temperature": 0, **kw}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_json_schema_output_validates_and_is_identical_with_speculation(clients):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    spec, plain = (_chat(c, response_format=fmt) for c in clients)
    assert spec["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert spec["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(spec["choices"][0]["message"]["content"]), SCHEMA)


def test_json_object_on_chat_and_completions_and_guided_json(clients):
    spec = clients[0]
    ask = [{"role": "user", "content": 'What is 2 + 2? Reply with a JSON object like {"answer": 0}.'}]
    done = _chat(spec, messages=ask, response_format={"type": "json_object"})["choices"][0]
    assert done["finish_reason"] == "stop", done
    assert isinstance(json.loads(done["message"]["content"]), dict)
    r = spec.post("/v1/completions", json={"model": "smol", "prompt": "A JSON object describing a cat:", "max_tokens": 48,
                                           "temperature": 0, "guided_json": SCHEMA})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), SCHEMA)
    r = spec.post("/v1/completions", json={"model": "smol", "prompt": "Is the sky blue? Answer:", "max_tokens": 8,
                                           "temperature": 0, "guided_choice": ["yes", "no"]})
    assert r.json()["choices"][0]["text"] in ("yes", "no")


def test_openai_sdk_parse_returns_the_pydantic_object(clients):
    openai = pytest.importorskip("openai")
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=clients[0])
    done = client.chat.completions.parse(model="smol", messages=ASK, response_format=Person, temperature=0, max_tokens=64)
    person = done.choices[0].message.parsed
    assert isinstance(person, Person) and person.name


def test_bad_structure_requests_are_openai_400s(clients):
    c = clients[0]
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wizard"}}}},
         "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
        ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
    ]
    for extra, param in cases:
        r = c.post("/v1/chat/completions", json={"model": "smol", "messages": ASK, "max_tokens": 4, **extra})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]
    assert c.get("/health").status_code == 200


@pytest.mark.parametrize(("field", "value"), [("functions", [{"name": "f", "parameters": {}}]), ("function_call", {"name": "f"})])
def test_legacy_function_calling_is_refused_by_name(clients, field, value):
    r = clients[0].post("/v1/chat/completions", json={"model": "smol", "messages": ASK, field: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == field and field in err["message"] and "response_format" in err["message"]
    assert err["code"] == "unsupported_parameter"


def test_chat_logprobs_shape_and_equal_with_and_without_speculation(clients):
    spec, plain = (_chat(c, logprobs=True, top_logprobs=2, max_tokens=24, messages=[
        {"role": "user", "content": "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10. Count again from 1 to 10."}]) for c in clients)
    a, b = spec["choices"][0]["logprobs"]["content"], plain["choices"][0]["logprobs"]["content"]
    assert len(a) == len(b) == spec["usage"]["completion_tokens"]
    for x, y in zip(a, b, strict=True):
        assert set(x) == {"token", "logprob", "bytes", "top_logprobs"}
        assert x["token"] == y["token"] and abs(x["logprob"] - y["logprob"]) < 1e-4
        assert len(x["top_logprobs"]) == 2 and x["top_logprobs"][0]["token"] == x["token"]
        assert x["bytes"] == list(x["token"].encode())
    assert "".join(x["token"] for x in a) == spec["choices"][0]["message"]["content"]


def test_completion_logprobs_shape_and_streaming(clients):
    c = clients[0]
    body = {"model": "smol", "prompt": "1, 2, 3, 4, 5,", "max_tokens": 12, "temperature": 0, "logprobs": 2}
    out = c.post("/v1/completions", json=body).json()["choices"][0]
    lp = out["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == out["text"] and len(lp["tokens"]) == len(lp["token_logprobs"]) == 12
    assert lp["text_offset"][0] == 0 and all(2 <= len(t) <= 3 for t in lp["top_logprobs"])
    with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    streamed = [t for ch in chunks if ch["choices"] and ch["choices"][0]["logprobs"] for t in ch["choices"][0]["logprobs"]["tokens"]]
    assert streamed == lp["tokens"]
    offsets = [o for ch in chunks if ch["choices"] and ch["choices"][0]["logprobs"] for o in ch["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == lp["text_offset"]


def test_a_request_without_structure_does_not_import_llguidance():
    """No response_format: no llguidance import and no mask, also with logprobs."""
    code = textwrap.dedent("""
        import sys
        from fastapi.testclient import TestClient
        from specplug.runtime.engine import SpeculativeEngine
        from specplug.runtime.proposers import NgramProposer
        from specplug.runtime.serving.app import ServerSettings, build_app
        from specplug.runtime.serving.backend import EngineBackend
        from specplug.runtime.serving.metrics import ServerMetrics
        from specplug.runtime.serving.scheduler import Scheduler
        from specplug.runtime.tiny import tiny_llama

        class Tok:
            eos_token_id = 1
            def __len__(self): return 96
            def __call__(self, text, add_special_tokens=False): return {"input_ids": [ord(c) - 32 for c in text]}
            def decode(self, ids, skip_special_tokens=True): return "".join(chr(32 + i) for i in ids)

        engine = SpeculativeEngine(tiny_llama(layers=2, seed=3), proposer_factory=lambda: NgramProposer(1, 3), k=3)
        tok, metrics = Tok(), ServerMetrics("tiny")
        app = build_app(Scheduler(EngineBackend(engine, 4), tok, metrics), tok,
                        ServerSettings(model_name="tiny", max_model_len=512), metrics)
        with TestClient(app) as c:
            r = c.post("/v1/completions", json={"model": "tiny", "prompt": "abcabc", "max_tokens": 8, "logprobs": 1})
            assert r.status_code == 200 and len(r.json()["choices"][0]["logprobs"]["tokens"]) == 8, r.text
        assert "llguidance" not in sys.modules, "llguidance was imported"
        assert "specplug.runtime.structured" not in sys.modules
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr
