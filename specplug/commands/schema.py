"""specplug schema: the JSON Schema of specplug.yaml."""

from __future__ import annotations

from typing import Any

import click

from specplug.commands._output import output_option


@click.command()
@output_option(default="json", help="json or yaml: the whole schema (for editors and CI validators); table: the "
                                    "top-level keys.")
def schema(output: str) -> None:
    """Print the JSON Schema of specplug.yaml (for editors and CI validators)."""
    from specplug.config import json_schema
    from specplug.output import emit, table
    from specplug.stacks.registry import stack_names

    doc = json_schema(stack_names())

    def render(d: dict[str, Any]) -> Any:
        rows = [(key, _kind(prop), _description(d, prop)) for key, prop in d.get("properties", {}).items()]
        return table("specplug.yaml: top-level keys ('specplug schema' prints the whole schema)",
                     ["key", "type", "description"], rows)

    emit(doc, output, render)


def _kind(prop: dict[str, Any]) -> str:
    """A property's type as a reader says it: 'integer', 'ServeSpec', 'string | StackSpec'."""
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "type" in prop:
        return str(prop["type"])
    kinds = [_kind(p) for p in prop.get("anyOf", prop.get("oneOf", [])) if p.get("type") != "null"]
    return " | ".join(kinds) or "any"


def _description(doc: dict[str, Any], prop: dict[str, Any]) -> str:
    if prop.get("description"):
        return str(prop["description"])
    refs = [prop.get("$ref")] + [p.get("$ref") for p in prop.get("anyOf", [])]
    for ref in filter(None, refs):
        found = doc.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {}).get("description")
        if found:
            return str(found).split("\n", 1)[0]
    return ""
