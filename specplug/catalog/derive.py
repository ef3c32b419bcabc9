"""Facts of a model from its config.json: sizes, layer kinds, the KV cache one token adds, parameter counts.

``derive(config)`` returns every fact the Model dataclass holds with the config key (or the rule) it came from.
Parameter counts cover embeddings, LM head, attention / linear-attention / Mamba mixers, MLPs, experts and
routers; norms and biases are left out (well under 0.1%), and so are MTP modules and vision / audio towers,
as the catalog's figures do. ``layout`` says what each layer is; a model type outside ``archs.ARCHS`` is refused,
never guessed at.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from specplug.catalog.archs import ARCHS
from specplug.catalog.layout import (
    ConfigView,
    Layer,
    UnreadableArchitecture,
    at,
    deci_attention,
    deci_blocks,
    first,
    layers,
)

# Mixers with query/key/value projections; all but lightning attention also keep a KV cache.
_ATTENTION_MIXERS = ("full_attention", "sliding_attention", "lightning", "parallel")


@dataclass
class Facts:
    values: dict[str, Any] = field(default_factory=dict)  # Model field -> value
    basis: dict[str, str] = field(default_factory=dict)  # Model field -> the config key or rule it came from


# ------------------------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class _Dims:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    gated_mlp: bool


def _attention_params(v: ConfigView, d: _Dims, kind: str, i: int, reuses_kv: bool = False) -> tuple[int, int]:
    """(parameters, KV values per token) of layer ``i``'s attention of ``kind``; a layer that ``reuses_kv`` of an
    earlier one (Gemma 3n's last layers) has no K and V projections and caches nothing."""
    h = d.hidden
    if v.num("kv_lora_rank") is not None:  # multi-head latent attention: one compressed latent per token
        qr, kr = v.num("q_lora_rank"), int(v.num("kv_lora_rank"))
        nope, rope = int(v.num("qk_nope_head_dim")), int(v.num("qk_rope_head_dim"))
        vd = int(v.num("v_head_dim") or nope)
        q = h * qr + qr * d.heads * (nope + rope) if qr else h * d.heads * (nope + rope)
        return q + h * (kr + rope) + kr * d.heads * (nope + vd) + d.heads * vd * h, kr + rope
    heads, kv, hd, vd = d.heads, d.kv_heads, d.head_dim, d.v_head_dim
    k_eq_v = False
    if kind == "sliding_attention" and v.num("swa_num_key_value_heads") is not None:  # MiMo-V2's wider SWA layers
        heads = int(v.num("swa_num_attention_heads", heads))
        kv, hd = int(v.num("swa_num_key_value_heads")), int(v.num("swa_head_dim", hd))
        vd = int(v.num("swa_v_head_dim", vd))
    if kind == "full_attention" and v.num("num_global_key_value_heads") is not None:  # Gemma 4's global layers
        kv, hd, vd = int(v.num("num_global_key_value_heads")), int(v.num("global_head_dim", hd)), int(v.num("global_head_dim", vd))
        k_eq_v = bool(v.num("attention_k_eq_v", False))
    if v.spec and v.spec.layout == "deci":
        group = deci_attention(deci_blocks(v, int(v.get("num_layers")[0]))[i]) or 1
        kv = heads // group
    if kind == "lightning":  # MiniMax's lightning attention: a K and V per head, and an output gate
        return h * heads * hd * 3 + heads * vd * h + h * heads * hd, 0
    q_out = heads * hd * (2 if v.num("attn_output_gate", False) else 1)  # a gated output doubles q_proj
    if reuses_kv:
        return h * q_out + heads * vd * h, 0
    params = h * q_out + h * kv * hd + (0 if k_eq_v else h * kv * vd) + heads * vd * h
    # K and V are both cached even where V is K (Gemma 4 global layers): the stacks allocate both.
    return params, kv * (hd + vd)


def _linear_attention_params(v: ConfigView, h: int) -> int:
    """A Gated DeltaNet layer (Qwen3-Next, Qwen3.5): q/k/v/z and b/a projections, short conv, output."""
    nk, dk = int(v.num("linear_num_key_heads")), int(v.num("linear_key_head_dim"))
    nv, dv = int(v.num("linear_num_value_heads")), int(v.num("linear_value_head_dim"))
    conv = int(v.num("linear_conv_kernel_dim", 4))
    return h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + (2 * nk * dk + nv * dv) * conv + nv * dv * h


def _mamba2_params(v: ConfigView, h: int) -> int:
    heads = int(v.num("mamba_n_heads") or v.num("mamba_num_heads"))
    head = v.num("mamba_d_head") or v.num("mamba_head_dim")
    inner = v.num("mamba_d_ssm") or (heads * int(head) if head and head != "auto" else 0)
    inner = int(inner or int(v.num("mamba_expand", 2)) * h)
    groups = int(v.num("mamba_n_groups") or v.num("n_groups") or 1)
    state = int(v.num("mamba_d_state") or v.num("ssm_state_size") or 128)
    conv = int(v.num("mamba_d_conv") or v.num("conv_kernel") or 4)
    return h * (2 * inner + 2 * groups * state + heads) + (inner + 2 * groups * state) * conv + inner * h + 3 * heads + inner


def _mamba1_params(v: ConfigView, h: int) -> int:
    inner = int(v.num("mamba_expand", 2)) * h
    state, conv = int(v.num("mamba_d_state", 16)), int(v.num("mamba_d_conv", 4))
    rank = v.num("mamba_dt_rank", "auto")
    rank = -(-h // 16) if rank == "auto" else int(rank)
    return h * 2 * inner + inner * conv + inner * (rank + 2 * state) + rank * inner + inner * state + inner * h


def _mlp(d: _Dims, width: int, size: int) -> int:
    return (3 if d.gated_mlp else 2) * width * size


@dataclass
class _Count:
    total: int = 0
    routed: int = 0  # routed-expert parameters, of which experts_per_token / experts are active per token
    kv_values: int = 0
    sliding_kv_values: int = 0
    attention_layers: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


def _count(v: ConfigView, d: _Dims, kinds: list[Layer], experts: int) -> _Count:
    c = _Count()
    h = d.hidden
    dense_size = v.num("dense_intermediate_size") or v.num("intermediate_size_mlp") or v.get("intermediate_size")[0]
    if v.model_type == "granitemoehybrid":
        dense_size = v.num("shared_intermediate_size") or dense_size  # Granite 4's MLP is its "shared" one
    expert_size = first(v.get("moe_intermediate_size")[0] or v.get("intermediate_size")[0])
    latent = v.num("moe_latent_size")
    shared_n = v.get("moe_shared_experts")[0]
    shared_size = v.get("shared_expert_intermediate_size")[0]
    kv_shared_from = len(kinds) - int(v.num("num_kv_shared_layers", 0) or 0)  # Gemma 3n reuses earlier layers' KV
    for i, layer in enumerate(kinds):
        c.kinds[layer.mixer] = c.kinds.get(layer.mixer, 0) + 1
        if layer.mixer in _ATTENTION_MIXERS:
            kind = "full_attention" if layer.mixer == "parallel" else layer.mixer
            params, kv = _attention_params(v, d, kind, i, reuses_kv=i >= kv_shared_from)
            c.total += params
            if kv:
                c.kv_values += kv
                c.attention_layers += 1
                if layer.mixer == "sliding_attention":
                    c.sliding_kv_values += kv
        if layer.mixer == "linear_attention":
            c.total += _linear_attention_params(v, h)
        if layer.mixer in ("mamba", "parallel"):
            c.total += _mamba2_params(v, h)
        if layer.mixer == "mamba1":
            c.total += _mamba1_params(v, h)
        if layer.mixer == "none" and v.spec and v.spec.layout == "deci":
            attn = (deci_blocks(v, len(kinds))[i].get("attention") or {})
            c.total += h * h if attn.get("replace_with_linear") else 0
        if "dense" in layer.ffn:
            c.total += _mlp(d, h, _dense_size(v, d, dense_size, i))
        if "moe" in layer.ffn:
            width = int(latent or h)
            routed = experts * _mlp(d, width, int(at(expert_size, i)))
            n_shared = at(shared_n, i)
            size = at(shared_size, i) or (int(n_shared or 0) * int(at(expert_size, i)))
            c.total += routed + _mlp(d, h, int(size or 0)) + h * experts + (2 * h * int(latent) if latent else 0)
            c.routed += routed
    return c


def _gemma_extras(v: ConfigView, h: int, n_layers: int) -> int:
    """Gemma 3n / 4 additions: per-layer input gates and projections, LAuReL low-rank blocks, AltUp predictors."""
    per_layer = int(v.num("hidden_size_per_layer_input", 0) or 0)
    rank, streams = int(v.num("laurel_rank", 0) or 0), int(v.num("altup_num_inputs", 0) or 0)
    extra = n_layers * (2 * h * per_layer + 2 * h * rank) + h * n_layers * per_layer
    if streams:
        extra += n_layers * (h * streams + streams**3 + streams**2) + 2 * (streams - 1) * h * h
    return extra


def _dense_size(v: ConfigView, d: _Dims, size: Any, i: int) -> int:
    if v.spec and v.spec.layout == "deci":
        ffn = deci_blocks(v, int(v.get("num_layers")[0]))[i].get("ffn") or {}
        if ffn.get("replace_with_linear"):
            return d.hidden // (3 if d.gated_mlp else 2)  # one hidden x hidden linear in place of the MLP
        mult = float(ffn.get("ffn_mult") or 1.0)
        width = int(2 * mult * d.hidden / 3)
        return width + (-width % 256)  # DeciLM rounds the MLP width up to a multiple of 256
    return int(at(size, i) or 0)


# ------------------------------------------------------------------------------------------- facts


def derive(cfg: dict[str, Any], source: str = "config.json") -> Facts:
    """Every fact of the Model dataclass that ``cfg`` (a parsed config.json) states or implies, with its basis."""
    v = ConfigView(cfg)
    if v.spec is None:
        arch = (cfg.get("architectures") or ["?"])[0]
        near = difflib.get_close_matches(v.model_type, list(ARCHS), n=3, cutoff=0.5)
        raise UnreadableArchitecture(
            f"specplug cannot read the architecture of this model: {source} says model_type '{v.model_type or '?'}' "
            f"({arch}), which is not among the {len(ARCHS)} model types it knows"
            + (f" (nearest: {', '.join(near)})." if near else "."),
            "Plan with a catalog alias of a model of the same architecture and size (specplug models search TEXT); "
            "specplug does not guess at layers it cannot read.",
        )
    f = Facts()

    def put(name: str, value: Any, where: str | None) -> Any:
        if value is not None:
            f.values[name] = value
            f.basis[name] = f"{source} {where}" if where else source
        return value

    hidden = put("hidden_size", *v.get("hidden_size"))
    n_layers = put("num_layers", *v.get("num_layers"))
    if not n_layers and isinstance(v.num("hybrid_override_pattern"), str):  # Nemotron-H: one block per character
        n_layers = put("num_layers", len(v.num("hybrid_override_pattern")), "hybrid_override_pattern (one block each)")
    heads = put("num_attention_heads", *v.get("num_attention_heads"))
    vocab = put("vocab_size", *v.get("vocab_size"))
    if not (hidden and n_layers and heads and vocab):
        missing = [k for k, x in (("hidden_size", hidden), ("num_hidden_layers", n_layers),
                                  ("num_attention_heads", heads), ("vocab_size", vocab)) if not x]
        raise UnreadableArchitecture(f"{source} lacks {', '.join(missing)}, so specplug cannot size this model.",
                                     "Use a catalog alias (specplug models search TEXT), or a complete config.json.")
    kv_heads, kv_where = v.get("num_kv_heads")
    head_dim, hd_where = v.get("head_dim")
    put("num_kv_heads", kv_heads or heads, kv_where or "num_attention_heads (no num_key_value_heads: one KV head per head)")
    hd = int(head_dim or hidden // heads)
    mla = v.num("kv_lora_rank") is not None
    if mla:
        nope, rope = int(v.num("qk_nope_head_dim")), int(v.num("qk_rope_head_dim"))
        put("head_dim", nope + rope, "qk_nope_head_dim + qk_rope_head_dim (MLA's query/key head)")
        for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            put(name, *v.get(name))
    else:
        put("head_dim", hd, hd_where or "hidden_size / num_attention_heads")
    put("intermediate_size", first(v.get("intermediate_size")[0]), v.get("intermediate_size")[1])
    put("max_position_embeddings", *v.get("max_position_embeddings"))
    tie, tie_where = v.get("tie_word_embeddings")
    put("tie_word_embeddings", bool(tie), tie_where or "tie_word_embeddings (absent: untied)")
    put("mtp_layers", int(v.get("mtp_layers")[0] or 0), v.get("mtp_layers")[1] or "no MTP key (none)")
    put("architecture", str((cfg.get("architectures") or [""])[0]), "architectures[0]")
    put("family", v.model_type, "model_type")

    experts = int(first(v.get("moe_num_experts")[0]) or 0)
    kinds = layers(v, int(n_layers), experts)
    spec = v.spec
    dims = _Dims(int(hidden), int(heads), int(kv_heads or heads), hd, int(v.num("v_head_dim") or hd), spec.mlp == "gated")
    count = _count(v, dims, kinds, experts)
    if spec.layout == "deci":  # heads per KV group differ block by block: state the most common KV head count
        groups = [g for b in deci_blocks(v, int(n_layers)) if (g := deci_attention(b))]
        common = max(set(groups), key=groups.count) if groups else 1
        put("num_kv_heads", int(heads) // common, "block_configs (the most common n_heads_in_group)")
    embed = int(vocab) * int(hidden) * (1 if tie else 2)
    per_layer_embed = int(v.num("vocab_size_per_layer_input", 0) or 0) * int(n_layers) * int(v.num("hidden_size_per_layer_input", 0) or 0)
    total = count.total + embed + per_layer_embed + _gemma_extras(v, int(hidden), int(n_layers))
    rule = f"computed from {source} (embeddings{' (tied)' if tie else ' + LM head'} + attention/mixers + MLP/experts + routers)"
    put("params_b", round(total / 1e9, 4), None)
    f.basis["params_b"] = rule
    if experts > 1 and any("moe" in x.ffn for x in kinds):
        per_token = first(v.get("moe_experts_per_token")[0])
        put("moe_num_experts", experts, v.get("moe_num_experts")[1])
        put("moe_experts_per_token", int(per_token or 1), v.get("moe_experts_per_token")[1])
        put("moe_intermediate_size", first(v.get("moe_intermediate_size")[0]) or f.values.get("intermediate_size"),
            v.get("moe_intermediate_size")[1] or v.get("intermediate_size")[1])
        shared = v.get("moe_shared_experts")[0]
        if shared is None and v.get("shared_expert_intermediate_size")[0]:
            shared = 1
        put("moe_shared_experts", int(first(shared) or 0), v.get("moe_shared_experts")[1] or "shared_expert_intermediate_size (one shared expert)")
        active = total - count.routed + count.routed * int(per_token or 1) / experts
        put("active_params_b", round(active / 1e9, 4), None)
        f.basis["active_params_b"] = rule.replace("routers)", "routers), top-k of the routed experts")
    if per_layer_embed:
        f.values["active_params_b"] = round((total - per_layer_embed) / 1e9, 4)  # gathered, not streamed, per token
        f.basis["active_params_b"] = rule + "; per-layer embeddings held but not read per token"
    put("kv_values_per_token", count.kv_values, None)
    f.basis["kv_values_per_token"] = f"computed from {source} (K+V or MLA latent of each layer that keeps a KV cache)"
    if count.attention_layers != n_layers:
        put("attention_layers", count.attention_layers, None)
        f.basis["attention_layers"] = f"{source} layer kinds: {_kinds_text(count.kinds)}"
    if count.sliding_kv_values:
        window, where = v.get("sliding_window")
        put("sliding_window", window, where)
        put("sliding_layers", count.kinds.get("sliding_attention", 0), None)
        f.basis["sliding_layers"] = f"{source} layer kinds: {_kinds_text(count.kinds)}"
        put("sliding_kv_values_per_token", count.sliding_kv_values, None)
        f.basis["sliding_kv_values_per_token"] = f.basis["kv_values_per_token"]
    f.values["layer_kinds"] = dict(count.kinds)
    f.basis["layer_kinds"] = f"{source} ({spec.layout} layout of {v.model_type})"
    return f


def _kinds_text(kinds: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in kinds.items())
