"""Options and helpers shared by commands: the -c/--config option, reading the config file, and the plan flags
(one definition for recommend, render and launch: the fields of specplug.request.PlanRequest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from specplug.configfile import read_config

__all__ = ["config_option", "plan_flags", "read_config"]

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="specplug.yaml to read (default: ./specplug.yaml when present). Flags override the file.",
)


KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


def _plan_flag_options() -> list[Callable[[Any], Any]]:
    from specplug.config import WORKLOADS
    from specplug.methods import METHODS

    return [
        click.option("--model", "-m", default=None, help="Model alias, Hugging Face id or local folder (default: the config's)."),
        click.option("--gpu", default=None, help="GPU catalog name, or a spec memory_gib=..,bandwidth_gbs=..,bf16_tflops=.. "
                     "(default: probed, else the config's, else H100-SXM)."),
        click.option("--num-gpus", type=click.IntRange(1, 1024), default=None,
                     help="GPUs (default: the smallest count that fits)."),
        click.option("--batch-size", type=click.IntRange(1, 4096), default=None, help="Decode batch size (same as --concurrency)."),
        click.option("--concurrency", type=click.IntRange(1, 4096), default=None, help="Expected concurrent requests."),
        click.option("--input-len", type=click.IntRange(1), default=None, help="Prompt tokens per request [1024]."),
        click.option("--output-len", type=click.IntRange(1), default=None, help="Output tokens per request [256]."),
        click.option("--request-rate", type=click.FloatRange(0, 1e6, min_open=True), default=None,
                     help="Requests per second (Poisson): predict TPOT, TTFT and throughput at this load, both arms."),
        click.option("--slo-tpot-ms", type=click.FloatRange(0, min_open=True), default=None,
                     help="p90 time-per-output-token target: the highest rate each arm sustains within it."),
        click.option("--slo-ttft-ms", type=click.FloatRange(0, min_open=True), default=None,
                     help="p90 time-to-first-token target: the highest rate each arm sustains within it."),
        click.option("--workload", type=click.Choice(WORKLOADS), default=None, help="Traffic type [chat]."),
        click.option("--temperature", type=click.FloatRange(0, 5), default=None, help="Sampling temperature [0]."),
        click.option("--stack-version", default=None, help="Plan for this stack version (default: pinned, else installed)."),
        click.option("--method", type=click.Choice(METHODS), default=None, help="Technique (default: the policy picks)."),
        click.option("--drafter", default=None, help="Draft model or head: HF id, catalog alias or folder."),
        click.option("-k", "--num-speculative-tokens", "num_speculative_tokens", type=click.IntRange(0, 64), default=None,
                     help="Draft length."),
        click.option("--quantization", default=None,
                     help="Weight format to serve (fp8, int4-awq, mxfp4, nvfp4, q4_k_m ...) [the checkpoint's]."),
        click.option("--kv-cache-dtype", type=click.Choice(KV_CACHE_DTYPES), default=None, help="KV-cache dtype [auto]."),
        click.option("--max-model-len", type=click.IntRange(16), default=None,
                     help="Longest request (prompt + output) the server takes [the longest that fits]."),
        click.option("--host", default=None, help="Bind address (default 127.0.0.1: this machine only)."),
        click.option("--port", type=click.IntRange(1, 65535), default=None),
        click.option("--extra-arg", "extra_args", multiple=True,
                     help="Extra engine argument, passed verbatim as one argv element (repeatable)."),
        click.option("--structured-output", is_flag=True, default=None,
                     help="Requests use structured output (JSON schema, grammars): avoid methods known broken with it."),
        click.option("--reasoning-parser", default=None, help="The stack's reasoning parser for a thinking model."),
        click.option("--lora", multiple=True, metavar="NAME=PATH", help="A LoRA adapter served with the model (repeatable)."),
        click.option("--multimodal", is_flag=True, default=None, help="Requests carry images, audio or video."),
        config_option,
    ]


def plan_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    """The plan flags every planning command takes (same names as the Python API's keywords)."""
    for opt in reversed(_plan_flag_options()):
        f = opt(f)
    return f
