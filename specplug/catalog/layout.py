"""How a config.json lays out a model's layers: a view of the language model's keys (a text sub-config over the
top level, with its model type's defaults), each layer's mixer (full or sliding-window attention, linear
attention, Mamba) and its feed-forward block (dense MLP, routed experts, both or none), read by the rules
``archs.ArchSpec.layout`` names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specplug.catalog.archs import (
    ARCHS,
    KEYS,
    LAYER_TYPE_KINDS,
    NEMOTRON_BLOCKS,
    TEXT_CONFIG_KEYS,
    WRAPPED_TEXT_TYPES,
    ArchSpec,
)
from specplug.errors import CatalogError


@dataclass(frozen=True)
class Layer:
    mixer: str  # full_attention | sliding_attention | linear_attention | lightning | mamba | mamba1 | parallel | none
    ffn: str  # dense | moe | dense+moe | none


class UnreadableArchitecture(CatalogError):
    """config.json names a model type specplug has no reader for."""


class ConfigView:
    """The language model's keys: a text sub-config over the top level, with the model type's defaults under both."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.top = cfg
        self.sub: dict[str, Any] = {}
        self.prefix = ""
        for key in TEXT_CONFIG_KEYS:
            sub = cfg.get(key)
            if isinstance(sub, dict) and isinstance(sub.get("text_config"), dict):
                sub, key = sub["text_config"], f"{key}.text_config"  # e.g. an omni model's thinker
            if isinstance(sub, dict):
                self.sub, self.prefix = sub, f"{key}."
                break
        top_type = str(cfg.get("model_type") or "")
        self.model_type = str(self.sub.get("model_type") or WRAPPED_TEXT_TYPES.get(top_type) or top_type)
        if self.model_type not in ARCHS and top_type in ARCHS:
            self.model_type = top_type
        self.spec: ArchSpec | None = ARCHS.get(self.model_type)

    def raw(self, key: str) -> tuple[Any, str | None]:
        """A config key's value and where it sits ('text_config.head_dim'), or (None, None)."""
        if self.sub.get(key) is not None:
            return self.sub[key], self.prefix + key
        if self.top.get(key) is not None:
            return self.top[key], key
        if self.spec and key in self.spec.defaults:
            return self.spec.defaults[key], f"{key} (absent; {self.model_type} default)"
        return None, None

    def get(self, fact: str) -> tuple[Any, str | None]:
        for key in KEYS[fact]:
            value, where = self.raw(key)
            if value is not None:
                return value, where
        return None, None

    def num(self, key: str, default: Any = None) -> Any:
        value, _ = self.raw(key)
        return default if value is None else value


def at(value: Any, i: int) -> Any:
    """A per-layer list's entry for layer ``i`` (its first entry when the list is shorter), or the scalar itself."""
    if not isinstance(value, list) or not value:
        return value
    return value[i] if i < len(value) else value[0]


def first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


# ------------------------------------------------------------------------------------------- layer layout


def _mixers(v: ConfigView, layers: int) -> list[str]:
    """Each layer's mixer kind: which attention (or state-space) block it runs."""
    layout = v.spec.layout if v.spec else "plain"
    rule = _MIXER_RULES.get(layout)
    kinds = rule(v, layers) if rule else None
    if kinds is None:
        types, where = v.raw("layer_types")
        if isinstance(types, list) and len(types) == layers:
            unknown = sorted({t for t in types if t not in LAYER_TYPE_KINDS})
            if unknown:
                raise UnreadableArchitecture(
                    f"{where} names layer kinds specplug cannot read: {', '.join(unknown)}.",
                    "Use a catalog alias (specplug models search TEXT) for this model.",
                )
            kinds = [LAYER_TYPE_KINDS[t] for t in types]
    if kinds:
        linear = v.spec.linear if v.spec else "linear_attention"
        kinds = [linear if k == "linear" else k for k in kinds]
    if kinds is None and (fallback := _FALLBACK_RULES.get(layout)):
        kinds = fallback(v, layers)
    return kinds or ["full_attention"] * layers


def _window_every(v: ConfigView, layers: int, pattern: int) -> list[str]:
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]


def _mistral(v: ConfigView, layers: int) -> list[str] | None:
    # Mistral 7B v0.1 slides every layer over its window; later releases set sliding_window to null.
    return ["sliding_attention"] * layers if v.num("sliding_window") else None


def _qwen2(v: ConfigView, layers: int) -> list[str] | None:
    if not v.num("use_sliding_window", False):
        return ["full_attention"] * layers  # Qwen2 configs carry a sliding_window they do not use
    start = int(v.num("max_window_layers", 0))
    return ["sliding_attention" if i >= start else "full_attention" for i in range(layers)]


def _gemma2(v: ConfigView, layers: int) -> list[str]:
    return _window_every(v, layers, 2)


def _gemma3(v: ConfigView, layers: int) -> list[str]:
    pattern = v.num("sliding_window_pattern") or v.num("_sliding_window_pattern") or 6
    return _window_every(v, layers, int(pattern))


def _qwen3_next(v: ConfigView, layers: int) -> list[str]:
    every = int(v.num("full_attention_interval", 4))
    return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]


def _minimax(v: ConfigView, layers: int) -> list[str] | None:
    types = v.num("attn_type_list")
    return ["full_attention" if t else "lightning" for t in types] if isinstance(types, list) else None


