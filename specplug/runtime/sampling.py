"""Turning logits into the distribution tokens are drawn from: temperature, top-k, top-p.

Target and draft logits go through the same function, so the verifier compares the two distributions the
user asked for (speculative sampling is lossless only with respect to the warped target distribution).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specplug.errors import SpecplugError

# Below this temperature sampling is greedy: logits / T would overflow to inf (NaN probabilities), and the
# distribution is a point mass on the argmax anyway (vLLM uses the same cut-off).
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``temperature`` 0 (below ``GREEDY_BELOW``) is greedy; top-k 0 and top-p 1.0 are off."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise SpecplugError(f"temperature must be >= 0, got {self.temperature}.", "Use 0 for greedy.")
        if self.top_k < 0:
            raise SpecplugError(f"top-k must be >= 0, got {self.top_k}.", "Use 0 to turn top-k off.")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecplugError(f"top-p must be in (0, 1], got {self.top_p}.", "Use 1.0 to turn top-p off.")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def warp_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities (float32, last dim = vocabulary) after temperature, top-k and top-p, in that order.

    The order matches transformers' default logits processors, so sampling here and in ``generate`` agree.
    Greedy (temperature 0) is a point mass on the argmax.
    """
    if logits.dim() == 1:
        return RowWarper([params], logits.device)(logits.unsqueeze(0)).squeeze(0)
    return RowWarper([params] * logits.shape[0], logits.device)(logits)


class RowWarper:
    """``warp_probs`` with its own parameters for each row of a batch (requests in one batch may differ)."""

    def __init__(self, params: list[SamplingParams], device: torch.device) -> None:
        self.params = params
        self.all_greedy = all(p.greedy for p in params)
        self.any_greedy = any(p.greedy for p in params)
        temps = [p.temperature if not p.greedy else 1.0 for p in params]
        self.temps = torch.tensor(temps, dtype=torch.float32, device=device)
        self.greedy_rows = torch.tensor([p.greedy for p in params], dtype=torch.bool, device=device)
        self.top_k = [p.top_k for p in params]
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        self.use_top_k = any(p.top_k > 0 for p in params)
        self.use_top_p = any(p.top_p < 1.0 for p in params)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` ``(B, ..., V)`` -> probabilities of the same shape."""
        logits = logits.float()
        shape = (-1,) + (1,) * (logits.dim() - 1)
        x = logits / self.temps.view(shape)
        vocab = x.shape[-1]
        if self.use_top_k:
            kmax = min(max(self.top_k), vocab)
            top = torch.topk(x, kmax, dim=-1).values
            idx = torch.tensor([min(k, vocab) - 1 if k > 0 else kmax - 1 for k in self.top_k], device=x.device)
            kth = top.gather(-1, idx.view(shape).expand(*top.shape[:-1], 1))
            off = torch.tensor([k <= 0 for k in self.top_k], device=x.device).view(shape)
            x = x.masked_fill((x < kth) & ~off, float("-inf"))
        if self.use_top_p:
            sorted_x, order = torch.sort(x, dim=-1, descending=False)
            cum = sorted_x.softmax(-1).cumsum(-1)
            # Drop the low tail whose total mass is <= 1 - top_p; the most likely token always stays.
            drop_sorted = cum <= (1.0 - self.top_p).view(shape)
            drop_sorted[..., -1] = False
            drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
            x = x.masked_fill(drop, float("-inf"))
        probs = x.softmax(-1)
        if self.any_greedy:
            onehot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
            probs = torch.where(self.greedy_rows.view(shape), onehot, probs)
        return probs

    def select(self, rows: list[int]) -> RowWarper:
        return RowWarper([self.params[r] for r in rows], self.temps.device)


class RowGenerators:
    """One random generator per batch row, used wherever a single generator would be.

    Why: requests decoded together would otherwise share one stream of random numbers, so a seeded request's
    tokens would depend on which others ran beside it. Each row draws only from its own generator, and only as
    many numbers as it would alone (its own drafts, not the batch's widest).
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.generators = generators

    def __len__(self) -> int:
        return len(self.generators)

    def uniform(self, n: list[int], width: int, device: torch.device) -> torch.Tensor:
        """``(B, width)`` uniforms, ``n[i]`` of them drawn from row i's generator and the rest of the row 1.0."""
        out = torch.ones(len(n), width, device=device)
        for i, (g, count) in enumerate(zip(self.generators, n, strict=True)):
            if count:
                out[i, :count] = torch.rand(count, generator=g, device=device)
        return out

    def multinomial(self, probs: torch.Tensor, rows: list[bool] | None = None) -> torch.Tensor:
        """One token per row of ``probs`` ``(B, V)``, each drawn from its row's generator; rows marked False in
        ``rows`` draw nothing (their token is 0)."""
        out = torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
        for i, g in enumerate(self.generators):
            if rows is None or rows[i]:
                out[i] = torch.multinomial(probs[i], 1, generator=g)[0]
        return out


def sample(
    probs: torch.Tensor, generator: torch.Generator | RowGenerators | None, rows: list[bool] | None = None
) -> torch.Tensor:
    """One token per row of ``probs`` (shape ``(..., V)``), returned with shape ``probs.shape[:-1]``.

    With :class:`RowGenerators` ``probs`` is ``(B, V)``, and rows marked False in ``rows`` draw nothing.
    """
    if isinstance(generator, RowGenerators):
        return generator.multinomial(probs, rows)
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator)
    return out.reshape(probs.shape[:-1])


def hold_stop_tokens(logits: torch.Tensor, produced: list[int], min_tokens: list[int], stop_ids: list[frozenset[int]]) -> torch.Tensor:
    """vLLM's ``min_tokens``: each row's stop tokens get -inf logits at the positions before its min_tokens-th output.

    ``logits`` ``(B, W, V)``: column ``j`` of row ``i`` scores output token ``produced[i] + j`` (0-based), so a
    draft-and-verify pass and plain decoding mask the same positions, and verification compares drafts against
    the distribution plain decoding samples from. Applied to raw logits, before temperature, top-k and top-p,
    as vLLM's logits processors are. Modifies ``logits`` in place and returns it.
    """
    width, vocab = logits.shape[1], logits.shape[-1]
    for i, (done, least, ids) in enumerate(zip(produced, min_tokens, stop_ids, strict=True)):
        cols = min(least - done, width)
        if cols <= 0 or not ids:
            continue
        idx = torch.tensor(sorted(t for t in ids if 0 <= t < vocab), dtype=torch.long, device=logits.device)
        logits[i, :cols, idx] = float("-inf")
    return logits


@dataclass(frozen=True)
class TokenLogprob:
    """One output token's log-probability, and the ``top`` likeliest tokens at its position (id, logprob)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logprobs: torch.Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """``logprobs`` ``(n, V)`` log-softmax rows, ``tokens`` the n tokens output at them -> one entry per token."""
    n = len(tokens)
    rows = logprobs[:n]
    chosen = rows[torch.arange(n, device=rows.device), torch.tensor(tokens, device=rows.device)].tolist()
    if top <= 0:
        return [TokenLogprob(t, lp) for t, lp in zip(tokens, chosen, strict=True)]
    values, ids = rows.topk(min(top, rows.shape[-1]), dim=-1)
    return [
        TokenLogprob(t, lp, tuple(zip(i, v, strict=True)))
        for t, lp, i, v in zip(tokens, chosen, ids.tolist(), values.tolist(), strict=True)
    ]
