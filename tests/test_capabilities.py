"""What a stack can do reaches the policy as data: here, the cost profile an adapter declares."""

from __future__ import annotations

import dataclasses

import pytest

from specplug import capabilities, stackcaps, validate
from specplug.config import Config
from specplug.policy.data import load_policy
from specplug.policy.planner import plan
from specplug.probe import resolve_hardware
from specplug.stacks import registry
from specplug.stacks.protocol import DEFAULT_COST_PROFILE


@pytest.fixture
def fork_registered(monkeypatch):
    # A plugin that renders as vLLM does, registered under its own name.
    is_stack, get_adapter = registry.is_stack, registry.get_adapter
    monkeypatch.setattr(registry, "is_stack", lambda n: n == "vllmfork" or is_stack(n))
    fork = lambda n: get_adapter("vllm" if n == "vllmfork" else n)  # noqa: E731
    monkeypatch.setattr(registry, "get_adapter", fork)
    monkeypatch.setattr(validate, "get_adapter", fork)  # imported by name there


def _plan(caps):
    cfg = Config.model_validate({"model": "llama-3.1-8b", "hardware": {"gpu": "h100", "num_gpus": 1},
                                 "workload": {"concurrency": 4}})
    return plan(cfg, resolve_hardware("h100", 1), caps, load_policy())


def test_a_stack_is_costed_with_the_profile_its_adapter_declares(fork_registered):
    vllm = stackcaps.resolve("vllm", "0.32.0")
    assert vllm.cost_profile == "vllm" and vllm.costed_as({"vllm": None}) == "vllm"
    fork = dataclasses.replace(vllm, name="vllmfork", cost_profile="vllm")
    own, forked = _plan(vllm), _plan(fork)
    assert forked.prediction.speedup == own.prediction.speedup
    assert any("use vllm's, as its adapter declares" in w for w in forked.warnings)
    default = _plan(dataclasses.replace(fork, cost_profile=DEFAULT_COST_PROFILE))
    assert any("default CUDA-graph engine" in w for w in default.warnings)


def test_a_policy_row_under_the_stacks_own_name_wins_over_the_declared_profile():
    caps = dataclasses.replace(stackcaps.resolve("vllm"), name="vllmfork", cost_profile="sglang")
    assert caps.costed_as({"vllmfork": None, "sglang": None}) == "vllmfork"
    assert caps.costed_as({"sglang": None}) == "sglang"


def test_the_vocabulary_rules_an_adapter_declares_reach_the_policy():
    assert (stackcaps.resolve("vllm").vocab_slack, stackcaps.resolve("llamacpp").vocab_slack) == (0, 128)
    assert stackcaps.resolve("sglang").vocab_slack is None
    assert "llama-server" in stackcaps.resolve("llamacpp").vocab_mismatch
    assert "assistant_tokenizer=" in stackcaps.resolve(capabilities.RESEARCH_CODE).vocab_mismatch


def test_estimate_costs_research_code_as_planning_resolves_it_when_no_capabilities_are_passed():
    from specplug.planning import estimate as resolved
    from specplug.policy.estimator import estimate as bare

    kw = {"drafter": "amd/PARD-Qwen3-0.6B", "gpu": "h100", "batch_size": 1, "num_speculative_tokens": 6,
          "stack": capabilities.RESEARCH_CODE}
    # The PARD paper's code drafts all k tokens in one forward: both paths must cost it so.
    a, b = bare("qwen3-8b", "draft_model", **kw), resolved("qwen3-8b", "draft_model", **kw)
    chain = bare("qwen3-8b", "draft_model", caps=capabilities.StackCapabilities("hf", None, "unknown"), **kw)
    assert a.model_dump() == b.model_dump() and a.speedup > chain.speedup * 1.15


def test_estimate_costs_a_stack_with_the_profile_its_adapter_declares(fork_registered):
    from specplug.policy import estimator

    sglang = stackcaps.resolve("sglang", "0.5.23")
    kw = {"gpu": "h100", "batch_size": 8, "num_speculative_tokens": 3}
    own = estimator.estimate("llama-3.1-8b", "eagle3", stack="sglang", caps=sglang, **kw)
    # A stack with no policy row of its own, declaring SGLang's profile, then the named default.
    fork = dataclasses.replace(sglang, name="vllmfork", version=None)  # its own releases, not SGLang's
    forked = estimator.estimate("llama-3.1-8b", "eagle3", stack="vllmfork", caps=fork, **kw)
    default = estimator.estimate("llama-3.1-8b", "eagle3", stack="vllmfork",
                                 caps=dataclasses.replace(fork, cost_profile=DEFAULT_COST_PROFILE), **kw)
    assert forked.speedup == own.speedup != default.speedup


def test_how_each_stack_schedules_prefills_reaches_the_policy():
    declared = stackcaps.declared
    assert declared("vllm", "0.32.0").mixes_prefill
    assert not declared("vllm", "0.7.3").mixes_prefill  # the V0 engine ran prefills as steps of their own
    assert declared("trtllm", "1.0.0").mixes_prefill
    assert not declared("sglang", "0.5.23").mixes_prefill  # mixed chunks are opt-in
    assert declared("embedded").mixes_prefill  # a joining prompt rides in the decode pass, in chunks
    assert not declared("tgi", "3.0.0").mixes_prefill
