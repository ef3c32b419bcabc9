"""Fixtures for adapter tests: explicit Plans (no policy engine involved) and golden-file comparison."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def make_plan(
    stack: str = "vllm",
    version: str | None = None,
    *,
    model: str = "meta-llama/Llama-3.1-70B-Instruct",
    method: str = "ngram",
    drafter: str | None = None,
    k: int = 4,
    tp: int = 1,
    pp: int = 1,
    gpu: str = "H100-SXM",
    num_gpus: int = 1,
    weight_format: str = "bf16",
    **speculation,
):
    """A Plan as the policy engine would hand it over, with every choice explicit."""
    from specplug.config import ServeOptions, WorkloadSpec
    from specplug.plan import ModelRef, Parallelism, Plan, Speculation, StackRef
    from specplug.probe import Hardware

    serve = dict(speculation.pop("serve", {}))
    # serve: in specplug.yaml asks for a split; the Plan keeps it in parallelism.
    tp = serve.pop("tensor_parallel_size", None) or tp
    pp = serve.pop("pipeline_parallel_size", None) or pp
    return Plan(
        model=ModelRef(name=model, hf_id=model, weight_format=weight_format),
        hardware=Hardware(gpu=gpu, num_gpus=num_gpus, memory_gb=80.0, source="named"),
        stack=StackRef(name=stack, version=version, version_source="flag" if version else "unknown"),
        workload=WorkloadSpec(),
        parallelism=Parallelism(tensor_parallel_size=tp, pipeline_parallel_size=pp),
        speculation=Speculation(method=method, drafter=drafter, num_speculative_tokens=k if method != "none" else 0,
                                **speculation),
        serve=ServeOptions(**serve),
    )


@pytest.fixture
def plan_factory():
    return make_plan


@pytest.fixture
def golden():
    """Compare text with tests/adapters/golden/NAME; SPECPLUG_UPDATE_GOLDEN=1 rewrites the file instead."""

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("SPECPLUG_UPDATE_GOLDEN") == "1" or not path.exists():
            if os.environ.get("SPECPLUG_UPDATE_GOLDEN") != "1":
                pytest.fail(f"golden file {path} is missing; run with SPECPLUG_UPDATE_GOLDEN=1 to create it")
            path.write_text(text, encoding="utf-8")
            return
        assert text == path.read_text(encoding="utf-8"), f"render differs from {path} (SPECPLUG_UPDATE_GOLDEN=1 to accept)"

    return check
