"""PARD drafters cost one forward of k tokens where the stack drafts in parallel, k forwards elsewhere."""

from __future__ import annotations

import pytest

import specplug
from specplug import stackcaps
from specplug.planning import estimate

PARD = "amd/PARD-Qwen3-0.6B"
H100 = {"gpu": "h100", "num_gpus": 1}


def test_capability_follows_the_stack_version() -> None:
    assert "pard" in stackcaps.resolve("vllm", flag="0.32.0").parallel_drafting
    assert "pard" not in stackcaps.resolve("vllm", flag="0.31.0").parallel_drafting
    assert "pard" in stackcaps.resolve("trtllm", flag="1.3.0rc7").parallel_drafting
    assert "pard" not in stackcaps.resolve("trtllm", flag="1.2.0").parallel_drafting
    assert not stackcaps.resolve("sglang", flag="0.5.23").parallel_drafting


@pytest.mark.parametrize(("stack", "without", "with_"), [("vllm", "0.31.0", "0.32.0"), ("trtllm", "1.2.0", "1.3.0rc7")])
def test_pard_is_predicted_faster_where_the_stack_drafts_in_parallel(stack: str, without: str, with_: str) -> None:
    kw = {"drafter": PARD, "batch_size": 1, "stack": stack, "num_speculative_tokens": 6, "gpu": "h100"}
    slow = estimate("qwen3-8b", "draft_model", stack_version=without, **kw)
    fast = estimate("qwen3-8b", "draft_model", stack_version=with_, **kw)
    # Same drafter, same acceptance: only the draft cost changes (6 forwards -> 1 forward of 6 tokens).
    assert fast.acceptance_length == pytest.approx(slow.acceptance_length)
    assert fast.speedup > slow.speedup * 1.15


def test_an_ordinary_draft_model_is_costed_the_same_on_both_versions() -> None:
    kw = {"drafter": "qwen3-0.6b", "batch_size": 1, "stack": "vllm", "num_speculative_tokens": 4, "gpu": "h100"}
    a = estimate("qwen3-8b", "draft_model", stack_version="0.31.0", **kw)
    b = estimate("qwen3-8b", "draft_model", stack_version="0.32.0", **kw)
    assert a.speedup == pytest.approx(b.speedup)


def test_parallel_drafting_lets_recommend_draft_longer_and_agrees_with_estimate() -> None:
    old = specplug.recommend("qwen3-8b", batch_size=1, stack="vllm", stack_version="0.31.0", drafter=PARD, **H100)
    new = specplug.recommend("qwen3-8b", batch_size=1, stack="vllm", stack_version="0.32.0", drafter=PARD, **H100)
    assert new.speculation.method == old.speculation.method == "draft_model"
    # One forward drafts any k: longer drafts pay, and the plan predicts more.
    assert new.speculation.num_speculative_tokens > old.speculation.num_speculative_tokens
    assert new.prediction.speedup > old.prediction.speedup
    for p, v in ((old, "0.31.0"), (new, "0.32.0")):
        e = estimate("qwen3-8b", "draft_model", drafter=PARD, batch_size=1, stack="vllm", stack_version=v, gpu="h100",
                     num_speculative_tokens=p.speculation.num_speculative_tokens)
        assert e.speedup == pytest.approx(p.prediction.speedup, abs=0.01)