def _mimo_v2(v: ConfigView, layers: int) -> list[str] | None:
    pattern = v.num("hybrid_layer_pattern")
    return ["sliding_attention" if p else "full_attention" for p in pattern] if isinstance(pattern, list) else None


def _mimo_v2_default(v: ConfigView, layers: int) -> list[str]:
    return ["full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]


def _jamba(v: ConfigView, layers: int) -> list[str]:
    period, offset = int(v.num("attn_layer_period", 8)), int(v.num("attn_layer_offset", 4))
    return ["full_attention" if i % period == offset else "mamba1" for i in range(layers)]


def _falcon_h1(v: ConfigView, layers: int) -> list[str]:
    return ["parallel"] * layers  # attention and Mamba-2 side by side in every layer


def _nemotron_h(v: ConfigView, layers: int) -> list[str]:
    return [NEMOTRON_BLOCKS[c][0] for c in _nemotron_pattern(v, layers)]


def _deci(v: ConfigView, layers: int) -> list[str]:
    return ["none" if deci_attention(b) is None else "full_attention" for b in deci_blocks(v, layers)]


# Rules that override layer_types (their configs spell layers another way), and rules used only without it.
_MIXER_RULES = {"minimax": _minimax, "mimo_v2": _mimo_v2, "jamba": _jamba, "falcon_h1": _falcon_h1,
                "nemotron_h": _nemotron_h, "deci": _deci}
_FALLBACK_RULES = {"mistral": _mistral, "qwen2": _qwen2, "gemma2": _gemma2, "gemma3": _gemma3,
                   "qwen3_next": _qwen3_next, "mimo_v2": _mimo_v2_default}


def _nemotron_pattern(v: ConfigView, layers: int) -> str:
    pattern = str(v.num("hybrid_override_pattern", ""))
    if len(pattern) != layers or set(pattern) - set(NEMOTRON_BLOCKS):
        raise UnreadableArchitecture(
            f"hybrid_override_pattern '{pattern[:40]}' does not describe {layers} layers of M/*/-/E blocks.",
            "Use a catalog alias (specplug models search TEXT) for this model.",
        )
    return pattern


def deci_blocks(v: ConfigView, layers: int) -> list[dict[str, Any]]:
    blocks = v.num("block_configs")
    if not isinstance(blocks, list) or len(blocks) != layers:
        raise UnreadableArchitecture("block_configs does not list one block per layer.",
                                     "Use a catalog alias (specplug models search TEXT) for this model.")
    return blocks


def deci_attention(block: dict[str, Any]) -> int | None:
    """A DeciLM block's heads per KV group (None: no attention in this block)."""
    attn = block.get("attention") or {}
    if attn.get("no_op") or attn.get("replace_with_linear"):
        return None
    return int(attn.get("n_heads_in_group") or 1)


def _ffns(v: ConfigView, layers: int, experts: int) -> list[str]:
    """Each layer's feed-forward kind: a dense MLP, routed experts, both, or none."""
    layout = v.spec.layout if v.spec else "plain"
    if layout == "nemotron_h":
        return [NEMOTRON_BLOCKS[c][1] for c in _nemotron_pattern(v, layers)]
    if layout == "deci":
        return ["none" if (b.get("ffn") or {}).get("no_op") else "dense" for b in deci_blocks(v, layers)]
    if experts <= 1:
        return ["dense"] * layers
    if v.model_type == "gemma4_text":
        return ["dense+moe" if v.num("enable_moe_block", True) else "dense"] * layers
    moe = _moe_layers(v, layers)
    return ["moe" if moe[i] else "dense" for i in range(layers)]


def _moe_layers(v: ConfigView, layers: int) -> list[bool]:
    types = v.num("mlp_layer_types")
    if isinstance(types, list) and len(types) == layers:
        return [t == "sparse" for t in types]
    freq = v.num("moe_layer_freq")
    if isinstance(freq, list) and len(freq) == layers:
        return [bool(f) for f in freq]
    if v.raw("decoder_sparse_step")[0] is not None or v.raw("mlp_only_layers")[0] is not None:
        step, dense = int(v.num("decoder_sparse_step", 1) or 1), set(v.num("mlp_only_layers", []) or [])
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]
    if v.raw("first_k_dense_replace")[0] is not None:
        k, every = int(v.num("first_k_dense_replace")), int(freq if isinstance(freq, int) and freq > 0 else 1)
        return [i >= k and i % every == 0 for i in range(layers)]
    if v.raw("interleave_moe_layer_step")[0] is not None:
        step = int(v.num("interleave_moe_layer_step") or 1)
        return [(i + 1) % step == 0 for i in range(layers)]
    if v.raw("expert_layer_period")[0] is not None:
        period, offset = int(v.num("expert_layer_period")), int(v.num("expert_layer_offset", 0))
        return [i % period == offset for i in range(layers)]
    if v.raw("moe_layer_interval")[0] is not None:
        start, interval = int(v.num("moe_layer_start_index", 0)), int(v.num("moe_layer_interval", 1))
        end = int(v.num("moe_layer_end_index", layers - 1))
        end = layers - 1 if end < 0 else end
        return [(i + 1) % interval == 0 and start <= i <= end for i in range(layers)]
    return [True] * layers


def layers(v: ConfigView, count: int, experts: int) -> list[Layer]:
    """Every layer's mixer and feed-forward kind."""
    return [Layer(m, f) for m, f in zip(_mixers(v, count), _ffns(v, count, experts), strict=True)]
