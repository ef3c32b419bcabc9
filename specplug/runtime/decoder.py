"""A lean forward pass for Llama-family decoders: transformers' arithmetic without its per-call machinery.

On a CPU a small model's forward through transformers spends about as long in module dispatch, mask building
and cache concatenation as in the matrix products. This module runs the same arithmetic, in the same order and
dtype, on the same weights (logits bit-identical on a CPU with the weights as loaded; checked by
``tests/runtime/test_decoder.py``), with stacked projections, RoPE on q and k at once, and a KV cache
(:class:`GrowCache`) that writes into preallocated room and rolls back by moving a length.

On a CPU in float32 the weights are also re-laid for MKL (:data:`CPU_LAYOUT`, :data:`CPU_PACKED`), packed for
oneDNN for passes of several rows (:data:`ONEDNN_FROM_ROWS`: a batched step then costs about what a lone request's
does) and moved into huge pages (:data:`HUGE_PAGES`): logits then differ in the last bits, greedy tokens stay the
same (tested).

Only layers of exactly the Llama shape (q/k/v/o, optional biases, RMSNorm, gated SiLU MLP, rotary positions)
take this path; anything else keeps the transformers forward. The rotary table comes from the model's own
rotary module, so every RoPE scaling transformers knows is honoured.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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

# How a float32 decoder on a CPU stores each weight for ``x @ W.T``: "torch" as loaded (out, in); "transposed"
# (in, out), MKL's "NN" product, viewed by the parameters (no copy); "both" keeps a transposed copy too, used
# except at TORCH_LAYOUT_ROWS rows. Why: MKL's kernels for the two layouts win at different row counts
# (benchmarks/weight_layout.py measures which).
CPU_LAYOUT = {"qkv": "both", "o": "both", "gate_up": "both", "down": "torch", "lm_head": "both"}
TORCH_LAYOUT_ROWS = frozenset({2, 3})
# Weights also kept in MKL's packed format, for passes whose row count is a key of PACKED_ROWS (padded with zeros
# up to the value, the row count the pack was made for). Why: from about 4 rows MKL's unpacked kernels slow down
# while a packed product does not; benchmarks/weight_layout.py shows which weights gain.
CPU_PACKED = frozenset({"gate_up", "lm_head"})
PACKED_ROWS = {4: 5, 5: 5, 6: 8, 7: 8, 8: 8}
# Passes of at least this many rows multiply through oneDNN's packed weights (every weight kind), where torch has
# oneDNN; MKL's packs are then not made. Why: from 2 rows MKL's unpacked and packed kernels cost about twice a
# 1-row product on a small model, so a batch of 4 paid 2-2.5 times a lone request's step; oneDNN's blocked
# kernels read the weights once for all rows (benchmarks/step_profile.py shows the step by batch).
ONEDNN_FROM_ROWS = 2
# Bytes the "both" copies and the packs may add; beyond it the weights stay as loaded, since for a larger model
# memory matters more than a few percent.
CPU_COPY_BUDGET = 5 << 28


# On Linux the weights a CPU decode step streams are moved into 2 MB pages (MADV_HUGEPAGE, then MADV_COLLAPSE),
# since a step reads every weight once and 4 KB pages' TLB misses cost as much as the reading. Moving takes
# seconds, so it starts in a thread after HUGE_PAGES_AFTER forwards (or ``LeanDecoder.huge_pages_now``).
HUGE_PAGES = sys.platform.startswith("linux")
HUGE_PAGES_AFTER = 256
_HUGE = 2 << 20
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.madvise
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return call


def huge_pages(tensors: Iterable[torch.Tensor]) -> int:
    """Ask the kernel to back the CPU tensors' storage with 2 MB pages, where whole ones fit inside it; returns
    the bytes it moved into them now (0 where it cannot: another OS, THP off, an older kernel, GPU tensors, MKL
    packs). The values do not change."""
    madvise = _madvise() if HUGE_PAGES else None
    if madvise is None:
        return 0
    moved, seen = 0, set()
    for t in tensors:
        if t.device.type != "cpu":
            continue
        try:
            storage = t.untyped_storage()
        except (NotImplementedError, RuntimeError):  # an opaque tensor (an MKL pack)
            continue
        start = storage.data_ptr()
        lo, hi = -(-start // _HUGE) * _HUGE, (start + storage.nbytes()) // _HUGE * _HUGE
        if start in seen or hi <= lo:
            continue
        seen.add(start)
        madvise(lo, hi - lo, _MADV_HUGEPAGE)  # later faults here take huge pages
        if madvise(lo, hi - lo, _MADV_COLLAPSE) == 0:  # and the pages already here move now (Linux 6.1+)
            moved += hi - lo
    return moved


def _in_background(job: Callable[..., Any], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=job, args=args, name="specplug-huge-pages", daemon=True)
    thread.start()
    return thread


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
    if (getattr(cfg, "partial_rotary_factor", None) or 1.0) != 1.0:
        return "partial rotary embedding"
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
    """Keys and values of one layer: views of the filled part of one preallocated buffer.

    The buffer is ``(B, 2 * kv_heads, room, D)``, keys in the first ``kv_heads`` heads and values after them,
    so one copy writes both for a step (see ``LeanDecoder.forward``). It is the first ``rows`` rows of ``base``,
    whose spare rows let a joining request in without copying the others.
    """

    def __init__(self, buf: torch.Tensor, kv_heads: int, length: int) -> None:
        self.base, self.rows, self.kv_heads, self.length = buf, buf.shape[0], kv_heads, length

    @property
    def buf(self) -> torch.Tensor:
        return self.base if self.rows == self.base.shape[0] else self.base[: self.rows]

    @buf.setter
    def buf(self, value: torch.Tensor) -> None:
        self.base, self.rows = value, value.shape[0]

    @property
    def keys(self) -> torch.Tensor:
        return self.buf[:, : self.kv_heads, : self.length]

    @property
    def values(self) -> torch.Tensor:
        return self.buf[:, self.kv_heads :, : self.length]


class GrowCache:
    """A KV cache that appends into spare room (grown geometrically) and crops by moving its length.

    Speaks the part of transformers' ``DynamicCache`` API that :class:`~specplug.runtime.cache.KVState` uses:
    ``update``, ``get_seq_length``, ``crop_to``, ``batch_select_indices`` and ``layers[i].keys/values``.
    Buffers start zeroed, so a column no pass wrote is finite: a masked key's weight is then exactly zero (an
    uninitialised NaN would poison the sum).
    """

    def __init__(self) -> None:
        self.layers: list[_Layer] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].length if len(self.layers) > layer_idx else 0

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        b, heads, n, dim = keys.shape
        layer = self.reserve(layer_idx + 1, self.get_seq_length(layer_idx) + n, b, heads, dim, keys)[layer_idx]
        start = layer.length
        layer.buf[:, :heads, start : start + n] = keys
        layer.buf[:, heads:, start : start + n] = values
        layer.length = start + n
        return layer.keys, layer.values

    def reserve(self, layers: int, end: int, b: int, heads: int, dim: int, like: torch.Tensor) -> list[_Layer]:
        """Make the first ``layers`` layers hold at least ``end`` columns (filled ones kept); returns the layers."""
        while len(self.layers) < layers:
            self.layers.append(_Layer(like.new_zeros(b, 2 * heads, end + _GROW, dim), heads, 0))
        for layer in self.layers[:layers]:
            old = layer.buf
            if end > old.shape[2]:  # the spare rows stay spare
                layer.base = old.new_zeros(layer.base.shape[0], old.shape[1], max(2 * old.shape[2], end + _GROW),
                                           old.shape[3])
                layer.base[: layer.rows, :, : layer.length] = old[:, :, : layer.length]
        return self.layers

    def add_rows(self, k: int) -> None:
        """``k`` more rows after the others, in spare rows where there are some (else the rows are copied into a
        buffer with half as many again to spare). What a new row holds is zeros or rolled-back keys: finite, and
        masked until written."""
        for layer in self.layers:
            if layer.base.shape[0] < layer.rows + k:
                old, rows = layer.buf, layer.rows + k
                layer.base = old.new_zeros(rows + max(k, rows // 2), *old.shape[1:])
                layer.base[: layer.rows, :, : layer.length] = old[:, :, : layer.length]
            layer.rows += k

    def crop_to(self, length: int) -> None:
        for layer in self.layers:
            layer.length = min(layer.length, length)

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        """Keep ``rows``, in that order. Where they keep most rows in place and fill the places of departed ones
        with later rows (as ``DecodeBatch`` orders them, joining rows last), only the moved rows' filled columns
        move, in place, in order of their new places; where a move would read a row an earlier one wrote, every
        row is copied."""
        keep = rows.tolist()
        n = len(keep)
        moved = [(dst, src) for dst, src in enumerate(keep) if dst != src]
        written: set[int] = set()
        for dst, src in moved:
            if src in written:
                break
            written.add(dst)
        else:
            for layer in self.layers:
                for dst, src in moved:
                    layer.buf[dst, :, : layer.length] = layer.buf[src, :, : layer.length]
                layer.rows = n  # the rows past n stay spare
            return
        for layer in self.layers:
            layer.buf = layer.buf[rows]

    @classmethod
    def merged(cls, top: GrowCache, bottom: GrowCache) -> GrowCache:
        """``top``'s rows then ``bottom``'s, each right-aligned to the longer of the two (zeros on the left): one
        copy of each filled part into a new buffer."""
        out = cls()
        for a, b in zip(top.layers, bottom.layers, strict=True):
            width = max(a.length, b.length)
            ra = a.buf.shape[0]
            buf = a.buf.new_zeros(ra + b.buf.shape[0], a.buf.shape[1], width + _GROW, a.buf.shape[3])
            for part, layer in ((buf[:ra], a), (buf[ra:], b)):
                part[:, :, width - layer.length : width] = layer.buf[:, :, : layer.length]
            out.layers.append(_Layer(buf, a.kv_heads, width))
        return out

    @classmethod
    def from_kv(cls, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> GrowCache:
        cache = cls()
        for i, (k, v) in enumerate(kv):
            cache.update(k, v, i)
        return cache


class _Packed:
    """``x @ W.T`` through MKL's packed product, for inputs whose row count is a key of ``PACKED_ROWS``."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight  # MKL reads it only for a row count it was not packed for, which never comes
        w = weight.detach().contiguous()
        self.packs = {rows: torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for rows in set(PACKED_ROWS.values())}

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        m = x.shape[0]
        rows = PACKED_ROWS[m]
        if m < rows:
            x = torch.cat((x, x.new_zeros(rows - m, x.shape[1])))
        return torch.ops.mkl._mkl_linear(x, self.packs[rows], self.weight, bias, rows)[:m]


