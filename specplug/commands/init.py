"""specplug init: write a commented specplug.yaml."""

from __future__ import annotations

from pathlib import Path

import click

from specplug.commands.choices import StackChoice
from specplug.config import DEFAULT_CONFIG, WORKLOADS


@click.command()
@click.option("--model", "-m", required=True, help="Model alias, Hugging Face id or local folder.")
@click.option("--stack", "-s", type=StackChoice(), default="vllm", show_default=True)
@click.option("--stack-version", default=None, help="Pin the stack version to render for.")
@click.option("--gpu", default=None, help="GPU catalog name (default: probe this machine at plan time).")
@click.option("--num-gpus", type=click.IntRange(1, 1024), default=None)
@click.option("--workload", type=click.Choice(WORKLOADS), default="chat", show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--input-len", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True)
@click.option("--temperature", type=click.FloatRange(0, 5), default=0.0, show_default=True)
@click.option("--file", "-f", "path", default=DEFAULT_CONFIG, show_default=True, help="Where to write.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(model, stack, stack_version, gpu, num_gpus, workload, concurrency, input_len, output_len, temperature, path, force) -> None:
    """Write a commented specplug.yaml for MODEL on STACK (refuses to overwrite without --force)."""
    from specplug import __version__
    from specplug.catalog import get_gpu, get_model
    from specplug.config import METHODS, SCHEMA_VERSION, parse_config
    from specplug.errors import SpecplugError
    from specplug.fileio import write_atomic
    from specplug.templating import render_template

    target = Path(path)
    if target.exists() and not force:
        raise SpecplugError(f"{target} already exists.", "Pass --force to overwrite it, or --file to write elsewhere.")
    m = get_model(model)  # unknown names fail here, with suggestions
    if gpu:
        gpu = get_gpu(gpu).name
    text = render_template(
        "init/specplug.yaml.j2",
        model=model,
        model_name=m.hf_id,
        stack=stack,
        stack_version=stack_version,
        gpu=gpu,
        num_gpus=num_gpus,
        workload=workload,
        concurrency=concurrency,
        input_len=input_len,
        output_len=output_len,
        temperature=temperature,
        schema_version=SCHEMA_VERSION,
        specplug_version=__version__,
        methods=", ".join(METHODS),
    )
    parse_config(text, str(target))  # never write a file specplug itself would reject
    write_atomic(target, text)
    click.echo(f"Wrote {target} for {m.hf_id} on {stack}. Next: 'specplug recommend' or 'specplug plan'.")
