"""Options and helpers shared by commands: the -c/--config option and reading the config file."""

from __future__ import annotations

import click

from specplug.configfile import read_config

__all__ = ["config_option", "read_config"]

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="specplug.yaml to read (default: ./specplug.yaml when present). Flags override the file.",
)
