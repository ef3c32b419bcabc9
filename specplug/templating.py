"""Jinja2 environment over the packaged templates/ folder (specplug.templates)."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def environment():
    import json
    from importlib import resources

    import jinja2

    # A plain folder loader: PackageLoader cannot see mapped packages in editable installs.
    folder = resources.files("specplug.templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # we render shell, YAML and JSON, never HTML
    )
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)


def list_templates(prefix: str) -> list[str]:
    return [t for t in environment().list_templates() if t.startswith(prefix)]
