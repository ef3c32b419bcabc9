"""Jinja2 environment over the packaged templates/ folder (specplug.templates).

Every value a template writes is escaped for where it lands: ``tojson`` for JSON and YAML scalars, ``comment``
for a ``#`` comment line, ``shell_lines`` for argv already quoted word by word. A value written bare that could
end its line (a newline in a model folder, say) stops the render instead of starting a new shell or YAML line;
text laid out on purpose over several lines is wrapped in :class:`Verbatim` by the code that escaped it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from specplug.errors import SpecplugError
from specplug.safetext import breaking_char


class Verbatim(str):
    """Text already escaped for where a template puts it (a YAML dump, quoted shell lines, comment lines)."""


def comment(value: Any) -> str:
    """One comment line: anything that would end the line (newline, carriage return, control character) is a space."""
    text = str(value)
    return "".join(" " if breaking_char(ch) else ch for ch in text)


def comment_lines(lines: list[str], prefix: str = "# ") -> Verbatim:
    return Verbatim("\n".join(prefix + comment(line) for line in lines))


def shell_lines(words: list[str]) -> Verbatim:
    """Shell words (each already quoted) continued over lines with a backslash."""
    return Verbatim(" \\\n  ".join(words))


def _finalize(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Verbatim) and breaking_char(value) is not None:
        raise SpecplugError(
            f"Refusing to render {value!r}: it would break out of its line in the rendered file.",
            "Remove the newline or control character from the value (model, drafter, folder, version, host).",
        )
    return value


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
        autoescape=False,  # we render shell, YAML and JSON, never HTML: each value is escaped by its filter
        finalize=_finalize,
    )
    env.filters["tojson"] = lambda v: json.dumps(v)
    env.filters["comment"] = comment
    env.filters["shell_lines"] = shell_lines
    return env


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)


def list_templates(prefix: str) -> list[str]:
    return [t for t in environment().list_templates() if t.startswith(prefix)]