class _Onednn:
    """``x @ W.T`` through oneDNN, the weight reordered once into its blocked layout (any row count)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), 4)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, bias, "none", [], "")


@functools.cache
def _onednn_packing() -> bool:
    """Whether this torch build multiplies through oneDNN's packed linear (x86 and arm64 CPU builds do)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:  # some builds list the op but lack the kernel for float32
        w, x = torch.ones(8, 8), torch.ones(2, 8)
        return bool(torch.equal(_Onednn(w)(x), x @ w.t()))
    except (RuntimeError, NotImplementedError):
        return False


def _mkl_packing() -> bool:
    """Whether this torch build has MKL's packed product (x86 builds with MKL do)."""
    return bool(getattr(torch._C, "has_mkl", False)) and hasattr(torch.ops.mkl, "_mkl_linear")


def _pack_of(owner: Any, weight: torch.Tensor, wanted: bool) -> _Packed | None:
    """``weight`` packed for MKL when ``wanted``, kept on ``owner`` for other decoders over the model."""
    return _kept(owner, "_specplug_packed", weight, _Packed) if wanted else None


def _kept(owner: Any, name: str, weight: torch.Tensor, make: Callable[[torch.Tensor], Any]) -> Any:
    """``make(weight)``, remembered on ``owner`` as ``name`` while ``weight``'s storage stays the same."""
    cached = getattr(owner, name, None)
    if cached is None or cached[0] != weight.data_ptr():
        cached = (weight.data_ptr(), make(weight))
        setattr(owner, name, cached)
    return cached[1]


