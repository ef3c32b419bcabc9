"""specplug deploy: docker-compose, Kubernetes and LeaderWorkerSet renders of the locked plan."""

from __future__ import annotations

import click

from specplug.commands._common import config_option
from specplug.commands._output import output_option


@click.command()
@config_option
@click.option(
    "--target",
    "-t",
    "targets",
    multiple=True,
    type=click.Choice(["compose", "k8s", "lws"]),
    help="What to render (repeatable). Default: compose and k8s, or lws when the plan needs several nodes.",
)
@click.option("-o", "--out-dir", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write into.")
@click.option("--name", default=None, help="Name of the service / Kubernetes objects (default: model and stack).")
@click.option("--image", default=None, help="Container image to run (default: the stack's official image at its pinned version).")
@output_option(help="How to print what was written: 'wrote' lines (table), or the list as json or yaml.")
def deploy(config_path: str | None, targets: tuple[str, ...], out_dir: str, name: str | None, image: str | None,
           output: str) -> None:
    """Render deploy files for specplug.yaml's plan (the lock when present) into the -o folder.

    Writes docker-compose.yaml, k8s/ (Deployment, Service, model-cache claim) and, for plans that span
    several nodes, lws/ (a LeaderWorkerSet). Secrets are referenced, never written: compose reads them from
    the environment, Kubernetes from the Secret '<name>-secrets'. 'specplug check --rendered OUTPUT' fails
    when these files fall behind the lock.
    """
    import os
    from pathlib import Path

    from specplug import deploy as d
    from specplug.config import find_config
    from specplug.errors import SpecplugError
    from specplug.lock import LOCK_NAME, compute_inputs, lock_path_for, plan_for, read_lock

    path = find_config(config_path)
    if path is None:
        raise SpecplugError("No specplug.yaml here.", "Pass -c FILE, or write one with 'specplug init --model M'.")
    lock_path = lock_path_for(path)
    plan = plan_for(path)
    if lock_path.is_file():
        inputs_hash = read_lock(lock_path).inputs.hash
    else:
        from specplug.config import load_config

        inputs_hash = compute_inputs(load_config(path), path, plan.hardware).hash
        click.echo(f"note: no {LOCK_NAME}; planned on the fly. Run 'specplug plan' to pin what you deploy.", err=True)
    chosen = list(targets) or d.default_targets(plan)
    out = Path(out_dir)
    config_rel = os.path.relpath(Path(path).resolve(), out.resolve())
    files = d.expected_files(plan, chosen, name=name, image=image, lock_file=LOCK_NAME, inputs_hash=inputs_hash, config_rel=config_rel)
    d.write_files(out, files)
    if output != "table":
        from specplug.output import emit

        emit({"targets": chosen, "locked": lock_path.is_file(), "written": [str(out / rel) for rel in files]}, output)
        return
    for rel in files:
        click.echo(f"wrote {out / rel}")
