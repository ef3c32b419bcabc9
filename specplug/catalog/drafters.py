"""Published drafters: draft models, EAGLE/EAGLE-3 and Medusa heads, MLP speculators, built-in MTP."""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel

from specplug.catalog._csv import num, read_rows

# drafters.csv spells the built-in MTP module 'mtp-builtin'; the rest of specplug says 'mtp'.
_METHOD_NAMES = {"mtp-builtin": "mtp"}


class Drafter(BaseModel):
    target_hf_id: str
    method: str  # draft_model | eagle | eagle3 | medusa | mlp_speculator | mtp
    drafter_hf_id: str
    params_b: float | None = None
    heads_or_layers: str = ""
    stacks_known_to_load_it: str = ""
    source: str = ""
    confirmed: str = ""
    notes: str = ""


@cache
def drafters() -> tuple[Drafter, ...]:
    return tuple(
        Drafter(
            target_hf_id=r["target_hf_id"],
            method=_METHOD_NAMES.get(r["method"], r["method"]),
            drafter_hf_id=r["drafter_hf_id"],
            params_b=num(r["drafter_params_b"]),
            heads_or_layers=r["num_heads_or_layers"],
            stacks_known_to_load_it=r["stacks_known_to_load_it"],
            source=r["source"],
            confirmed=r["confirmed"],
            notes=r["notes"],
        )
        for r in read_rows("drafters.csv")
    )


def drafters_for(target_hf_id: str, method: str | None = None) -> list[Drafter]:
    """Known drafters for a target model (by HF id, case-insensitive), optionally of one method."""
    key = target_hf_id.lower()
    return [
        d for d in drafters() if d.target_hf_id.lower() == key and (method is None or d.method == method)
    ]


def find_drafter(drafter_id: str) -> Drafter | None:
    """A catalog drafter by its own HF id, if published."""
    key = drafter_id.lower()
    return next((d for d in drafters() if d.drafter_hf_id.lower() == key), None)
