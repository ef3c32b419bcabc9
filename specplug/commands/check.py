"""specplug check: validate specplug.yaml, its lock and rendered files (for CI and pre-commit)."""

from __future__ import annotations

import click

from specplug.commands._common import config_option
from specplug.commands._output import output_option


@click.command()
@config_option
@click.option(
    "--rendered",
    "rendered",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A folder written by 'specplug deploy' or 'specplug render' to compare with the lock (repeatable).",
)
@output_option(legacy_format={"text": "table", "json": "json"})
def check(config_path: str | None, rendered: tuple[str, ...], output: str) -> None:
    """Check specplug.yaml, specplug.lock.yaml and rendered files; never re-plans a locked config, needs no GPU.

    \b
    Exit codes:
      0  everything matches (warnings may print)
      1  problems found: invalid schema, missing or drifted lock, incompatible plan, stale renders;
         without a lock, also what 'specplug plan' refuses in the config; no config file
      2  usage error: no such --rendered folder, bad option
    """
    from specplug.check import check as run_check
    from specplug.config import DEFAULT_CONFIG
    from specplug.output import emit

    report = run_check(config_path or DEFAULT_CONFIG, rendered)
    if output != "table":
        emit(report.to_dict(), output)
    else:
        for p in report.problems:
            click.echo(p.text())
        for w in report.warnings:
            click.echo("warning: " + w.text(), err=True)
        if report.ok:
            click.echo(f"ok: {report.config}, its lock and {max(len(report.checked) - 2, 0)} rendered file(s) agree.")
        else:
            click.echo(f"{len(report.problems)} problem(s) found.")
    raise SystemExit(report.exit_code)
