"""specplug calibrate: measured acceptance vs the policy's prediction, written as a calibration file."""

from __future__ import annotations

import sys

import click

from specplug.commands.bench import load_prompt_set, parse_concurrency
from specplug.output import FORMATS


@click.command()
@click.option("--from", "from_path", type=click.Path(), default=None, help="A bench.json (or its folder) to read.")
@click.option("--endpoint", default=None, help="Run a short bench against this URL (speculation on) instead.")
@click.option("--baseline", default=None, help="The same model without speculation (for measured speedups).")
@click.option("--served-model", default=None, help="Model name to request (default: the first the server lists).")
@click.option("--concurrency", default="1", show_default=True, help="Concurrency levels of the short bench.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), default=None, help="JSONL prompts file.")
@click.option("--num-prompts", type=click.IntRange(1, 100000), default=8, show_default=True)
@click.option("--max-tokens", type=click.IntRange(1, 131072), default=128, show_default=True)
@click.option("--api-key-env", default=None, metavar="VAR", help="Environment variable holding the API key.")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="A JSONL log of requests and completions: replay n-gram and suffix decoding over it.")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
@click.option("--model", "-m", required=True, help="The target model (catalog alias, HF id or local folder).")
@click.option("--method", default=None,
              help="The speculative method the endpoint runs (ngram, eagle3, ...); with --traffic only: ngram or suffix "
                   "(default: both).")
@click.option("--workload", default=None, help="Workload type (default: the bench's built-in workload).")
@click.option("--drafter", default=None, help="The drafter the endpoint uses (makes the entry specific to it).")
@click.option("--num-speculative-tokens", "-k", type=click.IntRange(1, 64), default=None,
              help="Draft length the endpoint uses (default: inferred from its counters).")
@click.option("--gpu", default=None, help="GPU catalog name for the prediction (default: probe).")
@click.option("--num-gpus", type=click.IntRange(1, 1024), default=1, show_default=True)
@click.option("--stack", default=None, help="Stack that served it (default: recognised from its metrics).")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False), default="calibration.yaml", show_default=True,
              help="Calibration file to write; an existing one is merged (same setup replaced).")
@click.option("--save-bench", type=click.Path(file_okay=False), default=None, help="Also keep the short bench here.")
@click.option("--output", type=click.Choice(FORMATS), default="table", show_default=True)
def calibrate(from_path, endpoint, baseline, served_model, concurrency, prompts_file, num_prompts, max_tokens,
              api_key_env, traffic, traffic_map, model, method, workload, drafter, num_speculative_tokens, gpu, num_gpus,
              stack, out_path, save_bench, output) -> None:
    """Compare measured acceptance and speedup with 'specplug estimate' and write a calibration file.

    Reads a bench record (--from DIR/bench.json) or runs a short bench (--endpoint, --baseline), and/or replays
    n-gram and suffix decoding over a traffic log (--traffic FILE), then shows predicted (before), measured,
    and predicted with the new calibration (after), side by side. Every source merges into the one file.
    """
    from specplug.bench.calibrate import calibrate as run_calibrate
    from specplug.bench.calibrate import render
    from specplug.errors import SpecplugError
    from specplug.output import emit

    if from_path and endpoint:
        raise SpecplugError("Give either --from DIR/bench.json or --endpoint URL (to run a short bench), not both.")
    if not (from_path or endpoint or traffic):
        raise SpecplugError("Nothing to calibrate from.",
                            "Give --from DIR/bench.json, --endpoint URL (to run a short bench) or --traffic FILE.jsonl.")
    reports = []
    if traffic:
        from specplug.traffic.calibrate import calibrate_traffic

        reports += calibrate_traffic(
            traffic, model=model, method=method if not (from_path or endpoint) else None, workload=workload,
            out=out_path, gpu=gpu, num_gpus=num_gpus, num_speculative_tokens=num_speculative_tokens,
            field_map=traffic_map, progress=sys.stderr.isatty(),
        )
        if not (from_path or endpoint):
            emit(reports, output, lambda rs: [x for r in rs for x in render(r)])
            return
    if not method:
        raise SpecplugError("Which speculative method did the endpoint run? Pass --method (ngram, eagle3, ...).")
    if from_path:
        from specplug.bench.record import load_record

        record = load_record(from_path)
    else:
        from specplug.bench.prompts import builtin_workloads
        from specplug.commands.bench import run_and_report

        if not prompts_file and workload and workload not in builtin_workloads():
            raise SpecplugError(
                f"There are no built-in prompts for workload '{workload}'.",
                f"Pass --prompts FILE.jsonl with such traffic, or one of: {', '.join(builtin_workloads())}.",
            )
        bench_workload = None if prompts_file else (workload or "chat")
        record = run_and_report(
            endpoint=endpoint, baseline=baseline, levels=parse_concurrency(concurrency),
            prompts=load_prompt_set(bench_workload, prompts_file), workload=bench_workload, prompts_file=prompts_file,
            model=served_model, num_prompts=num_prompts, max_tokens=max_tokens, temperature=0.0, duration_s=None,
            api="auto", api_key_env=api_key_env, timeout_s=300.0, min_speedup=1.0, out_dir=save_bench,
            output=output, show=False,
        )
        if not record.complete:
            raise click.exceptions.Exit(130)
    rep = run_calibrate(
        record, model=model, method=method, workload=workload, out=out_path, gpu=gpu, stack=stack, drafter=drafter,
        num_speculative_tokens=num_speculative_tokens, num_gpus=num_gpus,
    )
    if reports:
        emit([*reports, rep], output, lambda rs: [x for r in rs for x in render(r)])
    else:
        emit(rep, output, render)
