"""One set of plan flags: recommend, render and launch take the same options, laid over the config by one rule."""

from __future__ import annotations

import json

import click
import pytest

from specplug.config import Config
from specplug.errors import SpecplugError
from specplug.request import PlanRequest


def _options(command: click.Command) -> set[str]:
    return {name for p in command.params for name in p.opts}


def test_recommend_render_and_launch_take_the_same_plan_flags():
    from specplug.commands.launch import launch
    from specplug.commands.recommend import recommend
    from specplug.commands.render import render

    flags = {f"--{name.replace('_', '-')}" for name in PlanRequest.model_fields if name not in ("stack", "traffic", "extra_args")}
    flags |= {"--extra-arg", "--batch-size"}
    for command in (recommend, render, launch):
        assert flags <= _options(command), (command.name, sorted(flags - _options(command)))


def test_flags_override_the_config_key_by_key():
    cfg = Config.model_validate({"model": "llama-3.1-8b", "stack": {"name": "vllm", "version": "0.32.0"},
                                 "workload": {"type": "code", "concurrency": 4},
                                 "serve": {"extra_args": ["--a"], "port": 9000}})
    got = PlanRequest.from_flags(batch_size=16, max_model_len=8192, extra_args=["--b"], quantization="fp8").apply(cfg)
    assert (got.workload.type, got.workload.concurrency) == ("code", 16)
    assert got.serve.extra_args == ["--a", "--b"] and got.serve.port == 9000 and got.serve.max_model_len == 8192
    assert got.stack.version == "0.32.0"
    # Another stack does not inherit a version pinned for this one.
    assert PlanRequest(stack="sglang").apply(cfg).stack.version is None


def test_a_drafter_alone_takes_its_catalog_method_and_k_alone_is_refused():
    got = PlanRequest(drafter="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B").apply(Config(model="llama-3.1-8b"))
    assert got.speculation.method == "eagle3"
    with pytest.raises(SpecplugError, match="-k needs a technique"):
        PlanRequest(num_speculative_tokens=3).apply(Config())


def test_a_bad_flag_is_named_by_the_key_it_sets():
    with pytest.raises(SpecplugError, match=r"Invalid options:\n  serve.port"):
        PlanRequest(port=0).apply(Config())


def test_render_takes_workload_batch_and_precision_flags(run_cli):
    res = run_cli("render", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100", "--stack-version", "0.32.0",
                  "--workload", "code", "--batch-size", "8", "--kv-cache-dtype", "fp8", "--max-model-len", "8192",
                  "--format", "json")
    assert res.exit_code == 0, res.stderr
    argv = json.loads(res.stdout)["argv"]
    assert argv[argv.index("--max-model-len") + 1] == "8192" and argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
