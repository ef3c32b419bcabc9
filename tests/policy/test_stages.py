"""The planner's stages: each returns a frozen result, none rewrites the configuration it was given."""

from __future__ import annotations

import dataclasses

import pytest

from specplug import stackcaps
from specplug.config import Config
from specplug.planning import resolve_hardware_for
from specplug.policy import planner, stages
from specplug.policy.data import load_policy


def test_every_stage_result_is_frozen():
    types = [t for t in vars(stages).values()
             if isinstance(t, type) and dataclasses.is_dataclass(t) and t.__module__ == stages.__name__]
    assert len(types) == len(planner.STAGES) + 2  # a result per stage, the request, the planning
    assert all(t.__dataclass_params__.frozen for t in types), [t for t in types if not t.__dataclass_params__.frozen]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stages.StackNotes(("w",)).warnings = ()  # type: ignore[misc]


def test_the_stages_fill_planning_in_order_and_a_stage_cannot_read_ahead():
    assert [name for name, _ in planner.STAGES] == [f.name for f in dataclasses.fields(stages.Planning)][1:]
    caps = stackcaps.declared("vllm", "0.32.0")
    cfg = Config(model="meta-llama/Llama-3.1-8B-Instruct")
    s = stages.Planning(stages.Request(cfg, resolve_hardware_for(cfg, caps), caps, load_policy(), None, None, (), False))
    with pytest.raises(RuntimeError, match="stage 'work' has not run"):
        _ = s.tokens


def test_planning_never_rewrites_the_configuration_it_is_given():
    # Both of the planner's serve changes at once: FP8 weights where no count holds the bf16 checkpoint, and a
    # max_model_len lowered to what vLLM can reserve at start.
    cfg = Config.model_validate({
        "model": "meta-llama/Llama-3.1-405B-Instruct",
        "hardware": {"gpu": "memory_gib=12,bandwidth_gbs=300,bf16_tflops=50"},
        "stack": {"name": "vllm", "version": "0.32.0"},
    })
    before = cfg.model_dump()
    caps = stackcaps.declared("vllm", "0.32.0")
    p = planner.plan(cfg, resolve_hardware_for(cfg, caps), caps, load_policy())
    assert p.serve.quantization == "fp8"
    assert p.serve.max_model_len is not None and p.serve.max_model_len < 131072
    assert any("planned with FP8 weights" in r for r in p.reasons)
    assert cfg.model_dump() == before
    assert cfg.serve.quantization is None and cfg.serve.max_model_len is None


def test_estimate_resolves_the_deployment_with_the_planners_stages():
    # The GPU count (FP8 weights where no count holds the checkpoint) and the split are recommend's, word for word.
    import specplug

    kw = dict(gpu="h100", stack="vllm", stack_version="0.32.0")
    p = specplug.recommend("meta-llama/Llama-3.1-405B-Instruct", **kw, concurrency=4)
    e = specplug.estimate("meta-llama/Llama-3.1-405B-Instruct", "ngram", batch_size=4, **kw)
    assert e.num_gpus == p.hardware.num_gpus
    count = next(r for r in p.reasons if "is the smallest count" in r)
    assert count in e.warnings
    tiny = "memory_gib=12,bandwidth_gbs=300,bf16_tflops=50"
    p = specplug.recommend("meta-llama/Llama-3.1-405B-Instruct", gpu=tiny, stack="vllm", stack_version="0.32.0")
    e = specplug.estimate("meta-llama/Llama-3.1-405B-Instruct", "ngram", gpu=tiny, stack="vllm", stack_version="0.32.0")
    assert p.serve.quantization == "fp8" and any("planned with FP8 weights" in w for w in e.warnings)
    assert e.num_gpus == p.hardware.num_gpus


@pytest.mark.parametrize(("kw", "key"), [({"temperature": 7}, "workload.temperature"),
                                         ({"batch_size": 5000}, "workload.concurrency"),
                                         ({"gpu": "h100\nrm -rf /"}, "hardware.gpu")])
def test_estimate_reports_a_bad_value_by_the_key_it_sets(kw, key):
    import specplug
    from specplug.errors import SpecplugError

    with pytest.raises(SpecplugError, match=f"Invalid options:\n  {key}"):
        specplug.estimate("llama-3.1-8b", "ngram", **{"gpu": "h100", **kw})
