"""Models read from the Hugging Face Hub: config.json at a revision, ModelOpt's hf_quant_config.json and the
safetensors index where the repository has them, and a catalog row's curated facts over the derived ones."""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from typing import Any

from specplug.catalog import hub
from specplug.catalog.fromconfig import Origin, model_from_config
from specplug.catalog.models import Model
from specplug.errors import CatalogError

# One read per repository, revision and Hub setting in a process: planning asks for a model several times, and
# a failure (an unreachable Hub's timeout) is not worth repeating either.
_READ: dict[tuple[Any, ...], Model | CatalogError] = {}


def read_hub_model(repo: str, revision: str | None = None) -> Model:
    """The model of Hub repository ``repo`` at ``revision`` (default: main), from its config.json."""
    s = hub.settings()
    key = (repo.lower(), revision, s, os.environ.get("HF_TOKEN"))
    if key not in _READ:
        try:
            _READ[key] = _read(s, repo, revision)
        except CatalogError as exc:
            _READ[key] = exc
    found = _READ[key]
    if isinstance(found, CatalogError):
        raise found
    return found


def _read(s: hub.HubSettings, repo: str, revision: str | None) -> Model:
    cfg_file = hub.fetch(repo, "config.json", revision)
    assert cfg_file is not None  # a required file is a HubFile or an error
    commit = cfg_file.commit
    at = f" at revision {commit[:10]}"
    cfg = _json(cfg_file.path, f"config.json of {repo}{at}")
    modelopt = None
    if not _quantized(cfg):
        quant = hub.fetch(repo, "hf_quant_config.json", commit, optional=True)
        section = _json(quant.path, f"hf_quant_config.json of {repo}").get("quantization") if quant else None
        modelopt = section if isinstance(section, dict) else None
    exact = None
    index = hub.fetch(repo, "model.safetensors.index.json", commit, optional=True)
    total = (_json(index.path, f"model.safetensors.index.json of {repo}").get("metadata") or {}).get("total_parameters") if index else None
    if isinstance(total, int) and total > 0:
        exact = (total, f"model.safetensors.index.json{at} metadata.total_parameters (every tensor, MTP and vision included)")
    origin = Origin(hf_id=repo, at=at, source=f"config.json of {repo} at revision {commit} ({s.where})",
                    confirmed="hub", revision=commit)
    m = model_from_config(cfg, origin, modelopt=modelopt, exact_params=exact)
    return replace(m, basis={**m.basis, "revision": f"X-Repo-Commit of {s.where} for revision '{revision or 'main'}'"})


def _json(path: Any, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"Cannot parse {what}: {exc}.", "Check the repository's file, or pass a local folder.") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{what} is not a JSON object.", "Check the repository's file, or pass a local folder.")
    return data


def _quantized(cfg: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("quantization_config") for c in (cfg, cfg.get("text_config")))


# ----------------------------------------------------------------------------------------- catalog over Hub

# Identity and provenance come from the catalog row whole; they are not facts to merge.
_IDENTITY = {"hf_id", "aliases", "source", "confirmed", "notes", "base_model", "tokenizer_family", "special_tokens",
             "local_path", "revision", "basis"}
# Catalog columns that only dims_extra fills: zero or None there means "not stated", not "none".
_OPTIONAL = {"sliding_window", "sliding_layers", "moe_shared_experts", "q_lora_rank", "kv_lora_rank",
             "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "moe_intermediate_size"}
# Derived totals that hold only for the per-layer shape they were computed from.
_COMPOSITE = ("kv_values_per_token", "sliding_kv_values_per_token", "attention_layers")
_SHAPE = ("num_layers", "num_kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim", "sliding_layers")


def merge_catalog(row: Model, derived: Model) -> Model:
    """``derived`` (read from config.json) with ``row``'s curated facts over it, field by field; each fact keeps
    the basis of the side it came from."""
    values: dict[str, Any] = {}
    basis = dict(derived.basis)
    catalog = f"catalog: {row.source}"
    for f in fields(Model):
        if f.name in _IDENTITY:
            continue
        ours = getattr(row, f.name)
        if ours in (None, "", [], {}) or (f.name in _OPTIONAL and not ours):
            continue
        values[f.name] = ours
        basis[f.name] = catalog
    if any(f in values and values[f] != getattr(derived, f) for f in _SHAPE):
        for f in _COMPOSITE:  # the curated shape wins; totals computed from another shape would contradict it
            values[f] = None if f != "sliding_kv_values_per_token" else 0
            basis.pop(f, None)
    return replace(derived, **values, hf_id=row.hf_id, aliases=list(row.aliases), source=f"{row.source}; {derived.source}",
                   confirmed=row.confirmed, notes=row.notes, base_model=row.base_model,
                   tokenizer_family=row.tokenizer_family, basis=basis)
