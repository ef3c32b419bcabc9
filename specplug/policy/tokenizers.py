"""Tokenizer compatibility between a target and a separate draft model.

Catalog models carry a tokenizer family (same family = same token ids) and a vocabulary size; local folders
carry ``local:<fingerprint>`` of their vocabulary plus their special tokens. Heads (EAGLE, Medusa, MTP) use
the target's own vocabulary and need no check. What a stack does with a mismatch, and the vocab-size slack it
takes, come from its adapter through :class:`~specplug.capabilities.StackCapabilities`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specplug.catalog import Model

if TYPE_CHECKING:
    from specplug.capabilities import StackCapabilities


@dataclass(frozen=True)
class Compat:
    ok: bool
    reason: str | None = None  # why not (or, when ok, a caveat worth a warning)


def compatible(target: Model, draft: Model, caps: StackCapabilities) -> Compat:
    """Can ``draft`` draft for ``target`` on the stack ``caps`` describes? Mismatches say what it would do.

    Two catalog rows compare their curated tokenizer families; where either model is not a catalog row (a Hub id,
    a folder), both tokenizers' files are read and their token->id maps and special tokens compared."""
    tf, df = target.tokenizer_family, draft.tokenizer_family
    behaviour = f"; {caps.vocab_mismatch}" if caps.vocab_mismatch else ""  # what the stack would do
    if not tf or not df or tf.startswith("local:") or df.startswith("local:"):
        by_files = _by_files(target, draft, behaviour)
        if by_files is not None:
            return by_files
    if not tf or not df:
        return Compat(True, f"tokenizer of {'target' if not tf else 'drafter'} unknown; check that both share one")
    if tf.startswith("local:") or df.startswith("local:"):
        # Local folders whose other side's files could not be read: compare fingerprints, else vocab sizes.
        if tf == df:
            return Compat(True)
        if tf.startswith("local:") and df.startswith("local:"):
            return Compat(False, f"tokenizer vocabularies differ (fingerprints {tf[6:14]} vs {df[6:14]}){behaviour}")
        if target.vocab_size != draft.vocab_size:
            return Compat(False, f"vocab sizes differ ({target.vocab_size} vs {draft.vocab_size}){behaviour}")
        return Compat(True, "one model is a local folder: only vocab sizes could be compared")
    if target.special_tokens and draft.special_tokens:
        diff = sorted(k for k in set(target.special_tokens) | set(draft.special_tokens) if target.special_tokens.get(k) != draft.special_tokens.get(k))
        if diff:
            return Compat(False, f"special tokens differ ({', '.join(diff)}){behaviour}")
    if tf != df:
        return Compat(False, f"different tokenizers ({tf} vs {df}){behaviour}")
    tv, dv = target.vocab_size or 0, draft.vocab_size or 0
    if tv != dv:
        delta, slack = abs(tv - dv), caps.vocab_slack
        if slack == 0:
            return Compat(False, f"same tokenizer but vocab sizes differ ({tv} vs {dv}, padding only){behaviour}")
        if slack is not None and delta > slack:
            return Compat(False, f"vocab sizes differ by {delta} (> {slack}){behaviour}")
        return Compat(True, f"same tokenizer, vocab padded differently ({tv} vs {dv})")
    return Compat(True)


def _by_files(target: Model, draft: Model, behaviour: str) -> Compat | None:
    """The verdict from both models' tokenizer files; None when either cannot be read here."""
    from specplug.catalog.tokenizerfiles import tokenizer_of

    t, d = tokenizer_of(target), tokenizer_of(draft)
    if t is None or d is None:
        return None
    if t.fingerprint != d.fingerprint:
        return Compat(False, f"token->id maps differ ({t.where}: {t.fingerprint[:8]}, {d.where}: {d.fingerprint[:8]}){behaviour}")
    diff = sorted(k for k in set(t.special) | set(d.special) if t.special.get(k) != d.special.get(k))
    if diff:
        return Compat(False, f"special tokens differ ({', '.join(diff)}){behaviour}")
    return Compat(True)
