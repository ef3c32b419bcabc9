"""Reading the config a command or library call names: the file given, else ./specplug.yaml, else defaults.

Lives outside :mod:`specplug.commands` so library code (rendering, bench) can read configs without the CLI layer.
"""

from __future__ import annotations

from specplug.config import Config, find_config, load_config


def read_config(config_path: str | None) -> tuple[Config, str | None]:
    """The config from ``config_path`` or ./specplug.yaml, else defaults; with the path it came from (or None)."""
    path = find_config(config_path)
    if path is None:
        return Config(), None
    return load_config(path), str(path)
