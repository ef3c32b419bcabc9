"""A lean forward pass for Llama-family decoders: transformers' arithmetic without its per-call machinery.

Why: on a CPU, a forward of SmolLM2-135M through transformers spends about as long in module dispatch, mask
building and cache concatenation as in the matrix products. This module runs the same operations, in the same
order and dtype, on the same weight tensors (shared, not copied), so its logits are bit-identical to the
transformers model's (``tests/runtime/test_decoder.py`` checks it) while a step costs far less. Its KV cache
(:class:`GrowCache`) writes new columns into preallocated room instead of concatenating the whole cache each
step, and rolls back by moving a length.

Architectures whose layers have exactly the Llama shape (q/k/v/o projections, optional biases, RMSNorm, gated
SiLU MLP, rotary positions) take this path; anything else (sliding windows, q/k norms, soft-capping, MoE)
keeps the transformers forward. The rotary table comes from the model's own rotary module, so every RoPE
scaling transformers knows is honoured.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

# model_type -> config attributes that must be unset for the Llama arithmetic to hold.
SUPPORTED = {
    "llama": (),
    "mistral": ("sliding_window",),
    "qwen2": ("use_sliding_window",),
}
_GROW = 256  # columns added per reallocation, at least


def unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot take the lean path, or None when it can."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in SUPPORTED:
        return f"architecture {mtype!r} is not one of {', '.join(SUPPORTED)}"
    for attr in SUPPORTED[mtype]:
        if getattr(cfg, attr, None):
            return f"{attr} is set"
    if (getattr(cfg, "pretraining_tp", 1) or 1) > 1:
        return "pretraining_tp > 1"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or layers is None or not hasattr(inner, "rotary_emb"):
        return "no model.layers / rotary_emb"
    attn_parts = ("q_proj", "k_proj", "v_proj", "o_proj")
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not all(hasattr(attn, p) for p in attn_parts):
            return "a layer without the Llama attention"
        if hasattr(attn, "q_norm") or hasattr(attn, "k_norm") or not hasattr(mlp, "gate_proj"):
            return "a layer with q/k norms or without a gated MLP"
    # Bit-identical logits need the same attention kernel transformers would call.
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        return f"attention implementation {getattr(cfg, '_attn_implementation', None)!r} is not sdpa"
    return None


class _Layer:
    """Keys and values of one layer: a view of the filled part of a preallocated buffer."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.kbuf, self.vbuf, self.length = keys, values, length

    @property
    def keys(self) -> torch.Tensor:
        return self.kbuf[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor:
        return self.vbuf[:, :, : self.length]


class GrowCache:
    """A KV cache that appends into spare room (grown geometrically) and crops by moving its length.

    Speaks the part of transformers' ``DynamicCache`` API that :class:`~specplug.runtime.cache.KVState` uses:
    ``update``, ``get_seq_length``, ``crop_to``, ``batch_select_indices`` and ``layers[i].keys/values``.
    """

    def __init__(self) -> None:
        self.layers: list[_Layer] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].length if len(self.layers) > layer_idx else 0

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        if layer_idx == len(self.layers):
            room = keys.shape[2] + _GROW
            kb = keys.new_empty(keys.shape[0], keys.shape[1], room, keys.shape[3])
            vb = values.new_empty(values.shape[0], values.shape[1], room, values.shape[3])
            self.layers.append(_Layer(kb, vb, 0))
        layer = self.layers[layer_idx]
        start, n = layer.length, keys.shape[2]
        if start + n > layer.kbuf.shape[2]:
            room = max(2 * layer.kbuf.shape[2], start + n + _GROW)
            for name in ("kbuf", "vbuf"):
                old = getattr(layer, name)
                new = old.new_empty(old.shape[0], old.shape[1], room, old.shape[3])
                new[:, :, :start] = old[:, :, :start]
                setattr(layer, name, new)
        layer.kbuf[:, :, start : start + n] = keys
        layer.vbuf[:, :, start : start + n] = values
        layer.length = start + n
        return layer.keys, layer.values

    def crop_to(self, length: int) -> None:
        for layer in self.layers:
            layer.length = min(layer.length, length)

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        for layer in self.layers:
            layer.kbuf = layer.kbuf[rows]
            layer.vbuf = layer.vbuf[rows]

    @classmethod
    def from_kv(cls, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> GrowCache:
        cache = cls()
        for i, (k, v) in enumerate(kv):
            cache.update(k, v, i)
        return cache


@dataclass
class _Weights:
    in_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    qb: torch.Tensor | None
    kb: torch.Tensor | None
    vb: torch.Tensor | None
    ob: torch.Tensor | None
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    in_eps: float
    post_eps: float


def _eps(norm: Any) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


class LeanDecoder(torch.nn.Module):
    """Wraps a Llama-family ``*ForCausalLM`` (see :func:`unsupported_reason`); called like it by ``KVState``."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"no lean path for this model: {reason}")
        self.hf = model  # a submodule, so parameters()/to() see the shared weights
        self.config = model.config
        self.generation_config = getattr(model, "generation_config", None)
        cfg = model.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.scaling = self.head_dim**-0.5
        inner = model.model
        self.rotary = inner.rotary_emb
        self.embed = inner.embed_tokens.weight
        self.final_norm, self.final_eps = inner.norm.weight, _eps(inner.norm)
        self.lm_head = model.lm_head.weight
        self.lm_bias = getattr(model.lm_head, "bias", None)
        self.weights = []
        for layer in inner.layers[: cfg.num_hidden_layers]:
            a, m = layer.self_attn, layer.mlp
            self.weights.append(
                _Weights(
                    layer.input_layernorm.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight,
                    a.q_proj.bias, a.k_proj.bias, a.v_proj.bias, a.o_proj.bias, layer.post_attention_layernorm.weight,
                    m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight,
                    _eps(layer.input_layernorm), _eps(layer.post_attention_layernorm),
                )
            )

    @staticmethod
    def new_cache() -> GrowCache:
        return GrowCache()

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # Exactly LlamaRMSNorm: statistics in float32, scale in the input dtype.
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(dtype)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: GrowCache | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        **_: Any,
    ) -> SimpleNamespace:
        """``input_ids`` ``(B, n)``; ``attention_mask`` ``(B, 1, n, C)`` (bool or additive) or None for causal."""
        b, n = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0).expand(b, n)
        h = self.embed.index_select(0, input_ids.reshape(-1)).view(b, n, -1)
        cos, sin = self.rotary(h, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask, causal = attention_mask, False
        if mask is None and n > 1:
            if past == 0:
                causal = True
            else:
                cols = torch.arange(past + n, device=input_ids.device)
                rows = torch.arange(past, past + n, device=input_ids.device)
                mask = cols.unsqueeze(0) <= rows.unsqueeze(1)
        gqa, groups = self.n_kv != self.n_heads, self.n_heads // self.n_kv
        # CUDA's fused kernels take grouped heads only without a mask (as transformers decides); the CPU kernel
        # takes both, and repeating would copy the whole cache every layer.
        repeat = mask is not None and input_ids.is_cuda
        for i, w in enumerate(self.weights):
            x = self._rms(h, w.in_norm, w.in_eps)
            q = F.linear(x, w.q, w.qb).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
            k = F.linear(x, w.k, w.kb).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
            v = F.linear(x, w.v, w.vb).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            if cache is not None:
                k, v = cache.update(k, v, i)
            if gqa and repeat:
                k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
            a = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, scale=self.scaling, enable_gqa=gqa and not repeat
            )
            h = h + F.linear(a.transpose(1, 2).reshape(b, n, -1), w.o, w.ob)
            x = self._rms(h, w.post_norm, w.post_eps)
            h = h + F.linear(F.silu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        h = self._rms(h, self.final_norm, self.final_eps)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        return SimpleNamespace(logits=F.linear(h, self.lm_head, self.lm_bias), cache=cache)


def lean(model: Any) -> Any:
    """``model`` wrapped in :class:`LeanDecoder` when its architecture allows, else ``model`` unchanged."""
    if isinstance(model, LeanDecoder) or unsupported_reason(model) is not None:
        return model
    return LeanDecoder(model)