@dataclass
class _Weights:
    in_norm: torch.Tensor
    qkv: torch.Tensor  # q, k and v projections stacked (see _fuse)
    qkv_t: torch.Tensor  # the same values stored transposed (CPU_LAYOUT "both"), or qkv itself
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_t: torch.Tensor  # as qkv_t
    ob: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # gate and up projections stacked
    gate_up_t: torch.Tensor  # as qkv_t
    down: torch.Tensor
    in_eps: float
    post_eps: float
    packs: dict[str, _Packed]  # kind -> the weight packed for PACKED_ROWS rows (CPU_PACKED), where it is
    dnn: dict[str, _Onednn]  # kind -> the weight packed by oneDNN (ONEDNN_FROM_ROWS), where it is
    # alt (the pass's rows are not TORCH_LAYOUT_ROWS) -> kind -> the stored form to multiply by, as _rhs views
    rhs: dict[bool, dict[str, torch.Tensor]] = field(init=False)

    def __post_init__(self) -> None:
        plain = {"qkv": self.qkv, "o": self.o, "gate_up": self.gate_up, "down": self.down}
        alt = {**plain, "qkv": self.qkv_t, "o": self.o_t, "gate_up": self.gate_up_t}
        self.rhs = {a: {kind: _rhs(w) for kind, w in forms.items()} for a, forms in ((False, plain), (True, alt))}


