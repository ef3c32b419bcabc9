"""A model's KV cache for a batch of sequences that advance at different speeds.

Rows share the cache's columns, but each row knows which columns hold its real tokens (``valid``) and its
own next position (``next_pos``). Left padding, tokens a row rejected while another row kept its drafts, and
rows merged in later are all just invalid columns that the attention mask hides, so nothing is ever re-fed.
Columns that no row needs any more at the end are cropped. With one row (or rows in lock-step) there are no
holes and the model runs its plain causal path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import DynamicCache

_TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def _cache_kwarg(model: Any) -> str:
    # transformers 5 renamed ``past_key_values`` to ``cache`` (the old name warns until 5.40).
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def crop_cache(cache: DynamicCache, new_length: int) -> None:
    """Keep the first ``new_length`` columns (transformers 4 took a length, 5 takes a negative count)."""
    if hasattr(cache, "crop_to"):  # GrowCache
        cache.crop_to(new_length)
        return
    current = cache.get_seq_length()
    if new_length >= current:
        return
    if _TRANSFORMERS_MAJOR >= 5:
        cache.crop(new_length - current)
    else:
        cache.crop(new_length)


def _kv_lists(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def _build_cache(kv: list[tuple[torch.Tensor, torch.Tensor]], kind: Callable[[], Any] = DynamicCache) -> Any:
    # ``update`` is the one way to fill a cache that both transformers 4 and 5 keep.
    cache = kind()
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


def packs(model: Any) -> bool:
    """Whether ``model`` computes only the columns it is told to (``fed``), as the lean decoder does."""
    return "fed" in inspect.signature(model.forward).parameters


class KVState:
    """One model's cache plus per-row bookkeeping; ``forward`` feeds new columns, ``rollback`` forgets some."""

    def __init__(self, model: Any, batch_size: int, device: torch.device) -> None:
        self.model = model
        self.device = device
        self._kw = _cache_kwarg(model)
        # SDPA/flex take a boolean mask; eager attention adds the mask to the scores.
        self._additive = getattr(model.config, "_attn_implementation", "sdpa") == "eager"
        self._dtype = next(model.parameters()).dtype
        # A lean decoder brings its own cache type (see specplug.runtime.decoder).
        self._cache_kind = model.new_cache if hasattr(model, "new_cache") else DynamicCache
        self._packs = packs(model)
        self.cache = self._cache_kind()
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)
        self.next_pos = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.holes = False
        self._last_n = 0
        self._added: torch.Tensor | None = None  # real tokens per row of the last masked forward

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor | None = None, last_only: bool = False,
        fed: torch.Tensor | None = None, logits_at: torch.Tensor | None = None,
        parts: list[tuple[int, int]] | None = None,
    ) -> torch.Tensor:
        """Feed ``tokens`` ``(B, n)``; ``mask`` ``(B, n)`` marks real tokens (None: all real). Returns logits.

        With ``last_only`` only the last column's logits are computed (prefill), which skips most of the
        vocabulary projection. ``fed`` ``(B, n)`` marks the real tokens whose logits are wanted; the others are
        padding that the next ``rollback`` drops (a row with fewer drafts than the widest). A model that packs
        (the lean decoder) computes neither those nor ``mask``'s padding; their logits are then zero.
        ``logits_at`` (a model that packs only) asks for some fed columns' logits alone, packed to the left per row,
        and ``parts`` (with ``fed``) cuts the rows into runs fed in fewer columns (see
        :meth:`specplug.runtime.decoder.LeanDecoder.forward`).
        """
        b, n = tokens.shape
        start = self.length
        if mask is None:
            new_valid = torch.ones(b, n, dtype=torch.bool, device=self.device)
            positions = self.next_pos.unsqueeze(1) + torch.arange(n, device=self.device)
            added = n
        else:
            new_valid = mask
            positions = (self.next_pos.unsqueeze(1) + mask.long().cumsum(1) - 1).clamp_min(0)
            added = mask.sum(1)
            if not bool(mask.all()):
                self.holes = True
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        attn = self._mask(start, n) if self.holes else None
        if attn is not None and self._additive:
            attn = torch.zeros(attn.shape, dtype=self._dtype, device=self.device).masked_fill(
                ~attn, torch.finfo(self._dtype).min
            )
        extra = {}
        if self._packs:
            # A row with nothing to feed (an empty prompt part) still needs its last column's logits computed.
            skip = mask if mask is not None and not bool(mask.all()) and bool(mask[:, -1].all()) else None
            if fed is not None and not bool(fed.all()):
                skip = fed if skip is None else skip & fed
            if skip is not None:
                extra["fed"] = skip
            if logits_at is not None:
                extra["logits_at"] = logits_at
            if parts is not None:
                extra["fed"], extra["parts"] = fed, parts
        elif logits_at is not None or parts is not None:
            raise ValueError("logits_at and parts need a model that packs (the lean decoder)")
        out = self.model(
            input_ids=tokens,
            position_ids=positions,
            attention_mask=attn,
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
            **{self._kw: self.cache},
            **extra,
        )
        self.next_pos = self.next_pos + added
        self._last_n = n
        self._added = None if mask is None else added
        return out.logits

    def _mask(self, start: int, n: int) -> torch.Tensor:
        # (B, 1, n, C) boolean, True = may attend. Every query sees itself so that a padding query never has an
        # all-masked row (SDPA would return NaN there, and NaN keys poison later queries even when masked).
        cols = torch.arange(start + n, device=self.device)
        rows = torch.arange(start, start + n, device=self.device).unsqueeze(1)
        causal = cols.unsqueeze(0) <= rows
        diag = cols.unsqueeze(0) == rows
        return ((self.valid.unsqueeze(1) & causal.unsqueeze(0)) | diag.unsqueeze(0)).unsqueeze(1)

    def seed(self, kvs: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Start an empty state from columns computed before: row b's cached prompt prefix ``kvs[b]``
        (``(1, heads, n_b, dim)`` per layer), real tokens at positions 0..n_b-1, shorter ones left-padded."""
        lens = [kv[0][0].shape[2] for kv in kvs]
        width = max(lens)
        layers = []
        for i in range(len(kvs[0])):
            ks, vs = [], []
            for kv, n in zip(kvs, lens, strict=True):
                k, v = kv[i]
                if n < width:
                    k = torch.cat([k.new_zeros(1, k.shape[1], width - n, k.shape[3]), k], dim=2)
                    v = torch.cat([v.new_zeros(1, v.shape[1], width - n, v.shape[3]), v], dim=2)
                ks.append(k)
                vs.append(v)
            layers.append((torch.cat(ks), torch.cat(vs)))
        self.cache = _build_cache(layers, self._cache_kind)
        n = torch.tensor(lens, dtype=torch.long, device=self.device)
        self.valid = torch.arange(width, device=self.device).unsqueeze(0) >= (width - n).unsqueeze(1)
        self.next_pos = n
        self.holes = any(x != width for x in lens)

    def row_kv(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row ``row``'s real columns, in order, per layer (keys, values) ``(1, heads, columns, dim)``."""
        kv = _kv_lists(self.cache)
        if not self.holes:
            return [(k[row : row + 1], v[row : row + 1]) for k, v in kv]
        cols = self.valid[row].nonzero().squeeze(1)
        return [(k[row : row + 1, :, cols], v[row : row + 1, :, cols]) for k, v in kv]

    def rollback(self, keep: torch.Tensor) -> None:
        """Of the columns the last ``forward`` added, keep the first ``keep[b]`` for row b; forget the rest.

        Each row's real tokens come first in those columns (verification's drafts, a prompt's chunk), so that the
        first ``keep[b]`` of them are real.
        """
        n = self._last_n
        start = self.length - n
        added = n if self._added is None else self._added
        self.next_pos = self.next_pos - (added - keep)
        cols = torch.arange(n, device=self.device).unsqueeze(0)
        self.valid[:, start:] &= cols < keep.unsqueeze(1)
        max_keep = int(keep.max()) if keep.numel() else 0
        if bool((keep != max_keep).any()):
            self.holes = True
        crop_cache(self.cache, start + max_keep)
        self.valid = self.valid[:, : start + max_keep]
        self._last_n = 0
        self._added = None

    def compact(self, rows: list[int], counts: list[int], ahead: list[int]) -> None:
        """Move each of ``rows``' last ``counts`` real columns (what the last forward fed it: a prompt chunk beside
        decoding rows, which left those columns empty) left, so that with the ``ahead`` tokens still to come after
        them they would end where the other rows end, as far as the row's earlier columns allow; then drop the
        columns no row uses. A prompt fed beside a running batch, in one chunk or several, thus widens the cache by
        no more than the batch's own steps meanwhile, as if it had been left-padded to the batch's length."""
        if not rows:
            return
        last = self.length - 1 - self.valid.flip(1).long().argmax(1)  # each row's last real column
        last = torch.where(self.valid.any(1), last, -1).tolist()
        moving = set(rows)
        end = max((last[r] + 1 for r in range(self.batch_size) if r not in moving), default=0)
        kv = _kv_lists(self.cache)
        new_end = end
        for r, n, to_come in zip(rows, counts, ahead, strict=True):
            src = last[r] + 1 - n
            before = self.valid[r, :src].nonzero()
            dst = max(int(before[-1]) + 1 if before.numel() else 0, end - n - to_come)
            if dst < src:
                for k, v in kv:
                    k[r, :, dst : dst + n] = k[r, :, src : src + n].clone()
                    v[r, :, dst : dst + n] = v[r, :, src : src + n].clone()
                self.valid[r, src : src + n] = False
                self.valid[r, dst : dst + n] = True
                self.holes = True
            new_end = max(new_end, min(dst, src) + n)
        if new_end < self.length:
            crop_cache(self.cache, new_end)
            self.valid = self.valid[:, :new_end]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (finished or cancelled sequences leave the batch)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.next_pos = self.next_pos[rows]
        # Columns that every remaining row ignores (left padding of a departed long prompt) can go.
        if self.valid.numel() and self.holes:
            first = int(self.valid.any(0).long().argmax())
            if first > 0:
                self.cache = _build_cache(
                    [(k[:, :, first:], v[:, :, first:]) for k, v in _kv_lists(self.cache)], self._cache_kind
                )
                self.valid = self.valid[:, first:]
            if bool(self.valid.all()):
                self.holes = False

    def merge(self, other: KVState) -> None:
        """Append ``other``'s rows to this batch, padding the shorter cache on the left with invalid columns."""
        if not self.batch_size:
            # Nothing to pad against: take the other's cache as it is (no copy, and a lone batch has no holes).
            self.cache, self.valid, self.next_pos, self.holes = other.cache, other.valid, other.next_pos, other.holes
            return
        la, lb = self.length, other.length
        if la and not lb and hasattr(self.cache, "add_rows"):
            # Rows with nothing cached yet (prompts that join in the batch's passes): no other row moves.
            self.cache.add_rows(other.batch_size)
            self.valid = torch.cat([self.valid, self.valid.new_zeros(other.batch_size, la)])
            self.next_pos = torch.cat([self.next_pos, other.next_pos])
            self.holes = True
            return
        width = max(la, lb)
        merged = getattr(type(self.cache), "merged", None)
        if width and merged is not None and type(other.cache) is type(self.cache) and la and lb:
            self.cache = merged(self.cache, other.cache)  # a lean decoder's cache pads and stacks in one copy
        elif width:
            a = _kv_lists(self.cache) if la else None
            b = _kv_lists(other.cache) if lb else None
            template = a if a is not None else b
            kv = []
            for i, (kt, vt) in enumerate(template):
                parts_k, parts_v = [], []
                for src, rows, cols in ((a, self.batch_size, la), (b, other.batch_size, lb)):
                    k = src[i][0] if src is not None else kt.new_zeros(rows, kt.shape[1], 0, kt.shape[3])
                    v = src[i][1] if src is not None else vt.new_zeros(rows, vt.shape[1], 0, vt.shape[3])
                    if cols < width:
                        k = torch.cat([k.new_zeros(rows, k.shape[1], width - cols, k.shape[3]), k], dim=2)
                        v = torch.cat([v.new_zeros(rows, v.shape[1], width - cols, v.shape[3]), v], dim=2)
                    parts_k.append(k)
                    parts_v.append(v)
                kv.append((torch.cat(parts_k), torch.cat(parts_v)))
            self.cache = _build_cache(kv, self._cache_kind)
        fa = torch.zeros(self.batch_size, width - la, dtype=torch.bool, device=self.device)
        fb = torch.zeros(other.batch_size, width - lb, dtype=torch.bool, device=self.device)
        self.valid = torch.cat([torch.cat([fa, self.valid], 1), torch.cat([fb, other.valid], 1)])
        self.next_pos = torch.cat([self.next_pos, other.next_pos])
        if la != lb or self.holes or other.holes:
            self.holes = True
