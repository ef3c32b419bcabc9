"""specplug stacks: which serving stacks specplug knows, which are installed here, and what specplug can render for
each, per version (methods and controls such as the per-batch schedule)."""

from __future__ import annotations

from typing import Any

import click

from specplug.commands._output import output_option


def _controls(a: Any, version: str | None) -> dict[str, str | None]:
    # Adapters built on BaseAdapter list their controls; a bare plugin gets the two every adapter declares.
    if hasattr(a, "controls"):
        return a.controls(version)
    return {"schedule": None if a.supports_schedule(version) else "no per-batch-size draft length",
            "trees": None if a.trees else "drafts chains only"}


def _versions(a: Any) -> list[dict[str, Any]]:
    """What specplug renders at each release where that changes (from the adapter's version windows)."""
    out = []
    for v in a.versions() if hasattr(a, "versions") else []:
        methods = a.methods(v)
        out.append({
            "version": v,
            "methods": [m for m, why in methods.items() if why is None],
            "controls": [c for c, why in _controls(a, v).items() if why is None],
        })
    return out


@click.command()
@click.argument("stack", required=False)
@output_option
def stacks(stack: str | None, output: str) -> None:
    """List stack adapters: installed here?, version, techniques and controls specplug renders there, broken plugins.

    With STACK, show what specplug renders at each release of that stack where it changes."""
    from specplug.output import emit, table
    from specplug.stacks.registry import adapters, broken_plugins, get_adapter

    # An unknown STACK is a StackError naming the known ones (the CLI prints it and exits non-zero).
    found = {stack: get_adapter(stack)} if stack is not None else adapters()
    rows = []
    for name, a in sorted(found.items()):
        try:
            version = a.installed_version()
        except Exception as exc:  # a plugin's probe must not break the listing
            version, err = None, f"{type(exc).__name__}: {exc}"
        else:
            err = None
        methods = a.methods(version)
        controls = _controls(a, version)
        rows.append(
            {
                "name": name,
                "display_name": a.display_name,
                "installed": version is not None,
                "version": version,
                "supported": [m for m, why in methods.items() if why is None],
                "unsupported": {m: why for m, why in methods.items() if why is not None},
                "controls": [c for c, why in controls.items() if why is None],
                "versions": _versions(a),
                "install_hint": a.install_hint,
                # where bench reads acceptance (None: it reports speed alone)
                "acceptance_metrics": a.metrics.acceptance.source if a.metrics.acceptance else None,
                "error": err,
            }
        )
    data = {"stacks": rows, "broken_plugins": [b.model_dump() for b in broken_plugins()]}

    def render(d):
        if stack is not None:
            r = d["stacks"][0]
            return [table(
                f"{r['display_name']}: what specplug renders from each release on",
                ["from version", "techniques", "controls"],
                [(v["version"], ", ".join(v["methods"]) or "-", ", ".join(v["controls"]) or "-") for v in r["versions"]],
            )]
        t = table(
            "Serving stacks",
            ["stack", "installed", "version", "techniques", "controls"],
            [(r["name"], "yes" if r["installed"] else "no", r["version"] or "-", ", ".join(r["supported"]) or "-",
              ", ".join(r["controls"]) or "-")
             for r in d["stacks"]],
            legend=["techniques and controls: what specplug renders at the installed version, or at the newest it "
                    "knows when the stack is not installed ('specplug stacks NAME' lists them per release)."],
        )
        out = [t]
        if d["broken_plugins"]:
            out.append(table("Broken plugins (not loaded)", ["name", "target", "error"],
                             [(b["name"], b["target"], b["error"]) for b in d["broken_plugins"]]))
        return out

    emit(data, output, render)
