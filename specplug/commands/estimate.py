"""specplug estimate: predicted speedup and acceptance of one fixed speculative configuration."""

from __future__ import annotations

import click

from specplug.commands._output import output_option
from specplug.commands.choices import StackChoice
from specplug.commands.loadplot import plot_option
from specplug.config import WORKLOADS
from specplug.methods import SPECULATING
from specplug.output import emit


@click.command()
@click.option("--model", "-m", required=True, help="Target: catalog alias or HF id (e.g. lmsys/vicuna-13b-v1.3).")
@click.option("--method", required=True, type=click.Choice(SPECULATING), help="Technique.")
@click.option("--drafter", default=None, help="Draft model or head (catalog alias or HF id; others get a size guess).")
@click.option("--num-speculative-tokens", "-k", type=click.IntRange(1, 64), default=None, help="Draft length k / tree depth (default: best).")
@click.option("--tree-topk", type=click.IntRange(1, 64), default=None, help="Tree branching (SGLang/TRT-LLM/research code).")
@click.option("--num-draft-tokens", type=click.IntRange(2, 1024), default=None, help="Tree tokens verified per step.")
@click.option("--gpu", required=True, help="GPU catalog name.")
@click.option("--num-gpus", type=click.IntRange(1, 1024), default=None,
              help="GPUs (default: the smallest count that holds the model and the batch, as recommend chooses).")
@click.option("--batch-size", type=click.IntRange(1, 4096), default=None,
              help="Decode batch size [1; with --request-rate, the batch that rate keeps running].")
@click.option("--workload", type=click.Choice(WORKLOADS), default="chat", show_default=True)
@click.option("--temperature", type=click.FloatRange(0, 5), default=0.0, show_default=True)
@click.option("--stack", type=StackChoice(extra=("hf",)), default="vllm", show_default=True, help="hf = eager research code.")
@click.option("--stack-version", default=None, help="Estimate for this stack version [the installed one, else a recent release].")
@click.option("--input-len", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True)
@click.option("--request-rate", type=click.FloatRange(0, 1e6, min_open=True), default=None,
              help="Requests per second (Poisson): predict TPOT, TTFT and throughput at this load, both arms.")
@click.option("--slo-tpot-ms", type=click.FloatRange(0, min_open=True), default=None,
              help="p90 time-per-output-token target: the highest rate each arm sustains within it.")
@click.option("--slo-ttft-ms", type=click.FloatRange(0, min_open=True), default=None,
              help="p90 time-to-first-token target: the highest rate each arm sustains within it.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, help="Calibration file.")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None, help="Policy overrides (YAML).")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="JSONL log of requests and completions: measured shape and acceptance replace the workload's prior.")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
@click.option("--quantization", default=None, help="Weight format to serve (fp8, int4-awq, mxfp4, nvfp4, q4_k_m ...) [the checkpoint's].")
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]), default="auto",
              show_default=True)
@plot_option
@output_option
def estimate(model, method, drafter, num_speculative_tokens, tree_topk, num_draft_tokens, gpu, num_gpus, batch_size, workload, temperature, stack, stack_version, input_len, output_len, request_rate, slo_tpot_ms, slo_ttft_ms, calibration, policy_path, traffic, traffic_map, quantization, kv_cache_dtype, plot_path, output) -> None:
    """Estimate speedup and acceptance length for one configuration."""
    from specplug.commands._progress import traffic_bar
    from specplug.planning import estimate as run
    from specplug.traffic.records import using_field_map

    extra = {"traffic": traffic} if traffic else {}
    with using_field_map(traffic_map, progress=traffic_bar()):
        est = run(
            model,
            method,
            drafter=drafter,
            num_speculative_tokens=num_speculative_tokens,
            tree_topk=tree_topk,
            num_draft_tokens=num_draft_tokens,
            gpu=gpu,
            num_gpus=num_gpus,
            batch_size=batch_size,
            workload=workload,
            temperature=temperature,
            stack=stack,
            stack_version=stack_version,
            input_len=input_len,
            output_len=output_len,
            request_rate=request_rate,
            slo_tpot_ms=slo_tpot_ms,
            slo_ttft_ms=slo_ttft_ms,
            calibration=calibration,
            policy=policy_path,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            **extra,
        )

    if plot_path:
        from specplug.commands.loadplot import write_load_plot

        write_load_plot(est.load, plot_path)

    def render(e):
        from specplug.commands._plan_tables import load_tables
        from specplug.output import table

        rows = [
            ("speedup", f"{e.speedup:.2f}x"),
            ("acceptance length", f"{e.acceptance_length:.2f} tokens/step"),
            ("acceptance rate (1st position)", f"{e.acceptance_rate:.2f}" + (" (calibrated)" if e.calibrated else "")),
            ("k", e.num_speculative_tokens),
            ("tree", f"steps {e.tree.steps}, topk {e.tree.topk}, {e.tree.num_draft_tokens} tokens" if e.tree else ""),
            ("drafter", e.drafter or ""),
            ("step without speculation", f"{e.baseline_step_ms:.2f} ms"),
            ("step with: verify + draft + overhead", f"{e.target_step_ms:.2f} + {e.draft_step_ms:.2f} + {e.overhead_ms:.2f} = {e.spec_step_ms:.2f} ms"),
            ("capacity", f"{e.capacity_requests} requests at once ({e.capacity_requests_without_drafter} without the drafter)"),
        ]
        title = f"{e.method} on {e.model}, {e.num_gpus} x {e.gpu}, {e.stack}, batch {e.batch_size}, {e.workload}, T={e.temperature:g}"
        out = [table(title, ["", ""], rows)]
        if e.load is not None:
            out += load_tables(e.load)
        out += [f"[yellow]warning:[/yellow] {w}" for w in e.warnings]
        return out

    emit(est, output, render)
