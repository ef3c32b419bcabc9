"""Prompt prefixes the target has already computed, kept as KV blocks so that a repeated prefix (a system prompt,
the earlier turns of a chat, a request sent again) is not computed again.

A prompt is cut into blocks of :data:`BLOCK` tokens; block i is found by the block before it and its own tokens, so
two prompts share exactly the blocks of their common prefix. Only whole blocks are kept, and a lookup leaves at
least the prompt's last token to compute (its logits give the first output token). Blocks are evicted least
recently used first, with every block that extends them, to stay within a byte budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

BLOCK = 16
ROOT = 0  # the parent id of every prompt's first block

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (1, kv_heads, tokens, head_dim)


@dataclass
class _Block:
    id: int
    key: tuple[int, tuple[int, ...]]  # (parent id, this block's tokens)
    kv: KV
    nbytes: int
    children: set[int] = field(default_factory=set)


class PrefixCache:
    """KV blocks of prompts the target has seen, at most ``budget_bytes`` of them."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._by_key: dict[tuple[int, tuple[int, ...]], _Block] = {}
        self._lru: OrderedDict[int, _Block] = OrderedDict()
        self._next_id = ROOT + 1
        self.nbytes = 0
        # What /metrics reports, as vLLM counts it: prompt tokens looked up, and those found.
        self.queried_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._lru)

    def lookup(self, tokens: list[int]) -> tuple[int, KV | None]:
        """The longest cached whole-block prefix of ``tokens`` that leaves one token or more to compute: its length
        and its KV, concatenated per layer (None when nothing is cached)."""
        found: list[_Block] = []
        parent = ROOT
        for start in range(0, (len(tokens) - 1) // BLOCK * BLOCK, BLOCK):
            block = self._by_key.get((parent, tuple(tokens[start : start + BLOCK])))
            if block is None:
                break
            found.append(block)
            parent = block.id
        if not found:
            return 0, None
        for block in found:
            self._lru.move_to_end(block.id)
        n = len(found) * BLOCK
        layers = len(found[0].kv)
        kv = [(torch.cat([b.kv[i][0] for b in found], dim=2), torch.cat([b.kv[i][1] for b in found], dim=2))
              for i in range(layers)]
        return n, kv

    def count(self, prompt_tokens: int, cached: int) -> None:
        """Count one prompt as looked up, ``cached`` of its tokens found (what /metrics reports)."""
        self.queried_tokens += prompt_tokens
        self.hit_tokens += cached

    def insert(self, tokens: list[int], kv: KV) -> None:
        """Keep the whole blocks of ``tokens``, whose KV is ``kv`` (``(1, heads, columns, dim)`` per layer, columns
        0.. of the prompt)."""
        parent = ROOT
        for start in range(0, len(tokens) // BLOCK * BLOCK, BLOCK):
            key = (parent, tuple(tokens[start : start + BLOCK]))
            block = self._by_key.get(key)
            if block is None:
                cols = slice(start, start + BLOCK)
                # A copy: the batch's cache is overwritten in place as it grows and crops.
                part = [(k[:, :, cols].clone(), v[:, :, cols].clone()) for k, v in kv]
                nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in part)
                if nbytes > self.budget:
                    return
                block = _Block(self._next_id, key, part, nbytes)
                self._next_id += 1
                self._by_key[key] = block
                if parent != ROOT and parent in self._lru:
                    self._lru[parent].children.add(block.id)
                self._lru[block.id] = block
                self.nbytes += nbytes
                self._evict(keep=block.id)
            else:
                self._lru.move_to_end(block.id)
            if block.id not in self._lru:  # evicted to make room for itself: nothing longer can be kept
                return
            parent = block.id

    def _evict(self, keep: int) -> None:
        while self.nbytes > self.budget and self._lru:
            oldest = next(iter(self._lru))
            if oldest == keep and len(self._lru) == 1:
                break
            self._drop(oldest if oldest != keep else list(self._lru)[1])

    def _drop(self, block_id: int) -> None:
        block = self._lru.pop(block_id, None)
        if block is None:
            return
        del self._by_key[block.key]
        self.nbytes -= block.nbytes
        parent = self._lru.get(block.key[0])
        if parent is not None:
            parent.children.discard(block_id)
        for child in list(block.children):  # unreachable without this block
            self._drop(child)
