"""specplug bench: throughput, latency and acceptance of a speculative endpoint against a baseline."""

from __future__ import annotations

import click

from specplug.output import FORMATS


def parse_concurrency(text: str) -> list[int]:
    """'1,4,16' -> [1, 4, 16]; duplicates dropped, order kept; anything else is a usage error."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= 4096:
            raise click.BadParameter(f"'{part}' is not a concurrency between 1 and 4096.", param_hint="--concurrency")
        if int(part) not in out:
            out.append(int(part))
    if not out:
        raise click.BadParameter("give at least one value, e.g. 1,4,16.", param_hint="--concurrency")
    return out


common_options = [
    click.option("--model", default=None, help="Model name to request (default: the first the server lists)."),
    click.option("--workload", default=None, help="Built-in prompt set: chat, code, code-edit, rag, summarization."),
    click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), default=None,
                 help='JSONL file of {"prompt": ...} or {"messages": [...]} lines.'),
    click.option("--num-prompts", type=click.IntRange(1, 100000), default=None,
                 help="Requests per run (default: the set, at least 4 per stream)."),
    click.option("--max-tokens", type=click.IntRange(1, 131072), default=256, show_default=True),
    click.option("--api", type=click.Choice(["auto", "chat", "completions"]), default="auto", show_default=True,
                 help="Route: chat for messages, completions for prompts (auto), or force one."),
    click.option("--api-key-env", default=None, metavar="VAR", help="Environment variable holding the API key."),
    click.option("--timeout", "timeout_s", type=click.FloatRange(1, 3600), default=300.0, show_default=True,
                 help="Seconds one request may take."),
]


def with_options(options):
    def deco(f):
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("--endpoint", default=None, help="Base URL of the server with speculation on, e.g. http://127.0.0.1:8000.")
@click.option("--baseline", default=None, help="Base URL of the same model without speculation.")
@click.option("--launch-baseline", is_flag=True,
              help="Start a baseline through the adapter with speculation off (from specplug.yaml / -c).")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="specplug.yaml describing the deployment (for --launch-baseline).")
@click.option("--stack", default=None, help="Stack to launch the baseline with (default: the config's).")
@click.option("--launch-model", default=None, help="Model to launch the baseline with (default: the config's).")
@click.option("--baseline-port", type=click.IntRange(1, 65535), default=None,
              help="Port of the launched baseline (default: the config's port + 1).")
@click.option("--concurrency", default="1,4,16,64", show_default=True, help="Comma-separated concurrent streams.")
@with_options(common_options)
@click.option("--temperature", type=click.FloatRange(0, 5), default=0.0, show_default=True)
@click.option("--duration", "duration_s", type=click.FloatRange(0.1), default=None,
              help="Stop sending new requests after this many seconds per run.")
@click.option("--min-speedup", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Speedup below which speculation counts as not paying.")
@click.option("-o", "--out-dir", type=click.Path(file_okay=False), default=None,
              help="Folder for bench.json, bench.csv and bench.png.")
@click.option("--output", type=click.Choice(FORMATS), default="table", show_default=True, help="How to print.")
@click.option("--load", "load_path", type=click.Path(), default=None, help="Re-print a saved bench.json (no requests).")
@click.option("--from", "from_paths", multiple=True, type=click.Path(dir_okay=False),
              help="Read a 'vllm bench serve --save-result' JSON or a GuideLLM JSON report (repeatable: one per "
                   "concurrency). With --endpoint and the client's command after '--', the client is run with the "
                   "server's counters scraped around it.")
@click.option("--baseline-from", "baseline_from", multiple=True, type=click.Path(dir_okay=False),
              help="The same client's report against the baseline (for speedups; repeatable).")
@click.argument("client", nargs=-1, type=click.UNPROCESSED)
def bench(endpoint, baseline, launch_baseline, config_path, stack, launch_model, baseline_port, concurrency, model, workload, prompts_file, num_prompts,
          max_tokens, api, api_key_env, timeout_s, temperature, duration_s, min_speedup, out_dir, output,
          load_path, from_paths, baseline_from, client) -> None:
    """Measure ENDPOINT (speculation on) against a baseline at each concurrency.

    Reports requests/s, output tokens/s, time to first token and time per output token (p50/p90/p99),
    speedup over the baseline and acceptance from the server's metrics, and the concurrency above which
    speculation stops paying. Ctrl-C stops early and keeps what finished.

    Or read what vLLM's or GuideLLM's benchmark client measured: --from FILE [--baseline-from FILE], optionally
    running the client itself: --from FILE --endpoint URL -- CLIENT ARGS...
    """
    from specplug.errors import SpecplugError

    if client and not from_paths:
        raise SpecplugError(f"Unexpected argument '{client[0]}'.",
                            "A client command after '--' goes with --from FILE (the report it writes).")
    if from_paths:
        from specplug.bench.client import api_key_from_env
        from specplug.bench.foreign import record_from_files

        if load_path or baseline or launch_baseline:
            raise SpecplugError("--from reads a report: it does not go with --load, --baseline or --launch-baseline.",
                                "Give the baseline's report with --baseline-from FILE.")
        record = record_from_files(
            list(from_paths), list(baseline_from), client=list(client), endpoint=endpoint,
            api_key=api_key_from_env(api_key_env), stack=stack, min_speedup=min_speedup,
            temperature=temperature if _given("temperature") else None,
        )
        if out_dir:
            from specplug.bench.report import write_outputs

            write_outputs(record, out_dir)
        _show(record, output)
        return
    if baseline_from:
        raise SpecplugError("--baseline-from goes with --from FILE.")
    if load_path:
        from specplug.bench.record import load_record

        record = load_record(load_path)
        if out_dir:
            from specplug.bench.report import write_outputs

            write_outputs(record, out_dir)
        _show(record, output)
        return
    if not endpoint:
        raise SpecplugError("Missing --endpoint URL (the server with speculation on).", "Or --load DIR/bench.json.")
    if baseline and launch_baseline:
        raise SpecplugError("Give --baseline URL or --launch-baseline, not both.")
    from specplug.bench.prompts import load_prompt_set

    levels = parse_concurrency(concurrency)
    prompts = load_prompt_set(workload, prompts_file)

    from specplug.bench.baseline import launched_baseline
    from specplug.commands._progress import measure_with_bar

    with launched_baseline(launch_baseline, config_path, stack, launch_model, baseline_port) as launched_url:
        record = measure_with_bar(
            endpoint=endpoint, baseline=baseline or launched_url, levels=levels, prompts=prompts,
            workload=None if prompts_file else (workload or "chat"), prompts_file=prompts_file, model=model,
            num_prompts=num_prompts, max_tokens=max_tokens, temperature=temperature, duration_s=duration_s, api=api,
            api_key_env=api_key_env, timeout_s=timeout_s, min_speedup=min_speedup, out_dir=out_dir,
        )
        _show(record, output)
    if not record.complete:
        raise click.exceptions.Exit(130)


def _given(param: str) -> bool:
    """Whether the user set ``param`` on the command line (not its default)."""
    ctx = click.get_current_context()
    return ctx.get_parameter_source(param) not in (None, click.core.ParameterSource.DEFAULT)


def _show(record, output: str) -> None:
    from specplug.commands._bench_tables import bench_table
    from specplug.output import emit

    emit(record, output, bench_table)
