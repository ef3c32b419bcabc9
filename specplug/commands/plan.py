"""specplug plan: resolve specplug.yaml into specplug.lock.yaml (the reviewed, reproducible decision)."""

from __future__ import annotations

import click

from specplug.commands._common import config_option


@click.command()
@config_option
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if the lock is missing or would change.")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="JSONL log of requests and completions to plan from (default: workload.traffic in the config).")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
def plan(config_path: str | None, check_only: bool, traffic: str | None, traffic_map: str | None) -> None:
    """Plan specplug.yaml and write specplug.lock.yaml beside it.

    The lock holds the resolved plan (technique, drafter, k, schedule, stack version, hardware), the inputs'
    hash and the predicted figures. The same inputs give a byte-identical lock. Commit both files; 'render',
    'launch' and 'deploy' then use the locked plan, and 'specplug check' fails when they drift apart.
    A traffic file (workload.traffic or --traffic) is recorded with its digest: changing it is drift too.
    """
    from specplug.commands._progress import traffic_bar
    from specplug.config import find_config
    from specplug.errors import SpecplugError
    from specplug.traffic.records import using_field_map

    path = find_config(config_path)
    if path is None:
        raise SpecplugError("No specplug.yaml here.", "Pass -c FILE, or write one with 'specplug init --model M'.")
    with using_field_map(traffic_map, progress=traffic_bar()):
        _plan(path, check_only, traffic)


def _plan(path, check_only: bool, traffic: str | None) -> None:
    from pathlib import Path

    from specplug.lock import build_lock, dump_lock, lock_path_for, write_lock

    if check_only:
        from specplug.config import load_config
        from specplug.lock import plan_fresh

        cfg = load_config(path)
        text = dump_lock(build_lock(cfg, path, plan_fresh(cfg, path, traffic=traffic), traffic))
        target = lock_path_for(path)
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current != text:
            click.echo(f"{target} is {'missing' if current is None else 'out of date'}; run 'specplug plan -c {path}'.", err=True)
            raise SystemExit(1)
        click.echo(f"{target} is up to date.")
        return
    lock, target, changed = write_lock(path, traffic=traffic)
    s = lock.summary
    what = s["method"] if s["method"] == "none" else f"{s['method']}" + (f" ({s['drafter']})" if s["drafter"] else "") + f", k={s['num_speculative_tokens']}"
    verb = "Wrote" if changed else "Unchanged:"
    click.echo(f"{verb} {target}: {s['model']} on {s['stack']}, {s['hardware']}: {what}; predicted {s['predicted_speedup']:.2f}x"
               + (" (LOSSY)." if s.get("lossy") else "."))
    for w in lock.plan.warnings:
        click.echo(f"warning: {w}", err=True)
    if changed:
        click.echo(f"Review and commit {Path(target).name} with {Path(path).name}.")
