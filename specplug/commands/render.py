"""specplug render STACK: the launch script and files for a stack, or the launch spec as JSON/YAML."""

from __future__ import annotations

import sys

import click

from specplug.commands._common import config_option
from specplug.commands.choices import StackChoice
from specplug.config import METHODS


def plan_options(f):
    """The flags render and launch share (same names as the Python API's parameters)."""
    opts = [
        config_option,
        click.option("--model", "-m", default=None, help="Model alias, Hugging Face id or local folder."),
        click.option("--gpu", default=None, help="GPU catalog name to plan for (default: probe / config)."),
        click.option("--num-gpus", type=click.IntRange(1, 1024), default=None),
        click.option("--method", type=click.Choice(METHODS), default=None, help="Technique (default: policy picks)."),
        click.option("--drafter", default=None, help="Draft model / head: HF id or local folder."),
        click.option("-k", "--num-speculative-tokens", "num_speculative_tokens", type=click.IntRange(0, 64), default=None,
                     help="Draft length."),
        click.option("--stack-version", default=None, help="Render for this stack version (default: installed)."),
        click.option("--host", default=None, help="Bind address (default 127.0.0.1)."),
        click.option("--port", type=click.IntRange(1, 65535), default=None),
        click.option("--extra-arg", "extra_args", multiple=True,
                     help="Extra engine argument, passed verbatim as one argv element (repeatable)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command()
@click.argument("stack", type=StackChoice())
@plan_options
@click.option("-o", "--output-dir", default=None, type=click.Path(file_okay=False),
              help="Write the script and files here (default: print).")
@click.option("--format", "fmt", type=click.Choice(["shell", "json", "yaml"]), default="shell", show_default=True)
def render(stack: str, output_dir: str | None, fmt: str, extra_args: tuple[str, ...], **request) -> None:
    """Render STACK's launch command (and files, e.g. TensorRT-LLM's YAML) from specplug.yaml or flags."""
    from specplug.output import dump_json, dump_yaml
    from specplug.rendering import render as do_render

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
