"""specplug models: list, search and show the model catalog (and local model folders)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from specplug.commands._output import output_option
from specplug.output import emit, table

if TYPE_CHECKING:
    from specplug.catalog import Drafter, Model


def _row(m) -> tuple:
    params = "" if m.params_b is None else f"{m.params_b:g}B"
    if m.active_params_b:
        params += f" ({m.active_params_b:g}B active)"
    return (m.name, m.hf_id, params, m.num_layers, m.vocab_size, m.tokenizer_family, m.mtp_layers or "", len(m.known_drafters()))


_COLS = ["alias", "hf id", "params", "layers", "vocab", "tokenizer", "MTP", "drafters"]
# Left out in this order when a terminal is too narrow for every column: 'specplug models show ALIAS' has them all.
_OPTIONAL = ["hf id", "tokenizer", "vocab", "MTP", "layers"]


@click.group()
def models() -> None:
    """The model catalog: list, search, show."""


@models.command("list")
@output_option
def list_models(output: str) -> None:
    """List every catalog model."""
    from specplug.catalog import models as all_models

    items = list(all_models())
    emit(items, output, lambda _: table(f"{len(items)} models", _COLS, [_row(m) for m in items], optional=_OPTIONAL))


@models.command("search")
@click.argument("text", nargs=-1, required=True)
@output_option
def search(text: tuple[str, ...], output: str) -> None:
    """Models whose id, alias or family contains every word of TEXT."""
    from specplug.catalog import search_models

    items = search_models(" ".join(text))
    emit(items, output, lambda _: table(f"{len(items)} match(es) for '{' '.join(text)}'", _COLS, [_row(m) for m in items],
                                        optional=_OPTIONAL))


@models.command("show")
@click.argument("name")
@click.option("--revision", default=None, metavar="REV",
              help="Read a Hugging Face id at this branch, tag or commit (same as NAME@REV); catalog facts still win.")
@output_option
def show(name: str, revision: str | None, output: str) -> None:
    """Show one model (alias, HF id or local folder): its facts, where each came from, and its known drafters."""
    from specplug.catalog import get_model
    from specplug.serialize import to_plain

    m = get_model(name, revision=revision)
    data = to_plain(m)
    shown = [k for k, v in data.items() if k not in _NOT_FACTS and v not in (None, "", [], {}, 0)]
    data["basis"] = {k: m.basis_of(k) for k in shown}
    data["known_drafters"] = [_drafter_plain(d) for d in _drafters_of(m)]

    def render(d):
        from rich.markup import escape

        read_at = f"config.json at revision {m.revision[:10]} " if m.revision else ""
        facts = [(k, escape(_value(d[k])), escape(_short_basis(d["basis"][k], read_at))) for k in shown]
        out = [table(m.hf_id, ["field", "value", "basis"], facts)]
        if d["known_drafters"]:
            out.append(table("known drafters", _DRAFTER_COLS, [_drafter_row(x) for x in d["known_drafters"]]))
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
        if read_at:
            out.append(f"[dim]basis 'config.json ...': {escape(read_at.strip())} of {escape(m.hf_id)}[/dim]")
        out.append(f"[dim]source: {escape(m.source)}[/dim]")
        return out

    emit(data, output, render)


# Identity, provenance and bookkeeping: printed apart from the facts, or not at all.
_NOT_FACTS = {"hf_id", "source", "notes", "basis", "known_drafters", "special_tokens", "confirmed"}


def _value(v: object) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {n}" for k, n in v.items())
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


def _short_basis(basis: str, read_at: str) -> str:
    """A fact's basis in the table: the key alone when it was read from the config.json named below the table,
    'catalog' for a catalog row (its source is printed below)."""
    if basis.startswith("catalog: "):
        return "catalog"
    if read_at and basis.startswith(read_at):
        return "config.json " + basis[len(read_at):]
    if read_at and basis.startswith("computed from " + read_at.strip()):
        return "computed from config.json" + basis[len("computed from " + read_at.strip()):]
    return basis


_DRAFTER_COLS = ["method", "format", "drafter", "params (B)", "draft vocab", "stacks (first version)", "acceptance", "confirmed"]
# Left out first in a narrow terminal: acceptance is listed again under the table, with its basis; format mostly
# repeats the method.
_DRAFTER_OPTIONAL = ["acceptance", "format", "draft vocab", "params (B)"]


def _drafters_of(m: Model) -> list[Drafter]:
    """The model's drafters (its base model's included), then placeholder rows, which planners never see."""
    from specplug.catalog.drafters import drafters_for

    known = m.known_drafters()
    seen = {(d.method, d.drafter_hf_id) for d in known}
    unconfirmed = [d for d in drafters_for(m.hf_id, include_unconfirmed=True) if d.confirmed == "no" and (d.method, d.drafter_hf_id) not in seen]
    return known + unconfirmed


def _drafter_plain(d: Drafter) -> dict:
    from specplug.serialize import to_plain

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


@models.command("drafters")
@click.argument("target")
@click.option("--offline", is_flag=True, help="Do not search the Hub (as with HF_HUB_OFFLINE=1): the catalog and the local cache only.")
@output_option
def drafters_cmd(target: str, offline: bool, output: str) -> None:
    """Drafters published for TARGET (alias or HF id): the catalog's, those in the local Hugging Face cache, and
    Hub repositories whose model card or speculators verifier names it, each with where it was found."""
    from specplug.catalog import get_model
    from specplug.catalog.discovery import discover
    from specplug.serialize import to_plain

    m = get_model(target)
    found, notes = discover(m.hf_id, online=False if offline else None)
    data = {"target": m.hf_id, "drafters": [to_plain(f) for f in found], "notes": notes}

    def render(d):
        rows = [(x["method"], x["format"], x["drafter_id"], "" if x["acceptance_length"] is None else f"{x['acceptance_length']:g}",
                 x["where"]) for x in d["drafters"]]
        out = [table(f"{len(rows)} drafter(s) for {d['target']}", ["method", "format", "drafter", "acceptance", "found in"], rows,
                     optional=["acceptance", "format"])]
        out += [f"[dim]{n}[/dim]" for n in d["notes"]]
        return out

    emit(data, output, render)
