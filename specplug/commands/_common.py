"""Options and helpers shared by commands: the -c/--config option and reading the config file."""

from __future__ import annotations

import click

from specplug.config import Config, find_config, load_config

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="specplug.yaml to read (default: ./specplug.yaml when present). Flags override the file.",
)


def read_config(config_path: str | None) -> tuple[Config, str | None]:
    """The config from -c FILE or ./specplug.yaml, else defaults; with the path it came from (or None)."""
    path = find_config(config_path)
    if path is None:
        return Config(), None
    return load_config(path), str(path)
