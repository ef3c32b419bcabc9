"""The embedded adapter: render (argv, mapping of techniques, secrets), the fallback plan, and a real
`specplug launch vllm --fallback embedded` on this machine (no vLLM in the venv)."""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.request

import pytest

from specplug.errors import StackError
from specplug.stacks.registry import get_adapter


@pytest.fixture
def embedded():
    return get_adapter("embedded")


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_ngram_plan_renders_the_embedded_server(embedded, plan_factory):
    plan = plan_factory("embedded", "0.1.0", model="smollm2-135m", method="ngram", k=5, prompt_lookup_max=3)
    spec = embedded.render(plan)
    assert spec.argv[:3] == ["python3", "-m", "specplug.runtime.server"]
    assert flag(spec.argv, "--model") == "smollm2-135m"
    assert flag(spec.argv, "--method") == "ngram"
    assert flag(spec.argv, "--num-speculative-tokens") == "5"
    assert flag(spec.argv, "--prompt-lookup-max") == "3"
    assert flag(spec.argv, "--host") == "127.0.0.1"
    assert spec.health_url == "http://127.0.0.1:8000/health"
    assert spec.base_url == "http://127.0.0.1:8000/v1"
    assert spec.notes == []


@pytest.mark.parametrize("method", ["eagle3", "eagle", "medusa", "mtp", "mlp_speculator", "suffix", "lookahead"])
def test_techniques_the_runtime_lacks_map_to_ngram_and_say_so(embedded, plan_factory, method):
    plan = plan_factory("embedded", "0.1.0", model="smollm2-135m", method=method, drafter="some/head", k=3)
    spec = embedded.render(plan)
    assert flag(spec.argv, "--method") == "ngram"
    assert "--drafter" not in spec.argv
    assert any(method in n and "ngram" in n for n in spec.notes), spec.notes
    assert embedded.methods("0.1.0")[method] is not None  # not claimed as native


def test_draft_model_passes_the_drafter(embedded, plan_factory):
    spec = embedded.render(plan_factory("embedded", "0.1.0", model="smollm2-135m", method="draft_model", drafter="/models/draft", k=3))
    assert flag(spec.argv, "--method") == "draft_model"
    assert flag(spec.argv, "--drafter") == "/models/draft"
    assert embedded.methods("0.1.0")["draft_model"] is None and embedded.methods("0.1.0")["ngram"] is None


def test_no_speculation(embedded, plan_factory):
    spec = embedded.render(plan_factory("embedded", "0.1.0", model="smollm2-135m", method="none"))
    assert flag(spec.argv, "--method") == "none"
    assert "--num-speculative-tokens" not in spec.argv


def test_api_key_is_a_reference_never_a_value(embedded, plan_factory):
    plan = plan_factory("embedded", "0.1.0", model="smollm2-135m", serve={"api_key_env": "MY_KEY", "port": 9001})
    spec = embedded.render(plan)
    assert spec.env_from == {"SPECPLUG_API_KEY": "MY_KEY"}
    assert "--api-key" not in spec.argv
    assert flag(spec.argv, "--port") == "9001"


def test_hostile_names_stay_single_argv_elements(embedded, plan_factory):
    evil = "x; rm -rf ~ $(id) `id` 'q'"
    spec = embedded.render(plan_factory("embedded", "0.1.0", model=evil, method="ngram", serve={"extra_args": ["--log-level", "$(id)"]}))
    assert evil in spec.argv
    assert spec.argv[-2:] == ["--log-level", "$(id)"]


def test_multi_gpu_plan_is_refused_with_a_hint(embedded, plan_factory):
    with pytest.raises(StackError, match="one device"):
        embedded.render(plan_factory("embedded", "0.1.0", model="smollm2-135m", tp=4, num_gpus=4))


def test_launch_argv_uses_this_interpreter(embedded):
    assert embedded.launch_argv(["python3", "-m", "specplug.runtime.server"]) == [sys.executable, "-m", "specplug.runtime.server"]


def test_fallback_plan_maps_technique_and_layout(embedded, plan_factory):
    plan = plan_factory("vllm", "0.10.0", model="smollm2-135m", method="eagle3", drafter="some/eagle3-head", k=3, tp=4, num_gpus=4)
    fb = embedded.fallback_plan(plan, "vLLM is not installed here.")
    assert fb.speculation.method == "ngram" and fb.speculation.drafter is None and fb.speculation.num_speculative_tokens == 3
    assert fb.parallelism.tensor_parallel_size == 1
    assert "vllm cannot start here" in fb.reasons[0] and "embedded runtime" in fb.reasons[0]
    assert "eagle3" in fb.reasons[1] and "ngram" in fb.reasons[1]


def test_installed_when_runtime_extra_is(embedded):
    from specplug import __version__

    assert embedded.installed_version() == __version__
    assert embedded.runs_without_gpu(__version__)


@pytest.mark.slow
def test_launch_vllm_falls_back_to_embedded_and_serves(tmp_path, monkeypatch):
    """vLLM is not in this venv: the launcher says so, starts the embedded server, and it answers."""
    pytest.importorskip("torch")
    from importlib.util import find_spec

    if find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; the fallback path is not taken")
    from specplug.launcher import launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = io.StringIO()
    res = launch("vllm", model="smollm2-135m", method="ngram", num_speculative_tokens=4, port=port,
                 fallback="embedded", wait=False, timeout=600, out=out)
    try:
        text = out.getvalue()
        assert "vllm cannot start here" in text and "embedded fallback" in text
        assert "specplug.runtime.server" in text and "--method ngram" in text
        assert res.fallback_used == "embedded"
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"model": "smollm2-135m", "prompt": "Hello,", "max_tokens": 4, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            body = json.loads(r.read())
        assert body["usage"]["completion_tokens"] >= 1
    finally:
        assert res.server is not None
        res.server.stop()
    assert not res.server.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(res.server.pgid, 0)  # no process of the group is left
