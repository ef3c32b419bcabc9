"""specplug init: write a commented specplug.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from specplug.commands.choices import StackChoice
from specplug.config import DEFAULT_CONFIG, WORKLOADS


@click.command()
@click.option("--model", "-m", required=True, help="Model alias, Hugging Face id or local folder.")
@click.option("--stack", "-s", type=StackChoice(), default="vllm", show_default=True)
@click.option("--stack-version", default=None,
              help="Pin the stack version to render for (default: the installed one, else the newest specplug knows).")
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
    from pydantic import ValidationError

    from specplug import __version__
    from specplug.catalog import get_gpu, get_model
    from specplug.config import METHODS, SCHEMA_VERSION, Config, explain_options, parse_config
    from specplug.errors import SpecplugError
    from specplug.fileio import write_atomic
    from specplug.templating import render_template

    target = Path(path)
    if target.exists() and not force:
        raise SpecplugError(f"{target} already exists.", "Pass --force to overwrite it, or --file to write elsewhere.")
    try:  # the flags as the file will hold them: a bad value is named as the option it came from
        Config.model_validate({"model": model, "stack": {"name": stack, "version": stack_version}, "hardware": {"gpu": gpu}})
    except ValidationError as exc:
        raise SpecplugError(explain_options(exc)) from None
    m = get_model(model)  # unknown names fail here, with suggestions
    if gpu:
        gpu = get_gpu(gpu).name
    version_note = None
    if not stack_version:
        stack_version, version_note = default_stack_version(stack)
    text = render_template(
        "init/specplug.yaml.j2",
        model=model,
        model_name=m.hf_id,
        stack=stack,
        stack_version=stack_version,
        version_note=version_note,
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
    if version_note:
        click.echo(f"Pinned {stack} {stack_version} ({version_note}); edit stack.version in {target} to change it.")


def default_stack_version(stack: str) -> tuple[str | None, str | None]:
    """The version init pins when the user names none, and why (for the file's comment), or (None, None).

    An unpinned stack leaves plans following whatever is installed where they run, and ``deploy`` cannot choose
    an image tag at all, so init pins one: the installed release when this adapter can render for it (what the
    plan would have used anyway), else the newest release the adapter knows.
    """
    from specplug.errors import StackError
    from specplug.stacks.registry import get_adapter
    from specplug.versions import version_key

    adapter = get_adapter(stack)
    # A local build label ('0.32.0+cpu') names no release: image tags and version windows know '0.32.0'.
    installed = (_installed(adapter) or "").split("+")[0] or None
    if installed is not None:
        try:
            adapter.known_version(installed)
        except StackError:
            pass  # older than any release specplug renders for: pin a known one instead
        else:
            return installed, "the release installed here when init ran"
    known = adapter.versions() if hasattr(adapter, "versions") else []  # a bare plugin may list none
    if not known:
        return None, None
    return max(known, key=version_key), f"the newest {adapter.display_name} release this specplug knows"


def _installed(adapter: Any) -> str | None:
    try:
        return adapter.installed_version()
    except Exception:  # a plugin's probe must not break init; it only loses the installed-version default
        return None
