"""specplug tune: measure the recommended techniques against a control at your load and commit the result."""

from __future__ import annotations

import sys

import click

from specplug.commands._common import config_option
from specplug.output import FORMATS


@click.command()
@config_option
@click.option("--concurrency", default="1,4,16,64", show_default=True, help="Comma-separated concurrent streams.")
@click.option("--request-rate", "request_rates", default=None, metavar="R[,R...]",
              help="Also load each trial open-loop: Poisson arrivals at these requests/s (default: the config's "
                   "workload.request_rate, if it states one). Records the measured crossover rate.")
@click.option("--slo-tpot-ms", type=click.FloatRange(0, min_open=True), default=None,
              help="Time-per-output-token target: decide by goodput (tokens/s of the requests within the targets).")
@click.option("--slo-ttft-ms", type=click.FloatRange(0, min_open=True), default=None,
              help="Time-to-first-token target: decide by goodput.")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="Replay the prompts of this JSONL log of requests (default: workload.traffic in the config).")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
@click.option("--workload", default=None, help="Built-in prompt set to replay when there is no traffic file.")
@click.option("--budget", default=None, metavar="DURATION",
              help="Trim the trial plan to about this long (30m, 1h, 90s): fewest launches first.")
@click.option("--candidates", type=click.IntRange(1, 16), default=3, show_default=True,
              help="The recommended technique and this many minus one runners-up.")
@click.option("--method", "methods", default=None, metavar="M[,M...]",
              help="Only these methods (adds ones the recommendation could not score, e.g. draft_model with --drafter).")
@click.option("--drafter", default=None, help="Draft model for draft-model candidates (HF id or local folder).")
@click.option("-k", "--k", "ks", default=None, metavar="K[,K...]",
              help="k values to try, e.g. 1-5 (default: 1 and around the predicted best).")
