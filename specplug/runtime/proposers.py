"""Where draft tokens come from. Every proposer speaks the same small protocol, so the engine does not care.

A proposer sees the batch's token histories (prompt + generated, per row) and is told, after each
verification, how many of its drafts each row kept and which token the target added. Proposers with their
own model keep their own KV cache and roll it back on rejection. A head-based proposer (Medusa, EAGLE) fits
the same protocol: it would read the target's hidden states handed to it in ``commit``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from specplug.runtime.cache import KVState
from specplug.runtime.decoder import lean as lean_decoder
from specplug.runtime.sampling import RowGenerators, sample


@dataclass
class Draft:
    """``tokens`` ``(B, k)``; ``n`` ``(B,)`` how many are real per row; ``probs`` ``(B, k, V)`` or None (point mass)."""

    tokens: torch.Tensor
    n: torch.Tensor
    probs: torch.Tensor | None = None
    # Per row, how long a context match found the draft (prompt lookup; 0: none). A longer match is a surer
    # draft, so pacing keeps its acceptance apart. None for proposers without one.
    match: list[int] | None = None
    # The proposal first fed the proposer a backlog of history (a fresh batch's prompts, or what was emitted
    # while it drafted nothing): its time is a one-off catch-up, not what drafting costs per column.
    backlog: bool = False


class Proposer(Protocol):
    name: str
    # True when proposing costs next to nothing (no model): the engine then drafts up to k and picks how much
    # of it to verify after seeing the drafts (see specplug.runtime.pacing).
    free: bool

    def start(self, prompts: list[list[int]]) -> None:
        """New rows join the batch (appended after the current ones), with their prompts."""

    def propose(self, histories: list[list[int]], ks: list[int], warp: Any, generator: torch.Generator | None) -> Draft:
        """Up to ``ks[b]`` tokens for row b. ``warp(logits, rows)`` turns draft logits into probabilities.

        A proposer with ``guided = True`` also takes ``guide``: called before each draft position with the tokens
        drafted at the previous one (None first), it returns ``(B, V)`` bool, the tokens a structured-output
        grammar allows there; the proposer drafts only those (q over allowed tokens). Point-mass proposers need no
        guide: the target's mask rejects a forbidden draft.
        """

    def commit(self, n_accepted: torch.Tensor, next_tokens: torch.Tensor) -> None:
        """After verification: row b kept ``n_accepted[b]`` drafts, then the target added ``next_tokens[b]``."""

    def select(self, rows: torch.Tensor) -> None:
        """Only ``rows`` stay in the batch."""


class NgramProposer:
    """Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens and copy what followed.

    Tries n from ``max_match`` down to ``min_match``. An index per n maps each n-gram to the latest position
    after it, updated incrementally, so a lookup is a few dict probes instead of a scan of the history.

    While the text goes on as its last draft's source did (every draft kept, and the target's next token the
    source's next one too), the next draft goes on copying from there rather than from the latest match: text
    that copies a passage keeps copying it, while the latest match may sit in another passage sharing a few tokens.
    """

    name = "ngram"
    free = True

    def __init__(self, min_match: int = 2, max_match: int = 4) -> None:
        if not 1 <= min_match <= max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {min_match}, {max_match}")
        self.min_match = min_match
        self.max_match = max_match
        self._index: list[list[dict[tuple[int, ...], int]]] = []
        self._indexed: list[int] = []
        # Per row, where its last draft was copied from: (source position, history length then, match length).
        self._source: list[tuple[int, int, int] | None] = []

    def start(self, prompts: list[list[int]]) -> None:
        for _ in prompts:
            self._index.append([{} for _ in range(self.max_match + 1)])
            self._indexed.append(0)
            self._source.append(None)

    def _update(self, row: int, hist: list[int]) -> None:
        index = self._index[row]
        # Index n-grams ending at e for every e that has a continuation (e < len(hist)).
        for e in range(max(self._indexed[row], 1), len(hist)):
            for n in range(self.min_match, min(self.max_match, e) + 1):
                index[n][tuple(hist[e - n : e])] = e
        self._indexed[row] = max(self._indexed[row], len(hist))

    def match(self, row: int, hist: list[int], k: int) -> tuple[int, list[int]]:
        """(length of the longest match, up to ``k`` tokens that followed it); (0, []) when nothing matches."""
        n, e = self._find(row, hist)
        return n, hist[e : e + k]

    def _find(self, row: int, hist: list[int]) -> tuple[int, int]:
        """(length of the longest match, position after its latest occurrence); (0, len(hist)) for none."""
        self._update(row, hist)
        index = self._index[row]
        for n in range(min(self.max_match, len(hist)), self.min_match - 1, -1):
            e = index[n].get(tuple(hist[-n:]))
            if e is not None:
                return n, e
        return 0, len(hist)

    def _draft(self, row: int, hist: list[int], k: int) -> tuple[int, list[int]]:
        """Like :meth:`match`, but going on from the last draft's source while the text still follows it."""
        src = self._source[row]
        if src is not None:
            e, then, n = src
            grown = len(hist) - then
            if grown > 0 and e + grown < len(hist) and hist[e : e + grown] == hist[then:]:
                self._source[row] = (e + grown, len(hist), n)
                return min(self.max_match, n + grown), hist[e + grown : e + grown + k]
        n, e = self._find(row, hist)
        self._source[row] = (e, len(hist), n) if n else None
        return n, hist[e : e + k]

    def propose(self, histories: list[list[int]], ks: list[int], warp: Any, generator: torch.Generator | None) -> Draft:
        found = [self._draft(b, h, k) if k > 0 else (0, []) for b, (h, k) in enumerate(zip(histories, ks, strict=True))]
        width = max((len(d) for _, d in found), default=0)
        tokens = torch.zeros(len(found), width, dtype=torch.long)
        for b, (_, d) in enumerate(found):
            if d:
                tokens[b, : len(d)] = torch.tensor(d)
        n = torch.tensor([len(d) for _, d in found], dtype=torch.long)
        return Draft(tokens, n, None, [m if d else 0 for m, d in found])

    def commit(self, n_accepted: torch.Tensor, next_tokens: torch.Tensor) -> None:
        return None

    def select(self, rows: torch.Tensor) -> None:
        keep = rows.tolist()
        self._index = [self._index[r] for r in keep]
        self._indexed = [self._indexed[r] for r in keep]
        self._source = [self._source[r] for r in keep]


