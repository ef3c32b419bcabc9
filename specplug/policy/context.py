"""Acceptance as a function of context depth.

Learned drafters are mostly trained on short windows, so their acceptance falls as the context they must attend
over grows. At or below ``REFERENCE_CONTEXT`` tokens a method's first-position acceptance is what the priors say;
beyond it, its logit moves by ``slope * ln(context / REFERENCE_CONTEXT)`` with one slope per method family, fitted
by scripts/fit_context.py to the published measurements in benchmarks/data/context_results.csv and shipped in
policies/context.yaml (loaded once). Pure Python: the CLI imports this at start-up.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from specplug.errors import ConfigError
from specplug.methods import BY_NAME

REFERENCE_CONTEXT: int = 2048

_FAMILY_WORDS = {"head": "drafter heads", "native": "MTP layers", "block": "block drafters",
                 "draft_model": "draft models", "copy": "copy methods"}


@cache
def _data() -> dict[str, Any]:
    from importlib import resources

    from specplug.fileio import load_yaml

    f = resources.files("specplug.policies").joinpath("context.yaml")
    if not f.is_file():
        raise ConfigError("policies/context.yaml is missing from the installed package.",
                          "Reinstall specplug, or run scripts/fit_context.py in a source checkout.")
    data = load_yaml(f.read_text(encoding="utf-8"))
    families = data.get("families") if isinstance(data, dict) else None
    if not isinstance(families, dict) or data.get("reference_context") != REFERENCE_CONTEXT or not all(
        isinstance(v, dict) and isinstance(v.get("slope"), int | float) for v in families.values()
    ):
        raise ConfigError("policies/context.yaml does not match this version of specplug.",
                          "Rewrite it with scripts/fit_context.py.")
    return data


def _family(method: str) -> str:
    info = BY_NAME.get(method)
    if info is None:
        raise ValueError(f"Unknown speculation method {method!r}; expected one of {', '.join(BY_NAME)}.")
    return info.family


def _entry(method: str) -> dict[str, Any] | None:
    return _data()["families"].get(_family(method))


def slope(method: str) -> float:
    """Logit change of first-position acceptance per unit of ln(context / REFERENCE_CONTEXT); 0 without data."""
    entry = _entry(method)
    return float(entry["slope"]) if entry else 0.0


def alpha_at(method: str, alpha: float, context_tokens: float) -> float:
    """First-position acceptance at ``context_tokens`` of context, given ``alpha`` at short context (the priors)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}.")
    if not context_tokens >= 0 or math.isinf(context_tokens):  # also rejects NaN
        raise ValueError(f"context_tokens must be a finite number >= 0, got {context_tokens!r}.")
    s = slope(method)
    if context_tokens <= REFERENCE_CONTEXT or s == 0.0 or alpha in (0.0, 1.0):
        return alpha
    x = math.log(alpha / (1.0 - alpha)) + s * math.log(context_tokens / REFERENCE_CONTEXT)
    return 1.0 / (1.0 + math.exp(-x)) if x > -60 else 0.0


def basis(method: str) -> str:
    """One sentence for users: what the context effect for ``method`` rests on."""
    fam = _family(method)
    entry = _entry(method)
    if fam == "none":
        return "Plain decoding drafts nothing, so context depth does not change its acceptance."
    if not entry or entry.get("basis") == "none":
        return (f"No published measurement of {_FAMILY_WORDS.get(fam, fam)}' acceptance versus context depth was "
                f"found, so {method} is assumed unchanged with context.")
    s = float(entry["slope"])
    trend = "barely moves" if abs(s) < 0.05 else ("falls" if s < 0 else "rises")
    if entry.get("basis") == "borrowed":
        donor = _data()["families"].get(entry["borrowed_from"], {})
        n = len(donor.get("sources", ()))
        return (f"No published context sweep for {_FAMILY_WORDS.get(fam, fam)}: {method} borrows the slope of "
                f"{_FAMILY_WORDS.get(entry['borrowed_from'], entry['borrowed_from'])} ({n} published source"
                f"{'s' if n != 1 else ''}), so its acceptance {trend} beyond {REFERENCE_CONTEXT} tokens.")
    n, m, top = len(entry["sources"]), entry["measurements"], entry["max_context"]
    pooled = " (pooled with the other learned drafters)" if entry.get("basis") == "pooled" else ""
    return (f"Acceptance of {_FAMILY_WORDS.get(fam, fam)} such as {method} {trend} beyond {REFERENCE_CONTEXT} tokens "
            f"of context, fitted{pooled} to {m} published measurements from {n} source{'s' if n != 1 else ''} "
            f"(up to {top:,} tokens).")
