"""specplug models: list, search and show the model catalog (and local model folders)."""

from __future__ import annotations

import click

from specplug.output import emit, output_option, table


def _row(m) -> tuple:
    params = "" if m.params_b is None else f"{m.params_b:g}B"
    if m.active_params_b:
        params += f" ({m.active_params_b:g}B active)"
    return (m.name, m.hf_id, params, m.num_layers, m.vocab_size, m.tokenizer_family, m.mtp_layers or "", len(m.known_drafters()))


_COLS = ["alias", "hf id", "params", "layers", "vocab", "tokenizer", "MTP", "drafters"]


@click.group()
def models() -> None:
    """The model catalog: list, search, show."""


@models.command("list")
@output_option
def list_models(output: str) -> None:
    """List every catalog model."""
    from specplug.catalog import models as all_models

    items = list(all_models())
    emit(items, output, lambda _: table(f"{len(items)} models", _COLS, [_row(m) for m in items]))


@models.command("search")
@click.argument("text", nargs=-1, required=True)
@output_option
def search(text: tuple[str, ...], output: str) -> None:
    """Models whose id, alias or family contains every word of TEXT."""
    from specplug.catalog import search_models

    items = search_models(" ".join(text))
    emit(items, output, lambda _: table(f"{len(items)} match(es) for '{' '.join(text)}'", _COLS, [_row(m) for m in items]))


@models.command("show")
@click.argument("name")
@output_option
def show(name: str, output: str) -> None:
    """Show one model (alias, HF id or local folder) with its known drafters."""
    from specplug.catalog import get_model
    from specplug.output import to_plain

    m = get_model(name)
    data = to_plain(m)
    data["known_drafters"] = [to_plain(d) for d in m.known_drafters()]

    def render(d):
        facts = [(k, v) for k, v in d.items() if k not in ("known_drafters", "source", "notes") and v not in (None, "", [], {})]
        out = [table(m.hf_id, ["field", "value"], facts)]
        if d["known_drafters"]:
            out.append(
                table(
                    "known drafters",
                    ["method", "drafter", "params (B)", "stacks known to load it"],
                    [(x["method"], x["drafter_hf_id"], x["params_b"], x["stacks_known_to_load_it"]) for x in d["known_drafters"]],
                )
            )
        out.append(f"[dim]source: {m.source}[/dim]")
        return out

    emit(data, output, render)
