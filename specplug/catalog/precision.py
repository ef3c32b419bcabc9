"""Weight formats (bf16, fp8, mxfp4, nvfp4, int4, GGUF types) and KV-cache dtypes: bytes per value.

A checkpoint's format is a fact of the model (models.csv ``weight_format``); ``serve.quantization`` may
choose another one to serve. Quantized formats cover the linear layers (or only the MoE experts, for mxfp4
as gpt-oss ships it); embeddings and the LM head stay 16-bit, which is what the bytes below account for.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from specplug.catalog._csv import aliases, norm, read_rows

KV_CACHE_DTYPES: dict[str, float] = {"auto": 2.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


@dataclass(frozen=True)
class WeightFormat:
    name: str
    aliases: tuple[str, ...]
    bits_per_weight: float
    scope: str  # all | linear | experts
    kind: str  # float | integer | gguf
    notes: str = ""

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8.0

    @property
    def quantized(self) -> bool:
        return self.bits_per_weight < 16


@cache
def weight_formats() -> tuple[WeightFormat, ...]:
    return tuple(
        WeightFormat(r["name"], tuple(aliases(r["aliases"])), float(r["bits_per_weight"]), r["scope"], r["kind"], r["notes"])
        for r in read_rows("weight_formats.csv")
    )


@cache
def _index() -> dict[str, WeightFormat]:
    idx: dict[str, WeightFormat] = {}
    for f in weight_formats():
        for key in (f.name, *f.aliases):
            idx.setdefault(norm(key), f)
    return idx


def get_weight_format(name: str) -> WeightFormat:
    f = _index().get(norm(name))
    if f is None:
        from specplug.errors import CatalogError

        raise CatalogError(
            f"Unknown weight format '{name}'.", f"Choose one of: {', '.join(w.name for w in weight_formats())}."
        )
    return f


def effective_bytes(fmt: WeightFormat, params: float, embedding_params: float, expert_params: float) -> float:
    """Mean bytes per parameter of a checkpoint of ``params`` parameters stored in ``fmt``.

    ``embedding_params`` (input embeddings and LM head) stay 16-bit unless the format covers everything;
    ``expert_params`` are the routed experts, the only part an ``experts``-scoped format quantizes."""
    if params <= 0:
        return fmt.bytes_per_weight
    if fmt.scope == "all" or not fmt.quantized:
        return fmt.bytes_per_weight
    q = min(expert_params, params) if fmt.scope == "experts" else max(params - embedding_params, 0.0)
    return (q * fmt.bytes_per_weight + (params - q) * 2.0) / params


def kv_cache_bytes(dtype: str) -> float:
    d = (dtype or "auto").lower()
    if d not in KV_CACHE_DTYPES:
        from specplug.errors import CatalogError

        raise CatalogError(f"Unknown KV-cache dtype '{dtype}'.", f"Choose one of: {', '.join(KV_CACHE_DTYPES)}.")
    return KV_CACHE_DTYPES[d]
