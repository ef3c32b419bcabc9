import dataclasses

import pytest

from specplug.capabilities import StackCapabilities, research_code
from specplug.catalog import get_model
from specplug.policy.tokenizers import compatible
from specplug.stackcaps import declared

VLLM, LLAMACPP = declared("vllm"), declared("llamacpp")


def test_same_family_same_vocab_is_compatible() -> None:
    assert compatible(get_model("llama-3.1-70b"), get_model("llama-3.2-1b"), VLLM).ok


def test_different_family_is_not() -> None:
    c = compatible(get_model("llama-3.1-70b"), get_model("qwen2.5-0.5b"), VLLM)
    assert not c.ok and "vLLM" in (c.reason or "")


def test_padding_only_difference_depends_on_stack() -> None:
    target, draft = get_model("qwen2.5-72b"), get_model("qwen2.5-0.5b")  # 152064 vs 151936
    assert not compatible(target, draft, VLLM).ok
    assert compatible(target, draft, LLAMACPP).ok


def test_the_verdict_follows_the_declared_capabilities_not_the_stack_name() -> None:
    # A vLLM fork that declared llama.cpp's slack: judged by what it declares, under its own name.
    target, draft = get_model("qwen2.5-72b"), get_model("qwen2.5-0.5b")
    fork = dataclasses.replace(VLLM, name="vllmfork", vocab_slack=128)
    assert compatible(target, draft, fork).ok
    tight = dataclasses.replace(LLAMACPP, vocab_slack=64)
    c = compatible(target, draft, tight)
    assert not c.ok and c.reason == f"vocab sizes differ by 128 (> 64); {LLAMACPP.vocab_mismatch}"


def test_a_stack_that_states_no_behaviour_gets_the_bare_reason() -> None:
    c = compatible(get_model("llama-3.1-70b"), get_model("qwen2.5-0.5b"), StackCapabilities("plain", None, "unknown"))
    assert not c.ok and c.reason is not None and c.reason.startswith("different tokenizers (") and c.reason.endswith(")")


def test_research_code_names_universal_assisted_generation() -> None:
    c = compatible(get_model("llama-3.1-70b"), get_model("qwen2.5-0.5b"), research_code())
    assert not c.ok and "assistant_tokenizer=" in (c.reason or "")



# Models outside the catalog compare their tokenizer files, as the stacks do when they load a draft model.
def _tokenizer(vocab: dict[str, int], eos: str = "</s>") -> dict[str, bytes]:
    import json

    return {"tokenizer.json": json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": []}).encode(),
            "tokenizer_config.json": json.dumps({"bos_token": "<s>", "eos_token": eos}).encode()}


def _serve(fake_hub, repo: str, config_from: str, files: dict[str, bytes]) -> None:
    import hashlib

    from tests.catalog.hubfake import Repo

    config = fake_hub.repos[config_from].files["config.json"]
    fake_hub.repos[repo] = Repo({"config.json": config, **files}, hashlib.sha1(repo.encode()).hexdigest())


VOCAB = {"<s>": 0, "</s>": 1, "a": 2, "b": 3}


def test_hub_models_compare_their_token_maps_and_special_tokens(fake_hub) -> None:
    _serve(fake_hub, "acme/Target-8B", "Qwen/Qwen3-8B", _tokenizer(VOCAB))
    _serve(fake_hub, "acme/Draft-0.6B", "Qwen/Qwen3-0.6B", _tokenizer(VOCAB))
    _serve(fake_hub, "acme/Other-0.6B", "Qwen/Qwen3-0.6B", _tokenizer({**VOCAB, "a": 3, "b": 2}))
    _serve(fake_hub, "acme/Chat-0.6B", "Qwen/Qwen3-0.6B", _tokenizer(VOCAB, eos="<|im_end|>"))
    target = get_model("acme/Target-8B")
    assert compatible(target, get_model("acme/Draft-0.6B"), VLLM).ok
    # Same vocabulary size, ids swapped: sizes alone would have passed it.
    swapped = compatible(target, get_model("acme/Other-0.6B"), VLLM)
    assert not swapped.ok and "token->id maps differ (tokenizer.json of acme/Target-8B" in swapped.reason
    chat = compatible(target, get_model("acme/Chat-0.6B"), VLLM)
    assert not chat.ok and chat.reason.startswith("special tokens differ (eos_token)")
    # The planner refuses the mismatched one with the same reason (on a vLLM before its token-level intersection).
    from specplug.errors import SpecplugError
    from specplug.planning import recommend

    assert recommend(model="acme/Target-8B", gpu="h100", method="draft_model", drafter="acme/Draft-0.6B").speculation
    with pytest.raises(SpecplugError, match="token->id maps differ"):
        recommend(model="acme/Target-8B", gpu="h100", method="draft_model", drafter="acme/Other-0.6B",
                  stack="vllm", stack_version="0.27.1")


def test_a_hub_model_without_tokenizer_files_keeps_the_old_caveat(fake_hub) -> None:
    c = compatible(get_model("Qwen/Qwen3.5-9B"), get_model("meta-llama/Llama-3.2-1B-Instruct@main"), VLLM)
    assert c.ok and "unknown" in (c.reason or "")


def test_a_catalog_model_never_waits_on_the_network_for_its_tokenizer(fake_hub, tmp_path) -> None:
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_bytes(fake_hub.repos["Qwen/Qwen3-0.6B"].files["config.json"])
    for name, body in _tokenizer(VOCAB).items():
        (folder / name).write_bytes(body)
    before = len(fake_hub.requests)
    c = compatible(get_model("qwen3-8b"), get_model(str(folder)), VLLM)
    assert len(fake_hub.requests) == before  # the catalog row's files are looked for in the cache only
    assert c.reason  # and, not found there, judged by what the folder and the row state
