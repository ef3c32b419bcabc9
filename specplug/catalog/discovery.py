"""Drafters for a target, wherever they are published: the catalog's rows, checkpoints in the local Hugging Face
cache, and (online) Hub repositories whose base_model tag or speculators verifier names the target, each with
where it was found. A Hub hit is classified from its own config.json, never from its name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from specplug.catalog import hub
from specplug.catalog.drafterconfig import DrafterInfo, classify, front_matter, read_drafter
from specplug.catalog.drafters import Drafter
from specplug.errors import CatalogError

# Hub listings return popular repositories first; reading more configs than this costs seconds for little.
_MAX_HUB_READS = 20
# Suffixes that name one training stage or packaging of a model: checkpoints equal without them are siblings
# (base and instruct), whose heads transfer with a discount (the planner's cross-target rule).
_STAGE = re.compile(r"[-_](instruct|chat|base|it|hf|pretrain|sft|fp8|bf16|awq|gptq|int4|int8)$", re.I)
# A search by the target's name also returns its quantized copies and fine-tunes; these words mark drafters.
_DRAFTER_WORDS = ("eagle", "dflash", "dspark", "speculator", "medusa", "draft", "mtp", "pard")


@dataclass(frozen=True)
class Found:
    drafter_id: str
    method: str
    format: str
    where: str  # 'catalog: <source>', 'local cache: <path>', 'Hub: base_model tag of <target>' ...
    trained_for: str = ""
    draft_vocab_size: int | None = None
    acceptance_length: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def in_catalog(self) -> bool:
        return self.where.startswith("catalog:")

    def as_drafter(self, target_hf_id: str) -> Drafter:
        """The drafter as a candidate for planning ``target_hf_id``: what its files said, where it was found."""
        return Drafter(target_hf_id=target_hf_id, method=self.method, drafter_hf_id=self.drafter_id, format=self.format,
                       draft_vocab_size=self.draft_vocab_size, trained_for=self.trained_for, confirmed="yes",
                       source="; ".join(self.notes), found_in=self.where)


def found_drafters(target_hf_id: str, *, online: bool | None = None) -> tuple[list[Drafter], list[str]]:
    """Drafters for ``target_hf_id`` that are not catalog rows (the local cache, and the Hub when ``online``), as
    planning candidates, and notes on what could not be searched."""
    found, notes = discover(target_hf_id, online=online, catalog=False)
    return [f.as_drafter(target_hf_id) for f in found if f.method != "draft_model"], notes


def discover(target_hf_id: str, *, online: bool | None = None, catalog: bool = True) -> tuple[list[Found], list[str]]:
    """Drafters for ``target_hf_id`` and notes on what could not be searched. ``online`` None: search the Hub
    unless HF_HUB_OFFLINE is set; ``catalog`` False leaves the catalog's own rows out."""
    found: list[Found] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(f: Found) -> None:
        key = f.drafter_id.lower()
        if key not in seen:
            seen.add(key)
            found.append(f)

    for f in _catalog(target_hf_id) if catalog else []:
        add(f)
    s = hub.settings()
    for f in _local_cache(s.cache_dir, target_hf_id):
        add(f)
    if online is None:
        online = not s.offline
    if online:
        try:
            for f in _hub(s, target_hf_id):
                add(f)
        except CatalogError as exc:
            notes.append(f"The Hub was not searched: {exc.message}")
    else:
        notes.append("HF_HUB_OFFLINE is set: the Hub was not searched (the catalog and the local cache were).")
    return found, notes


