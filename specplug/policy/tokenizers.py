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
    """Can ``draft`` draft for ``target`` on the stack ``caps`` describes? Mismatches say what it would do."""
    tf, df = target.tokenizer_family, draft.tokenizer_family
    if not tf or not df:
        return Compat(True, f"tokenizer of {'target' if not tf else 'drafter'} unknown; check that both share one")
    behaviour = f"; {caps.vocab_mismatch}" if caps.vocab_mismatch else ""  # what the stack would do
    if tf.startswith("local:") or df.startswith("local:"):
        # Local folders: compare fingerprints, and fall back to the special tokens + vocab size when only one
        # side is local (a catalog model has no fingerprint to compare against).
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
