"""specplug models: list, search and show the model catalog (and local model folders)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from specplug.output import emit, output_option, table

if TYPE_CHECKING:
    from specplug.catalog import Drafter, Model


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
    """Show one model (alias, HF id or local folder) with its known drafters and where they load."""
    from specplug.catalog import get_model
    from specplug.output import to_plain

    m = get_model(name)
    data = to_plain(m)
    data["known_drafters"] = [_drafter_plain(d) for d in _drafters_of(m)]

    def render(d):
        facts = [(k, v) for k, v in d.items() if k not in ("known_drafters", "source", "notes") and v not in (None, "", [], {})]
        out = [table(m.hf_id, ["field", "value"], facts)]
        if d["known_drafters"]:
            out.append(table("known drafters", _DRAFTER_COLS, [_drafter_row(x) for x in d["known_drafters"]]))
            from rich.markup import escape

            # Bases quote configs like '[1, 46, 90]', which rich would otherwise read as markup.
            basis = [
                escape(f"  {x['drafter_hf_id']}: {x['acceptance_length']:g} ({x['acceptance_basis']})")
                for x in d["known_drafters"]
                if x["acceptance_length"]
            ]
            if basis:
                out.append("published acceptance (tokens per target pass):\n" + "\n".join(basis))
            trained = [escape(f"  {x['drafter_hf_id']}: trained on {x['trained_for']}") for x in d["known_drafters"]
                       if x.get("trained_for") and x["trained_for"].lower() != m.hf_id.lower()]
            if trained:
                out.append("heads trained on a sibling checkpoint (acceptance here unmeasured, predictions discounted):\n"
                           + "\n".join(trained))
            if any(x["confirmed"] == "no" for x in d["known_drafters"]):
                out.append("[dim]confirmed 'no': repository not confirmed to exist; listed for reference, never picked by the planner[/dim]")
        out.append(f"[dim]source: {m.source}[/dim]")
        return out

    emit(data, output, render)


_DRAFTER_COLS = ["method", "format", "drafter", "params (B)", "draft vocab", "stacks (first version)", "acceptance", "confirmed"]


def _drafters_of(m: Model) -> list[Drafter]:
    """The model's drafters (its base model's included), then placeholder rows, which planners never see."""
    from specplug.catalog.drafters import drafters_for

    known = m.known_drafters()
    seen = {(d.method, d.drafter_hf_id) for d in known}
    unconfirmed = [d for d in drafters_for(m.hf_id, include_unconfirmed=True) if d.confirmed == "no" and (d.method, d.drafter_hf_id) not in seen]
    return known + unconfirmed


def _drafter_plain(d: Drafter) -> dict:
    from specplug.output import to_plain

    out = to_plain(d)
    # Machine readers get the stacks both ways: the parsed map and the version-qualified list.
    out["stacks_text"] = _stacks_text(d.stacks)
    return out


def _stacks_text(stacks: dict[str, str | None]) -> str:
    return ", ".join(name if ver is None else f"{name}>={ver}" for name, ver in stacks.items())


def _drafter_row(x: dict) -> tuple:
    vocab = x["draft_vocab_size"] or ""
    if vocab and x["vocab_size"]:
        vocab = f"{vocab} of {x['vocab_size']}"
    acc = "" if x["acceptance_length"] is None else f"{x['acceptance_length']:g}"
    return (x["method"], x["format"], x["drafter_hf_id"], x["params_b"], vocab, x["stacks_text"] or "-", acc, x["confirmed"])
