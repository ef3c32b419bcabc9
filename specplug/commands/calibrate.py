"""specplug calibrate: measured acceptance vs the policy's prediction, written as a calibration file."""

from __future__ import annotations

import click

from specplug.commands._output import output_option
from specplug.commands.bench import parse_concurrency
from specplug.commands.choices import StackChoice
from specplug.config import WORKLOADS


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("--from", "from_paths", type=click.Path(), multiple=True,
              help="A bench.json (or its folder), or a 'vllm bench serve --save-result' JSON / GuideLLM JSON report "
                   "(repeatable: one per concurrency).")
@click.option("--baseline-from", "baseline_from", type=click.Path(dir_okay=False), multiple=True,
              help="The same client's report against the baseline, for measured speedups (with --from REPORT).")
@click.option("--temperature", type=click.FloatRange(0, 5), default=None,
              help="Temperature the client's requests used, where its report does not say (default: the server's).")
@click.option("--endpoint", default=None,
              help="Run a short bench against this URL (speculation on) instead; with --from REPORT and the client's "
                   "command after '--', the server whose counters are scraped around the client's run.")
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
@click.option("--workload", type=click.Choice(WORKLOADS), default=None,
              help="Workload type (default: the bench's built-in workload).")
@click.option("--drafter", default=None, help="The drafter the endpoint uses (makes the entry specific to it).")
@click.option("--num-speculative-tokens", "-k", type=click.IntRange(1, 64), default=None,
              help="Draft length the endpoint uses (default: inferred from its counters).")
@click.option("--gpu", default=None, help="GPU catalog name for the prediction (default: probe).")
@click.option("--num-gpus", type=click.IntRange(1, 1024), default=1, show_default=True)
@click.option("--stack", type=StackChoice(), default=None,
              help="Stack that served it (default: the report's backend, else recognised from its metrics).")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False), default="calibration.yaml", show_default=True,
              help="Calibration file to write; an existing one is merged (same setup replaced).")
@click.option("--save-bench", type=click.Path(file_okay=False), default=None, help="Also keep the short bench here.")
@output_option
@click.argument("client", nargs=-1, type=click.UNPROCESSED)
def calibrate(from_paths, baseline_from, temperature, client, endpoint, baseline, served_model, concurrency, prompts_file, num_prompts, max_tokens,
              api_key_env, traffic, traffic_map, model, method, workload, drafter, num_speculative_tokens, gpu, num_gpus,
              stack, out_path, save_bench, output) -> None:
    """Compare measured acceptance and speedup with 'specplug estimate' and write a calibration file.

    Reads a bench record (--from DIR/bench.json), what vLLM's or GuideLLM's benchmark client wrote (--from
    FILE, with --endpoint URL -- CLIENT ARGS... to run the client with the server's counters scraped around it),
    or runs a short bench (--endpoint, --baseline), and/or replays n-gram and suffix decoding over a traffic log
    (--traffic FILE), then shows predicted (before), measured, and predicted with the new calibration (after),
    side by side. Every source merges into the one file.
    """
    from specplug.bench.calibrate import calibrate as run_calibrate
    from specplug.commands._bench_tables import calibrate_table
    from specplug.commands._progress import traffic_bar
    from specplug.errors import SpecplugError
    from specplug.output import emit

    if client and not from_paths:
        raise SpecplugError(f"Unexpected argument '{client[0]}'.",
                            "A client command after '--' goes with --from FILE (the report it writes).")
    if from_paths and endpoint and not client:
        raise SpecplugError("Give either --from FILE or --endpoint URL (to run a short bench), not both.",
                            "To scrape the server around a client's run, put the client's command after '--'.")
    if baseline_from and not from_paths:
        raise SpecplugError("--baseline-from goes with --from FILE.")
    from_path = bool(from_paths)
    if not (from_path or endpoint or traffic):
        raise SpecplugError("Nothing to calibrate from.",
                            "Give --from DIR/bench.json, --endpoint URL (to run a short bench) or --traffic FILE.jsonl.")
    reports = []
    if traffic:
        from specplug.traffic.calibrate import calibrate_traffic

        reports += calibrate_traffic(
            traffic, model=model, method=method if not (from_path or endpoint) else None, workload=workload,
            out=out_path, gpu=gpu, num_gpus=num_gpus, num_speculative_tokens=num_speculative_tokens,
            field_map=traffic_map, progress=traffic_bar(),
        )
        if not (from_path or endpoint):
            emit(reports, output, lambda rs: [x for r in rs for x in calibrate_table(r)])
            return
    if not method:
        raise SpecplugError("Which speculative method did the endpoint run? Pass --method (ngram, eagle3, ...).")
    if from_path:
        from specplug.bench.client import api_key_from_env
        from specplug.bench.foreign import record_from_files

        record = record_from_files(
            list(from_paths), list(baseline_from), client=list(client), endpoint=endpoint if client else None,
            api_key=api_key_from_env(api_key_env), stack=stack, temperature=temperature,
        )
        from specplug.bench.calibrate import pooled_acceptance
        from specplug.bench.foreign import backend_stack, detect, load_json

        docs = [load_json(p) for p in from_paths]
        foreign = any(detect(d) != "specplug" for d in docs)
        if record.stack is None and stack is None:
            stack = backend_stack(docs)
        if foreign and not client and pooled_acceptance(record) is None:
            raise SpecplugError(
                "The report has no speculative-decoding figures (GuideLLM never records them; vLLM's client only "
                "when draft tokens moved).",
                "Let specplug run the client and read the server's counters around it: "
                "--from FILE --endpoint URL -- CLIENT ARGS...",
            )
    else:
        from specplug.bench.prompts import builtin_workloads, load_prompt_set
        from specplug.commands._progress import measure_with_bar

        if not prompts_file and workload and workload not in builtin_workloads():
            raise SpecplugError(
                f"There are no built-in prompts for workload '{workload}'.",
                f"Pass --prompts FILE.jsonl with such traffic, or one of: {', '.join(builtin_workloads())}.",
            )
        bench_workload = None if prompts_file else (workload or "chat")
        record = measure_with_bar(
            endpoint=endpoint, baseline=baseline, levels=parse_concurrency(concurrency),
            prompts=load_prompt_set(bench_workload, prompts_file), workload=bench_workload, prompts_file=prompts_file,
            model=served_model, num_prompts=num_prompts, max_tokens=max_tokens, temperature=0.0, duration_s=None,
            api="auto", api_key_env=api_key_env, timeout_s=300.0, min_speedup=1.0, out_dir=save_bench,
        )
        if not record.complete:
            raise click.exceptions.Exit(130)
    rep = run_calibrate(
        record, model=model, method=method, workload=workload, out=out_path, gpu=gpu, stack=stack, drafter=drafter,
        num_speculative_tokens=num_speculative_tokens, num_gpus=num_gpus,
    )
    if reports:
        emit([*reports, rep], output, lambda rs: [x for r in rs for x in calibrate_table(r)])
    else:
        emit(rep, output, calibrate_table)