def vocab_ids(vocab: list[int], size: int) -> torch.Tensor:
    """``vocab`` as a tensor of token ids, checked: at least one, distinct, each in [0, ``size``)."""
    if not vocab or len(set(vocab)) != len(vocab) or min(vocab) < 0 or max(vocab) >= size:
        raise ValueError(f"a draft vocabulary must be distinct token ids in [0, {size}), at least one")
    return torch.tensor(vocab, dtype=torch.long)


# The most history a drafter reads to catch up after drafting nothing for a while (see ``propose``); a fresh
# batch's prompts are read whole.
CATCH_UP_MAX = 128


class DraftModelProposer:
    """A smaller causal LM with the target's tokenizer drafts k tokens autoregressively from its own KV cache.

    The cache holds every committed token except the last one or two (``pending``), which are fed at the start
    of the next proposal together with the drafting, so a round costs k draft forwards and no re-feeding. A
    fresh batch's prompts wait in ``pending`` too, and steps that draft nothing only add to it (a backlog past
    :data:`CATCH_UP_MAX` restarts the drafter from the latest tokens).

    ``vocab`` (token ids) makes the drafter draft only those tokens, as EAGLE-3's draft vocabulary and FR-Spec
    do: its distribution q is taken over them (zero elsewhere), so verification stays exact, and its LM head
    multiplies only their rows. Why: the head of a small drafter is much of its cost, while the tokens a text is
    made of are mostly few.
    """

    name = "draft_model"
    free = False
    guided = True

    def __init__(
        self,
        model: Any,
        device: torch.device,
        min_confidence: float = 0.4,
        lean: bool = True,
        vocab: list[int] | None = None,
    ) -> None:
        size = model.config.vocab_size
        self.vocab_size = size
        self.vocab = None if vocab is None else vocab_ids(vocab, size).to(device)
        self.model = lean_decoder(model, self.vocab) if lean else model
        # Where the model scores every token (not a lean decoder), the proposer keeps the vocabulary's columns.
        self._pick = self.vocab is not None and getattr(self.model, "vocab", None) is None
        self.device = device
        # A row stops drafting after a token where its drafter's distribution peaks below this probability, the
        # token kept (as transformers' assistant_confidence_threshold: it is verified for a column of the target's
        # pass, nearly free, and the drafter's pass is already paid). The rule reads only the drafter's
        # distribution, so it stays lossless.
        self.min_confidence = min_confidence
        self.kv = KVState(self.model, 0, device)
        self.pending: list[list[int]] = []
        self._drafted: torch.Tensor | None = None
        self._fed_drafts = 0

    def start(self, prompts: list[list[int]]) -> None:
        new = KVState(self.model, len(prompts), self.device)
        if self.kv.length == 0:
            # Nothing fed yet: the prompts wait in ``pending`` for the first proposal, which feeds them as one
            # left-padded block (what a prefill would do). A drafter the pacer never asks to draft never runs.
            self.kv.merge(new)
            self.pending.extend([list(p) for p in prompts])
            return
        # Joining a batch that is already drafting: prefill now, so the others' caches gain no padding columns.
        _prefill(new, [p[:-1] for p in prompts], self.device)
        self.kv.merge(new)
        self.pending.extend([p[-1:] for p in prompts])

    @torch.inference_mode()
    def propose(
        self, histories: list[list[int]], ks: list[int], warp: Any, generator: torch.Generator | None,
        guide: Callable[[torch.Tensor | None], torch.Tensor] | None = None,
    ) -> Draft:
        b = len(histories)
        k = max(ks, default=0)
        if k == 0:
            self._drafted = None
            return Draft(torch.zeros(b, 0, dtype=torch.long), torch.zeros(b, dtype=torch.long), None)
        width = max(len(p) for p in self.pending)
        if self.kv.length and width > CATCH_UP_MAX:
            # Idle for long (the pacer judged drafting useless, and now probes it): restart from each row's latest
            # text, since a full catch-up grows with the wait. Drafts from a shorter context stay exact.
            self.kv = KVState(self.model, b, self.device)
            self.pending = [list(h[-CATCH_UP_MAX:]) for h in histories]
            width = max(len(p) for p in self.pending)
        backlog = width > 2  # steady state feeds the last one or two committed tokens
        tokens = torch.zeros(b, width, dtype=torch.long)
        mask = torch.zeros(b, width, dtype=torch.bool)
        for r, p in enumerate(self.pending):
            tokens[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = True
        tokens, mask = tokens.to(self.device), mask.to(self.device)
        logits = self._logits(self.kv.forward(tokens, None if bool(mask.all()) else mask, last_only=True))
        limit = torch.tensor(ks, dtype=torch.long, device=self.device)
        n = torch.zeros(b, dtype=torch.long, device=self.device)
        alive = torch.ones(b, dtype=torch.bool, device=self.device)
        out_tokens, out_probs = [], []
        fed = 0
        for i in range(k):
            any_allowed = None
            if guide is not None:
                logits, any_allowed = self._constrain(logits, guide(out_tokens[-1] if out_tokens else None))
            probs = warp(logits)
            if probs is None:
                tok = logits.argmax(-1)
                conf = logits.float().softmax(-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1) if self.min_confidence else None
            else:
                # Rows past their own draft length draw nothing, so a row's draws are those it makes alone.
                drawing = (alive & (limit > i)).tolist() if isinstance(generator, RowGenerators) else None
                tok = sample(probs, generator, drawing)
                out_probs.append(probs)
                # The distribution's peak, not the drawn token's probability: whether a token is submitted
                # must not depend on which token was drawn, or the proposal is no longer q (not lossless).
                conf = probs.max(-1).values
            if self.vocab is not None:
                tok = self.vocab[tok]  # column -> token id
            out_tokens.append(tok)
            alive &= limit > i
            if any_allowed is not None:
                # No draft-vocabulary token is allowed here: the row stops drafting before this token (a rule that
                # reads only the grammar's state, not the draw, so it stays lossless).
                alive &= any_allowed
            n += alive.long()
            if conf is not None:
                alive &= conf >= self.min_confidence
            if i + 1 == k or not bool(alive.any()):
                break
            logits = self._logits(self.kv.forward(tok.unsqueeze(1)))
            fed += 1
        self._fed_drafts = fed
        self._drafted = torch.stack(out_tokens, 1)
        width = int(n.max())
        probs_out = torch.stack(out_probs, 1)[:, :width] if out_probs else None
        if probs_out is not None and self.vocab is not None:
            # The verifier reads q over the whole vocabulary: zero outside the draft vocabulary.
            full = probs_out.new_zeros(*probs_out.shape[:-1], self.vocab_size)
            probs_out = full.index_copy_(-1, self.vocab, probs_out)
        return Draft(self._drafted[:, :width], n, probs_out, backlog=backlog)

    def _constrain(self, logits: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``logits`` over the drafter's columns masked to the grammar's ``allowed`` tokens, and per row whether any
        column is allowed (a row with none keeps its logits and must stop drafting)."""
        cols = allowed.to(logits.device)
        cols = cols.index_select(-1, self.vocab) if self.vocab is not None else cols[:, : logits.shape[-1]]
        if cols.shape[-1] < logits.shape[-1]:  # a drafter with a wider head than the target: those ids are never text
            cols = torch.nn.functional.pad(cols, (0, logits.shape[-1] - cols.shape[-1]))
        some = cols.any(-1)
        masked = logits.masked_fill(~cols & some.unsqueeze(-1), float("-inf"))
        return masked, some

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """The last column's logits, over the draft vocabulary when there is one."""
        logits = out[:, -1]
        return logits.index_select(-1, self.vocab) if self._pick else logits

    def commit(self, n_accepted: torch.Tensor, next_tokens: torch.Tensor) -> None:
        acc = n_accepted.tolist()
        nxt = next_tokens.tolist()
        if self._drafted is None:
            self.pending = [p + [t] for p, t in zip(self.pending, nxt, strict=True)]
            return
        fed = self._fed_drafts
        # The cache now holds pending + the first ``fed`` drafts; a row keeps the drafts it accepted.
        if fed:
            self._rollback_drafts(torch.tensor([min(a, fed) for a in acc], device=self.device), fed)
        drafted = self._drafted.tolist()
        self.pending = [([row[fed]] if a > fed else []) + [t] for row, a, t in zip(drafted, acc, nxt, strict=True)]
        self._drafted = None

    def _rollback_drafts(self, keep: torch.Tensor, fed: int) -> None:
        # The drafts went in one column per forward; roll them back as one block of ``fed`` columns.
        self.kv._last_n = fed
        self.kv.rollback(keep)

    def select(self, rows: torch.Tensor) -> None:
        self.kv.select(rows.to(self.device))
        keep = rows.tolist()
        self.pending = [self.pending[r] for r in keep]


def _prefill(kv: KVState, seqs: list[list[int]], device: torch.device) -> torch.Tensor | None:
    """Feed left-padded ``seqs`` into an empty ``kv``; returns the last column's logits ``(B, 1, V)``."""
    width = max((len(s) for s in seqs), default=0)
    if width == 0:
        return None
    tokens = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for r, s in enumerate(seqs):
        if s:
            tokens[r, width - len(s) :] = torch.tensor(s)
            mask[r, width - len(s) :] = True
    with torch.inference_mode():
        return kv.forward(tokens.to(device), None if bool(mask.all()) else mask.to(device), last_only=True)
