"""The ``--output table|json|yaml`` option every command that prints data takes (one definition), with the
deprecated ``--format`` spellings some commands had before it kept as a hidden alias."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import click

from specplug.output import FORMATS, OUTPUT_HELP

__all__ = ["FORMATS", "output_option"]


def output_option(
    f: Callable[..., Any] | None = None,
    *,
    default: str = "table",
    legacy_format: Mapping[str, str] | None = None,
    help: str = OUTPUT_HELP,
) -> Any:
    """Add ``--output`` (passed to the command as ``output``).

    Use bare (``@output_option``) or with arguments. ``legacy_format`` maps the values of an older ``--format``
    option to ``--output`` values: ``--format`` then still works, hidden from --help, and says it is deprecated.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not legacy_format:
            return click.option("--output", "output", type=click.Choice(FORMATS), default=default,
                                show_default=True, help=help)(fn)
        return _with_legacy(fn, default, dict(legacy_format), help)

    return decorate(f) if f is not None else decorate


def _with_legacy(fn: Callable[..., Any], default: str, legacy: dict[str, str], help: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, output: str | None, legacy_format: str | None, **kwargs: Any) -> Any:
        if legacy_format is not None:
            mapped = legacy[legacy_format]
            if output is not None and output != mapped:
                raise click.UsageError(f"--format {legacy_format} contradicts --output {output}; pass --output alone.")
            click.echo(f"warning: --format is deprecated; use --output {mapped}.", err=True)
            output = mapped
        return fn(*args, output=output or default, **kwargs)

    # Default None on both, so the wrapper can tell "not given" from the default and catch contradictions.
    wrapper = click.option("--format", "legacy_format", type=click.Choice(list(legacy)), default=None, hidden=True,
                           help="Deprecated: use --output.")(wrapper)
    return click.option("--output", "output", type=click.Choice(FORMATS), default=None,
                        help=f"{help} [default: {default}]")(wrapper)
