"""specplug recommend: decide whether, how and when to speculate for a model, hardware and traffic."""

from __future__ import annotations

import sys

import click

from specplug.commands._common import config_option
from specplug.commands.choices import StackChoice
from specplug.config import WORKLOADS
from specplug.output import emit, output_option


@click.command()
@click.option("--model", "-m", default=None, help="Model alias, Hugging Face id or local folder (default: the config's).")
@click.option("--gpu", default=None, help="GPU catalog name (default: probed, else H100-SXM).")
@click.option("--num-gpus", type=click.IntRange(1, 1024), default=None, help="GPUs (default: the smallest count that fits).")
@click.option("--batch-size", type=click.IntRange(1, 4096), default=None, help="Decode batch size (same as --concurrency).")
@click.option("--concurrency", type=click.IntRange(1, 4096), default=None, help="Expected concurrent requests.")
@click.option("--input-len", type=click.IntRange(1), default=None, help="Prompt tokens per request [1024].")
@click.option("--output-len", type=click.IntRange(1), default=None, help="Output tokens per request [256].")
@click.option("--workload", type=click.Choice(WORKLOADS), default=None, help="Traffic type [chat].")
@click.option("--temperature", type=click.FloatRange(0, 5), default=None, help="Sampling temperature [0].")
@click.option("--stack", "-s", type=StackChoice(), default=None, help="Serving stack (default: best installed, else vllm).")
@click.option("--stack-version", default=None, help="Plan for this stack version.")
@click.option("--drafter", default=None, help="Use this draft model or head (HF id, catalog alias or folder).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None, help="Policy overrides (YAML).")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, help="Calibration file from 'specplug calibrate'.")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="JSONL log of requests and completions: measured shape and acceptance replace the workload's prior.")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
@click.option("--quantization", default=None, help="Weight format to serve (fp8, int4-awq, mxfp4, nvfp4, q4_k_m ...) [the checkpoint's].")
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]), default=None,
              help="KV-cache dtype [auto].")
@config_option
@output_option
def recommend(model, gpu, num_gpus, batch_size, concurrency, input_len, output_len, workload, temperature, stack, stack_version, drafter, policy_path, calibration, traffic, traffic_map, quantization, kv_cache_dtype, config_path, output) -> None:
    """Recommend a speculative-decoding setup: technique, drafter, k, schedule, memory and predicted speedup.

    A deployment that cannot fit in memory exits 1 with the fixes and what each would give.
    """
    from specplug.commands._common import read_config
    from specplug.planning import recommend as run
    from specplug.traffic.records import using_field_map

    cfg, _ = read_config(config_path)
    with using_field_map(traffic_map, progress=sys.stderr.isatty()):
        plan = _run(run, model, gpu, num_gpus, batch_size, concurrency, input_len, output_len, workload, temperature,
                    stack, stack_version, drafter, cfg, policy_path, calibration, traffic, quantization, kv_cache_dtype)
    from specplug.policy.render import plan_tables

    emit(plan, output, plan_tables)


def _run(run, model, gpu, num_gpus, batch_size, concurrency, input_len, output_len, workload, temperature, stack,
         stack_version, drafter, cfg, policy_path, calibration, traffic, quantization=None, kv_cache_dtype=None):
    # --traffic given nowhere (None): the config's workload.traffic, if any, is the planner's to read.
    return run(
        model,
        gpu=gpu,
        num_gpus=num_gpus,
        batch_size=batch_size,
        concurrency=concurrency,
        input_len=input_len,
        output_len=output_len,
        workload=workload,
        temperature=temperature,
        stack=stack,
        stack_version=stack_version,
        drafter=drafter,
        config=cfg,
        policy=policy_path,
        calibration=calibration,
        traffic=traffic,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
    )
