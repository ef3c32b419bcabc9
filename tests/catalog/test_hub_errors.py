"""What a user sees when a Hub model cannot be read: one SpecplugError, exit 1, saying what would work instead
(a local folder, HF_TOKEN, a catalog alias, an existing revision) - never a traceback, never a guess."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.catalog.hubfake import TOKEN, FakeHub, Repo, fixture_repos

QWEN = fixture_repos()["Qwen/Qwen3-8B"].files["config.json"]


def _clean_error(r, *needles: str) -> None:
    assert r.exit_code == 1, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)


@pytest.fixture
def odd_hub(hub_env, monkeypatch):
    """A Hub with the repositories users trip over."""
    bnb = json.loads(QWEN)
    bnb["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    repos = {
        "example/gated-model": Repo({"config.json": QWEN}, "a" * 40, gated=True),
        "example/gguf-only": Repo({"README.md": b"# GGUF files only", "model-Q4_K_M.gguf": b"GGUF"}, "b" * 40),
        "example/broken-config": Repo({"config.json": b"{not json"}, "c" * 40),
        "example/bnb-4bit": Repo({"config.json": json.dumps(bnb).encode()}, "d" * 40),
        **{k: v for k, v in fixture_repos().items() if k in ("deepseek-ai/DeepSeek-V4-Flash", "moonshotai/Kimi-K3",
                                                               "stepfun-ai/Step-3.7-Flash")},
    }
    with FakeHub(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_no_network_fails_fast_and_says_what_would_work(hub_env, monkeypatch, run_cli) -> None:
    with socket.socket() as s:  # a port nothing listens on: the Hub is unreachable
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    start = time.perf_counter()
    r = run_cli("recommend", "--model", "example/any-model", "--gpu", "h100")
    _clean_error(r, "Cannot reach", "HF_HUB_OFFLINE=1", "local model folder", "catalog alias")
    assert time.perf_counter() - start < 5  # no backoff-and-retry minutes on a machine without network


def test_a_gated_model_without_hf_token(odd_hub, monkeypatch, run_cli) -> None:
    _clean_error(run_cli("models", "show", "example/gated-model"), "gated repository", "no HF_TOKEN is set",
                 "set HF_TOKEN", "local model folder")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_cli("models", "show", "example/gated-model", "--output", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["num_layers"] == 36


def test_a_repository_without_config_json(odd_hub, run_cli) -> None:
    _clean_error(run_cli("recommend", "--model", "example/gguf-only", "--gpu", "h100"),
                 "has no config.json", "GGUF-only", "local folder or .gguf file")


def test_a_repository_that_does_not_exist(odd_hub, run_cli) -> None:
    _clean_error(run_cli("estimate", "--model", "example/no-such-model", "--gpu", "h100", "--method", "ngram"),
                 "No model repository 'example/no-such-model'", "HF_TOKEN", "catalog alias")


@pytest.mark.parametrize(("repo", "model_type"), [
    ("deepseek-ai/DeepSeek-V4-Flash", "deepseek_v4"), ("moonshotai/Kimi-K3", "kimi_linear"),
    ("stepfun-ai/Step-3.7-Flash", "step3p7"),
])
def test_an_architecture_specplug_cannot_read(odd_hub, run_cli, repo: str, model_type: str) -> None:
    _clean_error(run_cli("models", "show", repo), "cannot read the architecture", f"model_type '{model_type}'",
                 "catalog alias")


def test_a_revision_that_does_not_exist(odd_hub, run_cli) -> None:
    _clean_error(run_cli("models", "show", "stepfun-ai/Step-3.7-Flash@no-such-branch"),
                 "has no revision 'no-such-branch'", "stepfun-ai/Step-3.7-Flash@main")
    _clean_error(run_cli("models", "show", "stepfun-ai/Step-3.7-Flash", "--revision", "0" * 40),
                 f"has no revision '{'0' * 40}'")


def test_offline_without_a_cached_copy(odd_hub, monkeypatch, run_cli) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _clean_error(run_cli("recommend", "--model", "example/bnb-4bit", "--gpu", "h100"),
                 "HF_HUB_OFFLINE is set", "not in the Hugging Face cache", "Unset HF_HUB_OFFLINE")
    assert odd_hub.requests == []


def test_a_config_that_is_not_json_or_a_quantization_specplug_cannot_size(odd_hub, run_cli) -> None:
    _clean_error(run_cli("models", "show", "example/broken-config"), "Cannot parse config.json of example/broken-config")
    _clean_error(run_cli("models", "show", "example/bnb-4bit"), "quant_method 'bitsandbytes'", "--quantization")


def test_a_revision_needs_a_hub_id(hub_env, run_cli, tmp_path) -> None:
    _clean_error(run_cli("models", "show", "llama-3.1-8b@main"), "is not a Hugging Face id")
    (tmp_path / "folder").mkdir()
    _clean_error(run_cli("models", "show", str(tmp_path / "folder"), "--revision", "main"), "a revision names a version")


def test_an_unreachable_hub_falls_back_to_the_cached_copy(fake_hub, monkeypatch, run_cli) -> None:
    from specplug.catalog import hubmodel

    assert run_cli("models", "show", "zai-org/GLM-5.1").exit_code == 0  # fills the cache
    hubmodel._READ.clear()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    start = time.perf_counter()
    r = run_cli("models", "show", "zai-org/GLM-5.1", "--output", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["num_layers"] == 78 and time.perf_counter() - start < 5
