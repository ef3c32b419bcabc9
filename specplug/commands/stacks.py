"""specplug stacks: which serving stacks specplug knows, which are installed here, and what each can run."""

from __future__ import annotations

import click

from specplug.output import output_option


@click.command()
@output_option
def stacks(output: str) -> None:
    """List stack adapters: installed here?, version, techniques supported at that version, broken plugins."""
    from specplug.adapter import adapters, broken_plugins
    from specplug.output import emit, table

    rows = []
    for name, a in sorted(adapters().items()):
        try:
            version = a.installed_version()
        except Exception as exc:  # a plugin's probe must not break the listing
            version, err = None, f"{type(exc).__name__}: {exc}"
        else:
            err = None
        methods = a.methods(version)
        rows.append(
            {
                "name": name,
                "display_name": a.display_name,
                "installed": version is not None,
                "version": version,
                "supported": [m for m, why in methods.items() if why is None],
                "unsupported": {m: why for m, why in methods.items() if why is not None},
                "install_hint": a.install_hint,
                # where bench reads acceptance (None: it reports speed alone)
                "acceptance_metrics": a.metrics.acceptance.source if a.metrics.acceptance else None,
                "error": err,
            }
        )
    data = {"stacks": rows, "broken_plugins": [b.model_dump() for b in broken_plugins()]}

    def render(d):
        t = table(
            "Serving stacks",
            ["stack", "installed", "version", "techniques (at that version; newest known if not installed)"],
            [(r["name"], "yes" if r["installed"] else "no", r["version"] or "-", ", ".join(r["supported"]) or "-")
             for r in d["stacks"]],
        )
        out = [t]
        if d["broken_plugins"]:
            out.append(table("Broken plugins (not loaded)", ["name", "target", "error"],
                             [(b["name"], b["target"], b["error"]) for b in d["broken_plugins"]]))
        return out

    emit(data, output, render)
