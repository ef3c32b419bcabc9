"""A model's tokenizer as its files define it: a fingerprint of the token->id map and the special tokens, read
from a local folder or, for a Hub id, from tokenizer.json / vocab.json and tokenizer_config.json through the same
Hub client as config.json (cache, HF_TOKEN, offline mode, the revision the facts were read at).

Only a draft model compared with its target needs this, so it is read then, not with every model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specplug.catalog import hub
from specplug.catalog.local import tokenizer_fingerprint
from specplug.catalog.models import Model
from specplug.errors import CatalogError


@dataclass(frozen=True)
class Tokenizer:
    fingerprint: str  # sha256 prefix of the token->id map
    special: dict[str, str]  # bos/eos/pad/unk token strings
    where: str  # 'local folder ...' or 'tokenizer.json of org/name at revision abc1234567'


def tokenizer_of(model: Model) -> Tokenizer | None:
    """``model``'s tokenizer, or None when its files cannot be read here (offline and not cached, gated, absent).

    A model read from the Hub fetches its files as its config.json was; a catalog row only looks in the local
    cache, so that planning a catalog model never waits on the network."""
    if model.local_path:
        fp, special = tokenizer_fingerprint(Path(model.local_path))
        return Tokenizer(fp, special, f"local folder {model.local_path}") if fp else None
    if not hub.is_repo_id(model.hf_id):
        return None
    return _from_hub(model.hf_id, model.revision or None, not model.revision, hub.settings(), os.environ.get("HF_TOKEN"))


@cache
def _from_hub(repo: str, revision: str | None, cache_only: bool, s: hub.HubSettings, _token: str | None) -> Tokenizer | None:
    """(Cached per Hub, cache folder and token, as the model reader is.)"""
    def get(name: str, at: str | None) -> hub.HubFile | None:
        if cache_only:
            hit = hub.cached(s, repo, name, at or "main")
            return hit if isinstance(hit, hub.HubFile) else None
        return hub.fetch(repo, name, at, optional=True)

    try:
        cfg = get("tokenizer_config.json", revision)
        at = cfg.commit if cfg else revision
        vocab = get("tokenizer.json", at) or get("vocab.json", at)
    except CatalogError:
        return None
    if vocab is None:
        return None
    # hf_hub_download puts one commit's files side by side in its snapshot folder.
    fp, special = tokenizer_fingerprint(vocab.path.parent)
    return Tokenizer(fp, special, f"{vocab.path.name} of {repo} at revision {vocab.commit[:10]}") if fp else None