def _catalog(target: str) -> list[Found]:
    from specplug.catalog.drafters import drafters_for
    from specplug.catalog.models import models

    out = [Found(d.drafter_hf_id, d.method, d.format, f"catalog: {d.source}", d.trained_for, d.draft_vocab_size,
                 d.acceptance_length) for d in drafters_for(target)]
    # Same-tokenizer smaller models of the catalog are draft-model candidates even without a published pairing.
    tgt = next((m for m in models() if m.hf_id.lower() == target.lower()), None)
    if tgt and tgt.tokenizer_family and tgt.params_b:
        for m in models():
            if (m.tokenizer_family == tgt.tokenizer_family and m.params_b and m.params_b <= tgt.params_b / 8
                    and not m.base_model and m.hf_id.lower() != target.lower()):
                out.append(Found(m.hf_id, "draft_model", "draft_model",
                                 f"catalog: same tokenizer family ({m.tokenizer_family}), {m.params_b:g}B"))
    return out


def _local_cache(cache_dir: Path, target: str) -> list[Found]:
    """Drafter checkpoints already downloaded whose files name the target."""
    out = []
    try:
        repos = sorted(p for p in cache_dir.iterdir() if p.name.startswith("models--"))
    except OSError:
        return out
    for folder in repos:
        for cfg in sorted(folder.glob("snapshots/*/config.json"))[:1]:
            try:
                data = json.loads(cfg.read_text(encoding="utf-8"))
                card = cfg.parent / "README.md"
                info = classify(data, folder.name[len("models--"):].replace("--", "/", 1), str(cfg),
                                front_matter(card.read_text(encoding="utf-8", errors="replace")) if card.is_file() else None)
            except (OSError, ValueError, CatalogError):
                continue
            if info.method != "draft_model" and info.trained_for and siblings(info.trained_for, target):
                out.append(_found(info, f"local cache: {cfg.parent} ({info.trained_for_basis})"))
    return out


def _list_models(s: hub.HubSettings, params: dict[str, str]) -> list[str]:
    """Repository ids from the Hub's /api/models, one request without retries (HfApi.list_models backs off for
    tens of seconds when the Hub is unreachable)."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    r = get_session().get(f"{s.endpoint}/api/models", params={**params, "limit": str(_MAX_HUB_READS)},
                          headers=build_hf_headers(token=os.environ.get("HF_TOKEN") or None), timeout=hub.timeout())
    hf_raise_for_status(r)
    return [m["id"] for m in r.json() if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _hub(s: hub.HubSettings, target: str) -> list[Found]:
    candidates: dict[str, str] = {}
    short = target.split("/", 1)[-1]
    try:
        for repo in _list_models(s, {"filter": f"base_model:{target}"}):
            candidates.setdefault(repo, f"Hub: base_model tag names {target}")
        for repo in _list_models(s, {"search": short}):
            if any(w in repo.lower() for w in _DRAFTER_WORDS):
                candidates.setdefault(repo, f"Hub: search '{short}' (config.json read to check)")
    except Exception as exc:  # huggingface_hub's HTTP errors; mapped to the same messages as file reads
        raise hub.hub_error(exc, s, target, "the model list", "main") or CatalogError(str(exc)) from None
    out = []
    for repo, where in list(candidates.items())[:_MAX_HUB_READS]:
        if repo.lower() == target.lower():
            continue
        try:
            info = read_drafter(repo)
        except CatalogError:
            continue
        if info.method == "draft_model":
            continue  # a fine-tune of the target, not a drafter for it
        if info.trained_for and not siblings(info.trained_for, target):
            continue
        out.append(_found(info, where + (f"; {info.trained_for_basis}" if info.trained_for_basis else "")))
    return out


def siblings(a: str, b: str) -> bool:
    """Whether Hub ids ``a`` and ``b`` name one model, or two stages of it (base and instruct, a packaging)."""
    def stem(x: str) -> str:
        x = x.lower()
        while (shorter := _STAGE.sub("", x)) != x:
            x = shorter
        return x

    return a.lower() == b.lower() or stem(a) == stem(b)


def _found(info: DrafterInfo, where: str) -> Found:
    return Found(info.repo, info.method, info.format, where, info.trained_for, info.draft_vocab_size,
                 notes=[info.basis])
