from specplug.catalog import get_model
from specplug.policy.tokenizers import compatible


def test_same_family_same_vocab_is_compatible() -> None:
    assert compatible(get_model("llama-3.1-70b"), get_model("llama-3.2-1b"), "vllm").ok


def test_different_family_is_not() -> None:
    c = compatible(get_model("llama-3.1-70b"), get_model("qwen2.5-0.5b"), "vllm")
    assert not c.ok and "vLLM" in (c.reason or "")


def test_padding_only_difference_depends_on_stack() -> None:
    target, draft = get_model("qwen2.5-72b"), get_model("qwen2.5-0.5b")  # 152064 vs 151936
    assert not compatible(target, draft, "vllm").ok
    assert compatible(target, draft, "llamacpp").ok