def _rhs(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (out, in) as the right operand of ``x @ W.T``: a view, made once instead of every step."""
    return weight.detach().t()


def _linear(
    x: torch.Tensor, rhs: torch.Tensor, packed: _Packed | _Onednn | None, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``x @ rhs (+ bias)`` for a 2-D ``x`` and a weight's view ``rhs`` (:func:`_rhs`); through ``packed`` (the
    same weight packed by MKL) when given.

    The product ``F.linear`` makes for a 2-D input (``mm``, or ``addmm`` with a bias, on ``weight.t()``), so the
    same floats, without its three dispatches (linear, t, matmul) per call.
    """
    if packed is not None:
        return packed(x, bias)
    return torch.mm(x, rhs) if bias is None else torch.addmm(bias, x, rhs)


def _fuse(owner: Any, linears: list[Any], transposed: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for projections of the same input: one matrix product instead of several.

    Why: on a CPU every operator call costs microseconds, and a decode step makes hundreds of them. Each output
    row is the same dot product either way, so the logits stay bit-identical. The modules' own parameters become
    views into the stacked tensor, so no memory is duplicated; ``owner`` remembers it, so that several decoders
    over one model (several engines) share it too. ``transposed`` stores the stack as (in, out) (see
    :data:`CPU_LAYOUT`).
    """
    cached = getattr(owner, "_specplug_fused", None)
    if cached is not None and linears[0].weight.data_ptr() == cached[0].data_ptr():
        return cached
    weight = torch.cat([m.weight.detach() for m in linears])
    if transposed:
        weight = _transposed(weight)
    bias = None
    if any(m.bias is not None for m in linears):
        # A zero bias adds exact zeros to the rows that had none.
        bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0])
                          for m in linears])
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight.data = weight[start : start + rows]
        if m.bias is not None:
            m.bias.data = bias[start : start + rows]
        start += rows
    owner._specplug_fused = (weight, bias)
    return weight, bias


def _transposed(w: torch.Tensor) -> torch.Tensor:
    """``w``'s values stored (in, out), viewed as ``w``'s shape: ``F.linear`` then runs MKL's "NN" product."""
    return w.detach().t().contiguous().t()


def _relay(param: torch.nn.Parameter, transposed: bool) -> torch.nn.Parameter:
    """``param``, its storage made (in, out) when ``transposed``; the same values."""
    if transposed and param.data.is_contiguous():  # not already re-laid by another decoder over this model
        param.data = _transposed(param.data)
    return param


def _copy_of(owner: Any, weight: torch.Tensor, both: bool) -> torch.Tensor:
    """A transposed copy of ``weight`` when ``both`` (else ``weight``), kept on ``owner`` for other decoders."""
    return _kept(owner, "_specplug_transposed", weight, _transposed) if both else weight


def _eps(norm: Any) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


class _SubsetHead:
    """The LM head's rows for part of the vocabulary; owner of their transposed copy and packs (see ``_kept``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, vocab: torch.Tensor) -> None:
        ids = vocab.to(weight.device)
        self.weight = weight.detach().index_select(0, ids)
        self.bias = None if bias is None else bias.detach().index_select(0, ids)


def _subset_head(lm_head: Any, vocab: torch.Tensor) -> _SubsetHead:
    """``lm_head``'s rows for ``vocab``, made once per weight storage and vocabulary, shared by decoders over it."""
    key = (lm_head.weight.data_ptr(), tuple(vocab.tolist()))
    cached = getattr(lm_head, "_specplug_subset", None)
    if cached is None or cached[0] != key:
        cached = (key, _SubsetHead(lm_head.weight, getattr(lm_head, "bias", None), vocab))
        lm_head._specplug_subset = cached
    return cached[1]


@dataclass(frozen=True)
class _Run:
    """Rows ``r0:r1`` of a pass, fed in their first ``width`` columns: ``idx`` their fed columns in that grid (None:
    all), ``o0:o1`` their place in the packed hidden state, and their RoPE factors, mask and split."""

    r0: int
    r1: int
    width: int
    idx: torch.Tensor | None
    o0: int
    o1: int
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None
    split: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None


class LeanDecoder(torch.nn.Module):
    """Wraps a Llama-family ``*ForCausalLM`` (see :func:`unsupported_reason`); called like it by ``KVState``.

    ``vocab`` (token ids) makes the logits score only those tokens, column j for token ``vocab[j]``: a drafter's
    reduced vocabulary (see ``specplug.runtime.proposers.DraftModelProposer``), whose smaller head is most of
    what makes it cheaper. None scores the whole vocabulary.
    """

    def __init__(self, model: Any, vocab: torch.Tensor | None = None) -> None:
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
        self.vocab = None if vocab is None else vocab.to(model.lm_head.weight.device)
        subset = None if vocab is None else _subset_head(model.lm_head, vocab)
        head = model.lm_head.weight if subset is None else subset.weight
        layers = inner.layers[: cfg.num_hidden_layers]
        layout = dict(CPU_LAYOUT) if head.device.type == "cpu" and head.dtype == torch.float32 else {}
        dnn = bool(layout) and _onednn_packing()
        packed = set(CPU_PACKED) if layout and not dnn and _mkl_packing() else set()

        def numel(*paths: str) -> int:
            return sum(layer.get_submodule(p).weight.numel() for layer in layers for p in paths)

        sizes = {"lm_head": head.numel(), "gate_up": numel("mlp.gate_proj", "mlp.up_proj"),
                 "qkv": numel("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 "o": numel("self_attn.o_proj"), "down": numel("mlp.down_proj")}
        copies = sum(sizes[kind] for kind, how in layout.items() if how == "both")
        copies += sum(sizes[kind] for kind in packed) * len(set(PACKED_ROWS.values()))
        copies += sum(sizes.values()) if dnn else 0
        if copies * head.element_size() > CPU_COPY_BUDGET:
            layout = {kind: "torch" if how == "both" else how for kind, how in layout.items()}
            packed = set()
            # Batched passes gain most from oneDNN: it alone is kept where it alone fits.
            dnn = dnn and sum(sizes.values()) * head.element_size() <= CPU_COPY_BUDGET
        self.onednn = dnn
        t = {kind for kind, how in layout.items() if how == "transposed"}
        both = {kind for kind, how in layout.items() if how == "both"}
        self.rotary = inner.rotary_emb
        # Re-laid before the embedding is read: with tied embeddings the two are one parameter.
        # A subset head is not a parameter of the model: it is copied transposed where the model's is re-laid.
        head_owner = model.lm_head if subset is None else subset
        if subset is None:
            self.lm_head = _relay(head, "lm_head" in t)
        else:
            self.lm_head = _copy_of(subset, head, "lm_head" in t)
        self.lm_head_t = _copy_of(head_owner, self.lm_head, "lm_head" in both)
        self.lm_head_p = _pack_of(head_owner, self.lm_head, "lm_head" in packed)
        self.lm_head_dnn = _kept(head_owner, "_specplug_onednn", self.lm_head, _Onednn) if dnn else None
        self.head_rhs, self.head_t_rhs = _rhs(self.lm_head), _rhs(self.lm_head_t)
        self.lm_bias = getattr(model.lm_head, "bias", None) if subset is None else subset.bias
        self.embed = inner.embed_tokens.weight
        self.final_norm, self.final_eps = inner.norm.weight, _eps(inner.norm)
        self.weights = []
        for layer in layers:
            a, m = layer.self_attn, layer.mlp
            qkv, qkv_bias = _fuse(a, [a.q_proj, a.k_proj, a.v_proj], "qkv" in t)
            gate_up, _ = _fuse(m, [m.gate_proj, m.up_proj], "gate_up" in t)
            o, down = _relay(a.o_proj.weight, "o" in t), _relay(m.down_proj.weight, "down" in t)
            # Each pack is kept on the module that owns its weight, for other decoders over the model.
            owned = {"qkv": (a, qkv), "o": (a.o_proj, o), "gate_up": (m, gate_up), "down": (m.down_proj, down)}
            packs = {kind: _pack_of(owner, w, True) for kind, (owner, w) in owned.items() if kind in packed}
            dnns = {kind: _kept(owner, "_specplug_onednn", w, _Onednn) for kind, (owner, w) in owned.items()} if dnn else {}
            self.weights.append(
                _Weights(
                    layer.input_layernorm.weight, qkv, _copy_of(a, qkv, "qkv" in both), qkv_bias,
                    o, _copy_of(a.o_proj, o, "o" in both), a.o_proj.bias, layer.post_attention_layernorm.weight,
                    gate_up, _copy_of(m, gate_up, "gate_up" in both), down,
                    _eps(layer.input_layernorm), _eps(layer.post_attention_layernorm), packs, dnns,
                )
            )
        self.inter = self.weights[0].gate_up.shape[0] // 2 if self.weights else 0
        self._streamed: list[torch.Tensor] = []  # the weights to move into huge pages (see HUGE_PAGES)
        if head.device.type == "cpu" and HUGE_PAGES:
            self._streamed = [self.lm_head, self.lm_head_t]
            for w in self.weights:
                self._streamed += [w.qkv, w.qkv_t, w.o, w.o_t, w.gate_up, w.gate_up_t, w.down]
        self._huge_owner = head_owner
        self._forwards = 0
        self.huge_job: threading.Thread | None = None

    def huge_pages_now(self) -> threading.Thread | None:
        """Start moving the weights a step streams into huge pages (once per model: decoders over it share the
        job), in a thread; returns it (``join()`` waits), or None where there is nothing to move."""
        if self.huge_job is None and self._streamed:
            self.huge_job = _kept(self._huge_owner, "_specplug_huge", self.lm_head,
                                  lambda _: _in_background(huge_pages, self._streamed))
        return self.huge_job

    @staticmethod
    def new_cache() -> GrowCache:
        return GrowCache()

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # Exactly LlamaRMSNorm: statistics in float32, scale in the input dtype. In place where the tensor is this
        # function's own, to save torch's rms_norm's copies; ``h * w`` is the same float as ``w * h``.
        h = x if x.dtype == torch.float32 else x.to(torch.float32)
        squares = h.pow(2)
        # On a CPU ``mean`` is ``sum`` then ``div_`` by the count (torch's mean_out does exactly that), called
        # here directly: two dispatches fewer, same float. CUDA's mean is one fused kernel, so it stays.
        mean = squares.sum(-1, keepdim=True).div_(h.shape[-1]) if h.is_cpu else squares.mean(-1, keepdim=True)
        h = h * mean.add_(eps).rsqrt_()
        return h.mul_(weight) if x.dtype == torch.float32 else weight * h.to(x.dtype)

    @staticmethod
    def _split(
        fed: torch.Tensor, past: int, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None:
        """For a pass whose later columns only some rows feed (every row its first): those rows, and the masks of
        the first column's queries and of those rows' later ones; None where attention over the whole batch is
        no dearer (every row feeds a later column, or the first column is padding somewhere)."""
        later = fed[:, 1:].any(1)
        if bool(later.all()) or not bool(fed[:, 0].all()):
            return None
        rows = later.nonzero().squeeze(1)
        if mask is None or mask.dim() == 2:  # causal over a cache without holes
            return rows, None, None if mask is None else mask[1:]
        return rows, mask[:, :, :1, : past + 1], mask.index_select(0, rows)[:, :, 1:]

    def _runs(
        self, parts: Sequence[tuple[int, int]] | None, fed: torch.Tensor | None, idx: torch.Tensor | None, past: int,
        mask: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
    ) -> list[_Run]:
        """The pass's runs of rows (see ``forward``'s ``parts``; None: one run of the whole batch, whose fed columns
        are ``idx``), each with what its attention needs."""
        b, n = cos.shape[0], cos.shape[1]
        if parts is None:
            split = self._split(fed, past, mask) if idx is not None and n > 1 and past > 0 else None
            return [_Run(0, b, n, idx, 0, b * n if idx is None else idx.numel(), cos, sin, mask, split)]
        if fed is None or sum(r for r, _ in parts) != b:
            raise ValueError("parts need fed and must cover every row")
        out, r0, o0 = [], 0, 0
        for rows, width in parts:
            r1 = r0 + rows
            if bool(fed[r0:r1, width:].any()):
                raise ValueError(f"rows {r0}-{r1 - 1} feed columns past their run's width {width}")
            f = fed[r0:r1, :width]
            idx = f.reshape(-1).nonzero().squeeze(1)
            m = mask
            if mask is not None:
                m = mask[:width, : past + width] if mask.dim() == 2 else mask[r0:r1, :, :width, : past + width]
            split = self._split(f, past, m) if width > 1 and past > 0 else None
            o1 = o0 + idx.numel()
            out.append(_Run(r0, r1, width, idx, o0, o1, cos[r0:r1, :width], sin[r0:r1, :width], m, split))
            r0, o0 = r1, o1
        return out

    def _attend(
        self, qkv: torch.Tensor, run: _Run, buf: torch.Tensor, past: int, end: int, causal: bool, repeat: bool,
    ) -> torch.Tensor:
        """Attention of one run of rows: RoPE on its queries and keys, its keys and values into the cache, and its
        attention output for its fed columns ``(fed, heads * D)``."""
        heads, kv, dim = self.n_heads, self.n_kv, self.head_dim
        gqa, groups, half = kv != heads, heads // kv, dim // 2
        rows, width = run.r1 - run.r0, run.width
        qkv = qkv[run.o0 : run.o1]
        if run.idx is not None:
            qkv = qkv.new_zeros(rows * width, qkv.shape[1]).index_copy_(0, run.idx, qkv)
        qkv = qkv.view(rows, width, heads + 2 * kv, dim)
        # RoPE on q and k together, in place, so that the turned keys and the values sit side by side in qkv
        # and one copy puts both into the cache. Same products and sum as out of place.
        qk = qkv[:, :, : heads + kv]
        # rotate_half without its sign (carried by sin): qk rolled by half, as roll builds it on a CPU.
        turned = torch.cat((qk[..., half:], qk[..., :half]), -1).mul_(run.sin)
        qk.mul_(run.cos).add_(turned)
        buf = buf[run.r0 : run.r1] if rows != buf.shape[0] else buf
        top = past + width
        buf[:, :, past:top] = qkv[:, :, heads:].transpose(1, 2)
        k, v = buf[:, :kv, :top], buf[:, kv:, :top]
        if gqa and repeat:
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        q = qkv[:, :, :heads].transpose(1, 2)
        mask = run.mask
        if run.split is None:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scaling,
                                               enable_gqa=gqa and not repeat)
        else:
            # Every row's first column over the keys up to it; the later columns only of the rows that feed
            # them (a verification step where few rows carry drafts), over those rows' keys alone.
            later, mask0, mask_r = run.split
            a = q.new_zeros(q.shape)
            a[:, :, :1] = F.scaled_dot_product_attention(
                q[:, :, :1], k[:, :, : past + 1], v[:, :, : past + 1], attn_mask=mask0, scale=self.scaling,
                enable_gqa=gqa and not repeat)
            if later.numel():
                a[later, :, 1:] = F.scaled_dot_product_attention(
                    q[later, :, 1:], k.index_select(0, later), v.index_select(0, later), attn_mask=mask_r,
                    scale=self.scaling, enable_gqa=gqa and not repeat)
        a = a.transpose(1, 2).reshape(rows * width, -1)
        return a if run.idx is None else a.index_select(0, run.idx)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: GrowCache | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        fed: torch.Tensor | None = None,
        logits_at: torch.Tensor | None = None,
        parts: Sequence[tuple[int, int]] | None = None,
        **_: Any,
    ) -> SimpleNamespace:
        """``input_ids`` ``(B, n)``; ``attention_mask`` ``(B, 1, n, C)`` (bool or additive) or None for causal.

        ``fed`` ``(B, n)`` bool marks the columns to compute (None: all); the others are padding no query will
        attend to (a row's drafts shorter than the widest, a shorter prompt's left padding). Only fed columns go
        through the projections and the MLP, which are nearly all of a step's arithmetic; the others get zero
        keys and values and zero logits. With ``logits_to_keep`` the last column must be fed in every row.

        ``logits_at`` ``(B, n)`` bool, fed columns only: the columns whose logits are wanted (a pass that also feeds
        prompts wants none of a prompt's but its last). The logits are then ``(B, w, V)``, row b's wanted columns in
        order at ``[b, :count_b]`` and zeros after, ``w`` the most any row wants: no vocabulary projection and no
        ``(B, n, V)`` buffer for a long prompt's columns.

        ``parts`` ``[(rows, width), ...]`` (with ``fed``) cuts the batch into runs of rows, in order, whose fed columns
        all lie in their first ``width`` columns: each run's attention, keys and values span only those (running
        rows' one-token steps beside a joining prompt's chunk), not ``n`` columns for every row. The cache still
        grows by ``n`` columns; a run's columns past its width keep what the buffer held (zeros, or keys rolled back
        before: finite either way), which its queries never see and later ones see only where the row's mask
        says so.
        """
        b, n = input_ids.shape
        self._forwards += 1
        if self._forwards == HUGE_PAGES_AFTER:
            self.huge_pages_now()
        if cache is None:
            cache = GrowCache()
        past = cache.get_seq_length()
        end = past + n
        dev = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(past, end, device=dev).unsqueeze(0).expand(b, n)
        # The hidden state stays (rows, d) between layers, rows = B*n or the fed columns: a matrix product takes
        # it without reshaping.
        ids = input_ids.reshape(-1)
        idx = None if fed is None else fed.reshape(-1).nonzero().squeeze(1)
        h = self.embed.index_select(0, ids if idx is None else ids.index_select(0, idx))
        m = h.shape[0]
        cos, sin = self.rotary(h[:1].view(1, 1, -1), position_ids)
        half = self.head_dim // 2
        # (B, n, 1, D), broadcast over the heads of q and k at once. rotate_half(x) = cat(-x2, x1) is x rolled by
        # half with the first half negated; the sign moves into sin (-x * s and x * -s are the same float).
        cos = cos.unsqueeze(2)
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(2)
        mask, causal = attention_mask, False
        if mask is None and n > 1:
            if past == 0:
                causal = True
            else:
                cols = torch.arange(end, device=dev)
                rows = torch.arange(past, end, device=dev)
                mask = cols.unsqueeze(0) <= rows.unsqueeze(1)
        kv, dim, inter = self.n_kv, self.head_dim, self.inter
        # CUDA's fused kernels take grouped heads only without a mask (as transformers decides); the CPU kernel
        # takes both, and repeating would copy the whole cache every layer.
        repeat = mask is not None and input_ids.is_cuda
        layers = cache.reserve(len(self.weights), end, b, kv, dim, h)
        runs = self._runs(parts, fed, idx, past, mask, cos, sin)
        # Which stored form of a weight kept more than one way (CPU_LAYOUT, CPU_PACKED) this pass multiplies by.
        alt, pack = m not in TORCH_LAYOUT_ROWS, m in PACKED_ROWS
        dnn = self.onednn and m >= ONEDNN_FROM_ROWS
        for w, layer in zip(self.weights, layers, strict=False):
            x = self._rms(h, w.in_norm, w.in_eps)
            packs = w.dnn if dnn else w.packs if pack else {}
            rhs = w.rhs[alt]
            qkv = _linear(x, rhs["qkv"], packs.get("qkv"), w.qkv_bias)
            layer.length = end
            att = [self._attend(qkv, r, layer.buf, past, end, causal, repeat) for r in runs]
            # In place from here on: h is this forward's own tensor, and in-place ops skip an allocation each.
            h += _linear(att[0] if len(att) == 1 else torch.cat(att), rhs["o"], packs.get("o"), w.ob)
            x = self._rms(h, w.post_norm, w.post_eps)
            gu = _linear(x, rhs["gate_up"], packs.get("gate_up"))
            g = F.silu(gu[:, :inter], inplace=True).mul_(gu[:, inter:])
            h += _linear(g, rhs["down"], packs.get("down"))
        h = self._rms(h, self.final_norm, self.final_eps)
        keep = n
        place = None
        if logits_at is not None:
            want = logits_at.reshape(-1)
            h = h.index_select(0, (want if idx is None else want.index_select(0, idx)).nonzero().squeeze(1))
            keep = int(logits_at.sum(1).max()) if b else 0
            # Each wanted column's place in the (B, keep) output: its row, then its rank among the row's wanted.
            rank = logits_at.long().cumsum(1) - 1
            place = (torch.arange(b, device=dev).unsqueeze(1) * keep + rank)[logits_at]
            if not keep:  # a pass that only feeds a prompt's inner chunk
                return SimpleNamespace(logits=h.new_zeros(b, 0, 0), cache=cache)
        elif logits_to_keep:
            keep = min(logits_to_keep, n)
            if idx is None:
                h = h.view(b, n, -1)[:, -keep:].reshape(b * keep, -1)
            else:  # each row's last fed columns sit at the end of its run in h
                last = fed.sum(1).cumsum(0).unsqueeze(1) - torch.arange(keep, 0, -1, device=dev)
                h = h.index_select(0, last.reshape(-1))
        rows = h.shape[0]
        head = self.head_rhs if rows in TORCH_LAYOUT_ROWS else self.head_t_rhs
        packed = self.lm_head_dnn if self.onednn and rows >= ONEDNN_FROM_ROWS else (
            self.lm_head_p if rows in PACKED_ROWS else None)
        logits = _linear(h, head, packed, self.lm_bias)
        if place is not None:
            logits = logits.new_zeros(b * keep, logits.shape[1]).index_copy_(0, place, logits)
        elif idx is not None and not logits_to_keep:
            logits = logits.new_zeros(b * n, logits.shape[1]).index_copy_(0, idx, logits)
        return SimpleNamespace(logits=logits.view(b, keep, -1), cache=cache)


def lean(model: Any, vocab: torch.Tensor | None = None) -> Any:
    """``model`` wrapped in :class:`LeanDecoder` (scoring ``vocab``, or all tokens) when its architecture allows,
    else ``model`` unchanged (which scores every token)."""
    if isinstance(model, LeanDecoder):
        if vocab is None and model.vocab is None:
            return model
        model = model.hf
    if unsupported_reason(model) is not None:
        return model
    return LeanDecoder(model, vocab)
