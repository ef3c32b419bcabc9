import dataclasses

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

