"""specplug schema: the JSON Schema of specplug.yaml."""

from __future__ import annotations

import json

import click


@click.command()
def schema() -> None:
    """Print the JSON Schema of specplug.yaml (for editors and CI validators)."""
    from specplug.adapter import stack_names
    from specplug.config import json_schema

    click.echo(json.dumps(json_schema(stack_names()), indent=2))