@click.option("--repeats", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Runs of each level per trial, interleaved, for the run-to-run spread.")
@click.option("--margin", type=click.FloatRange(0, 10), default=0.05, show_default=True,
              help="Required gain over the control beyond the spread (0.05 = 5%).")
@click.option("--num-prompts", type=click.IntRange(1, 100000), default=None,
              help="Requests per level (default: the prompt set, at least 4 per stream).")
@click.option("--max-tokens", type=click.IntRange(1, 131072), default=128, show_default=True)
@click.option("--level-seconds", type=click.FloatRange(1), default=None,
              help="Stop sending new requests after this many seconds per level.")
@click.option("--check-prompts", type=click.IntRange(0, 64), default=4, show_default=True,
              help="Greedy outputs compared with the control's per trial.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=900, show_default=True,
              help="Seconds each launch may take to become healthy.")
@click.option("-o", "--out-dir", type=click.Path(file_okay=False), default="tune", show_default=True,
              help="Folder for tune.json, tune.csv, tune.png, the state file and the servers' logs.")
@click.option("--restart", is_flag=True, help="Discard what -o DIR holds and measure from scratch.")
@click.option("--plan-only", is_flag=True, help="Print the trial plan and stop; start nothing.")
@click.option("--no-write", is_flag=True,
              help="Measure and write the evidence, but leave specplug.yaml, the calibration and the lock alone.")
@click.option("--output", type=click.Choice(FORMATS), default="table", show_default=True, help="How to print.")
def tune(config_path, concurrency, request_rates, slo_tpot_ms, slo_ttft_ms, traffic, traffic_map, workload, budget,
         candidates, methods, drafter, ks, repeats, margin, num_prompts, max_tokens, level_seconds, check_prompts,
         timeout_s, out_dir, restart, plan_only, no_write, output) -> None:
    """Launch a K=0 control and each candidate technique over its k values, load them at each concurrency (and
    request rate), and keep speculation only where it beats the control by the margin beyond the run-to-run spread.

    The decision serves the load specplug.yaml states (workload.concurrency, or a request rate): on a stack that
    switches k per batch size, speculation is on at the measured levels where it won; on one that runs one k at
    every batch size, the k that won at the stated load is kept, whatever it measured below it.

    Writes the pinned speculation (with its per-batch schedule), or 'method: none' and why, to specplug.yaml,
    merges the measured acceptance into the calibration file, re-plans the lock, and leaves tune.json, tune.csv
    and tune.png in -o DIR. If the control or every candidate fails, nothing is decided or written and it exits 1.
    Ctrl-C stops cleanly; rerunning the same command resumes.
    """
    from pathlib import Path

    from specplug.commands._progress import TrialBar
    from specplug.commands._tune_tables import trial_plan_table, tune_table
    from specplug.commands.bench import parse_concurrency
    from specplug.config import METHODS, find_config, load_config
    from specplug.errors import SpecplugError
    from specplug.lock import resolve_traffic
    from specplug.output import console, emit
    from specplug.traffic import file_digest
    from specplug.tune import session
    from specplug.tune.lockref import measured_inputs, measured_spec
    from specplug.tune.prompts import for_tune
    from specplug.tune.settings import TuneSettings, parse_budget, parse_ints, parse_rates

    path = find_config(config_path)
    if path is None:
        raise SpecplugError("No specplug.yaml here.", "Pass -c FILE, or write one with 'specplug init --model M'.")
    cfg = load_config(path)
    if cfg.model is None:
        raise SpecplugError(f"{path} names no model.", "Set model: in it (alias, HF id or local folder).")
    method_list = [m.strip() for m in (methods or "").split(",") if m.strip()]
    for m in method_list:
        if m not in METHODS or m == "none":
            raise SpecplugError(f"--method: unknown method '{m}'.",
                                f"Choose from: {', '.join(x for x in METHODS if x != 'none')}.")
    traffic_file = traffic or cfg.workload.traffic
    tpath = resolve_traffic(traffic_file, path) if traffic_file else None
    if traffic and workload:
        raise SpecplugError("Give --traffic or --workload, not both.")
    # A load stated as a rate is measured (open loop) even when --request-rate does not name it.
    stated_rate = cfg.workload.request_rate
    rates = parse_rates(request_rates) if request_rates is not None else ([float(stated_rate)] if stated_rate else [])
    settings = TuneSettings(
        # The stated load is always measured: the decision serves it.
        concurrency=sorted({*parse_concurrency(concurrency), cfg.workload.concurrency}), request_rates=rates,
        slo_tpot_ms=slo_tpot_ms if slo_tpot_ms is not None else cfg.workload.slo_tpot_ms,
        slo_ttft_ms=slo_ttft_ms if slo_ttft_ms is not None else cfg.workload.slo_ttft_ms,
        load_concurrency=cfg.workload.concurrency, load_request_rate=stated_rate, repeats=repeats, max_tokens=max_tokens,
        num_prompts=num_prompts, level_seconds=level_seconds, workload=None if tpath else workload,
        traffic=str(tpath) if tpath else None, traffic_digest=file_digest(tpath) if tpath else None,
        temperature=cfg.workload.temperature, margin=margin, candidates=candidates, methods=method_list,
        drafter=drafter, ks=parse_ints(ks, "-k", 1, 64), check_prompts=check_prompts, budget_s=parse_budget(budget),
        launch_timeout_s=timeout_s, config_digest=_digest(measured_spec(cfg)),
    )
    prompts, label = for_tune(settings.traffic, workload, cfg.workload.type, traffic_map)
    out = Path(out_dir)
    p = session.prepare(cfg, path, settings, prompts, out, restart)
    con = console(stderr=output != "table")
    for r in trial_plan_table(p.plan, settings, p.done):
        con.print(r)
    if plan_only:
        return
    with TrialBar(p.plan, settings, p.requests_at, p.done) as bar:
        ok = session.run_trials(cfg, path, p.plan, settings, prompts, p.state, out, p.requests_at, reporter=bar)
    rep = session.finish(cfg, path, p.rec, p.plan, settings, p.state, out, label, measured_inputs(cfg, path), ok,
                         write_config=not no_write)
    emit(rep, output, tune_table)
    if not ok:
        sys.stdout.flush()
        raise click.exceptions.Exit(130)  # Ctrl-C: the state file keeps the progress
    if not rep.decision.decided:
        sys.stdout.flush()
        raise session.undecided_error(rep)


def _digest(data) -> str:
    import hashlib
    import json

    return "sha256:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
