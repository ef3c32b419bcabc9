"""specplug render STACK: the launch script and files for a stack, or the launch spec as JSON/YAML."""

from __future__ import annotations

import sys

import click

from specplug.commands._common import plan_flags
from specplug.commands._output import output_option
from specplug.commands.choices import StackChoice

# --output names the same three forms as every command; for a render, the human form is the launch script.
_RENDER_FORMAT = {"table": "shell", "json": "json", "yaml": "yaml"}


@click.command()
@click.argument("stack", type=StackChoice())
@plan_flags
@click.option("-o", "--output-dir", default=None, type=click.Path(file_okay=False),
              help="Write the script and files here (default: print).")
@output_option(legacy_format={"shell": "table", "json": "json", "yaml": "yaml"},
               help="table: the launch script; json or yaml: the launch spec (argv, env, files).")
def render(stack: str, output_dir: str | None, output: str, extra_args: tuple[str, ...], **request) -> None:
    """Render STACK's launch command (and files, e.g. TensorRT-LLM's YAML) from specplug.yaml or flags."""
    from specplug.rendering import render as do_render
    from specplug.serialize import dump_json, dump_yaml

    fmt = _RENDER_FORMAT[output]
    r = do_render(stack, extra_args=list(extra_args), output_dir=output_dir, format=fmt, **request)
    if fmt == "json":
        sys.stdout.write(dump_json(r.launch_spec_dict()))
    elif fmt == "yaml":
        sys.stdout.write(dump_yaml(r.launch_spec_dict()))
    elif output_dir is None:
        sys.stdout.write(r.script)
        if r.files:
            click.echo(f"# also needs {', '.join(r.files)}: pass -o DIR to write them beside the script", err=True)
    if output_dir is not None:
        for p in r.written:
            click.echo(f"wrote {p}", err=True)
