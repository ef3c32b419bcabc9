"""Printing data the three ways every command offers: a rich table, JSON or YAML."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import click

FORMATS = ("table", "json", "yaml")

# '--output' is the print format everywhere; '-o' is kept for the folder/file a command writes (render, bench).
output_option = click.option(
    "--output",
    "output",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="How to print the result.",
)


def to_plain(data: Any) -> Any:
    """Turn pydantic models, dataclasses, paths and tuples into JSON-ready Python data."""
    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json", exclude_none=False)
    if isinstance(data, dict):
        return {str(k): to_plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple | set):
        return [to_plain(v) for v in data]
    if hasattr(data, "__dataclass_fields__"):
        import dataclasses

        return to_plain(dataclasses.asdict(data))
    if isinstance(data, float | int | str | bool) or data is None:
        return data
    return str(data)


def dump_json(data: Any) -> str:
    return json.dumps(to_plain(data), indent=2, sort_keys=False) + "\n"


def dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(to_plain(data), sort_keys=False, allow_unicode=True, width=100)


def silence_stdout() -> None:
    """Point stdout at /dev/null, so output still buffered does not fail again in the interpreter's exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def reader_gone() -> NoReturn:
    """Whoever read our output closed the pipe early (``specplug recommend | head -1``): nothing failed, so end
    with exit 0 (click and rich would exit 1, which fails the pipeline under ``set -o pipefail``)."""
    silence_stdout()
    raise click.exceptions.Exit(0)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


def console(stderr: bool = False):
    """A rich console; imported lazily so that plain JSON output does not pay for rich."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own exits 1
            reader_gone()

    return _Console(stderr=stderr, highlight=False, soft_wrap=False)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]):
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def emit(data: Any, fmt: str, render_table: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as JSON/YAML, or call ``render_table(data)`` for the rich form.

    ``render_table`` returns a rich renderable (or a list of them); without one, tables fall back to YAML.
    """
    if fmt == "json":
        _write(dump_json(data))
    elif fmt == "yaml" or render_table is None:
        _write(dump_yaml(data))
    else:
        out = render_table(data)
        con = console()
        for item in out if isinstance(out, list) else [out]:
            con.print(item)
