"""A Model from a parsed config.json (Hub repository or local folder): the derived facts, the weight format,
an exact parameter count where the checkpoint states one, and the basis of every fact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specplug.catalog.archs import TEXT_CONFIG_KEYS
from specplug.catalog.derive import derive
from specplug.catalog.models import Model
from specplug.catalog.quantformat import weight_format

# Facts derive() states that are Model fields of the same name.
_FIELDS = (
    "family", "architecture", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "params_b",
    "active_params_b", "moe_num_experts", "moe_experts_per_token", "moe_intermediate_size", "moe_shared_experts",
    "mtp_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "attention_layers", "kv_values_per_token", "sliding_window", "sliding_layers", "sliding_kv_values_per_token",
    "layer_kinds",
)


@dataclass(frozen=True)
class Origin:
    """Who the model is and where its files came from."""

    hf_id: str
    at: str  # where the files were read, as facts cite it: ' at revision abc1234', ' in /models/x'
    source: str
    confirmed: str
    aliases: list[str] = field(default_factory=list)
    revision: str = ""
    local_path: str | None = None
    tokenizer_family: str = ""
    special_tokens: dict[str, str] = field(default_factory=dict)


def model_from_config(cfg: dict[str, Any], origin: Origin, *, modelopt: dict[str, Any] | None = None,
                      exact_params: tuple[int, str] | None = None) -> Model:
    """The Model ``cfg`` describes. ``modelopt`` is hf_quant_config.json's 'quantization' section;
    ``exact_params`` a (count, basis) read from the checkpoint's own files, used for unquantized weights only
    (quantized tensors are stored packed, so their element count is not the parameter count)."""
    facts = derive(cfg, f"config.json{origin.at}")
    values = {k: facts.values[k] for k in _FIELDS if k in facts.values}
    basis = {k: facts.basis[k] for k in values if k in facts.basis}
    fmt, fmt_basis = weight_format(_quantization(cfg), modelopt, _dtype(cfg))
    values["weight_format"] = fmt
    file, _, rest = fmt_basis.partition(" ")
    basis["weight_format"] = f"{file}{origin.at} {rest}"
    if exact_params and fmt in ("bf16", "fp16"):
        count, where = exact_params
        values["params_b"] = round(count / 1e9, 4)
        basis["params_b"] = where
    return Model(
        hf_id=origin.hf_id,
        aliases=list(origin.aliases),
        tokenizer_family=origin.tokenizer_family,
        special_tokens=dict(origin.special_tokens),
        source=origin.source,
        confirmed=origin.confirmed,
        revision=origin.revision,
        local_path=origin.local_path,
        basis=basis,
        **values,
    )


def _quantization(cfg: dict[str, Any]) -> dict[str, Any] | None:
    for c in (cfg, *(cfg.get(k) for k in TEXT_CONFIG_KEYS)):
        if isinstance(c, dict) and isinstance(c.get("quantization_config"), dict):
            return c["quantization_config"]
    return None


def _dtype(cfg: dict[str, Any]) -> str | None:
    for c in (cfg, *(cfg.get(k) for k in TEXT_CONFIG_KEYS)):
        if isinstance(c, dict) and (c.get("torch_dtype") or c.get("dtype")):
            return str(c.get("torch_dtype") or c.get("dtype"))
    return None
