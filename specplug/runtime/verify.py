"""Deciding how many drafted tokens the target keeps, and which token it adds.

Given the target's logits at the k+1 verified positions, ``verify`` returns, per row, the number of accepted
draft tokens ``a`` and the one extra token the target contributes at position ``a`` (a correction after a
rejection, or the bonus token when all drafts were accepted). Rows may carry fewer drafts than the widest row
(``n_draft``); positions past a row's own drafts are never accepted.

Greedy: accept while the draft equals the target's argmax. Sampling (Leviathan et al. 2023, Chen et al. 2023):
accept draft token x with probability min(1, p(x)/q(x)); on the first rejection draw from the normalised
max(0, p - q); if all are accepted draw the bonus from p. A proposer without probabilities (n-gram) is a point
mass q = 1[x = draft], which makes the residual p with the draft token removed. The output distribution is
exactly the (warped) target distribution, whatever the draft.
"""

from __future__ import annotations

import torch

from specplug.runtime.sampling import RowGenerators, RowWarper, SamplingParams, sample


def verify(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    n_draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    params: SamplingParams | RowWarper,
    generator: torch.Generator | RowGenerators | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(n_accepted, next_token)``, both shape ``(B,)``.

    ``target_logits``: ``(B, k+1, V)``, logits after the last committed token and after each draft token.
    ``draft_tokens``: ``(B, k)``; ``n_draft``: ``(B,)`` how many of them are real for each row.
    ``draft_probs``: ``(B, k, V)`` warped draft distributions, or None for a point-mass draft.
    ``params``: one ``SamplingParams`` for all rows, or a ``RowWarper`` with each row's own.
    ``generator``: one for the batch, or :class:`RowGenerators` (each row draws from its own, as many numbers as
    it has drafts, so its tokens do not depend on the other rows).
    """
    warper = params if isinstance(params, RowWarper) else RowWarper([params] * target_logits.shape[0], target_logits.device)
    k = draft_tokens.shape[1]
    if warper.all_greedy:
        best = target_logits.argmax(-1)
        probs = None
        ok = draft_tokens == best[:, :k]
    else:
        probs = warper(target_logits)
        p_draft = probs[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
        if draft_probs is None:
            q_draft = torch.ones_like(p_draft)
        else:
            q_draft = draft_probs.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
        if isinstance(generator, RowGenerators):
            u = generator.uniform(n_draft.tolist(), k, p_draft.device)
        else:
            u = torch.rand(p_draft.shape, generator=generator, device=p_draft.device)
        # u < p/q written without the division; q > 0 because the draft token was drawn from q.
        ok = u * q_draft < p_draft
    positions = torch.arange(k, device=draft_tokens.device)
    ok &= positions.unsqueeze(0) < n_draft.unsqueeze(1)
    n_acc = ok.long().cumprod(1).sum(1) if k else torch.zeros_like(n_draft)

    if probs is None:
        return n_acc, best.gather(1, n_acc.unsqueeze(1)).squeeze(1)

    rows = torch.arange(probs.shape[0], device=probs.device)
    p_at = probs[rows, n_acc]
    rejected = n_acc < n_draft
    if k and bool(rejected.any()):
        at = n_acc.clamp(max=k - 1)
        if draft_probs is None:
            q_at = torch.zeros_like(p_at)
            q_at[rows, draft_tokens[rows, at]] = 1.0
        else:
            q_at = draft_probs[rows, at].float()
        resid = (p_at - q_at).clamp_min(0.0)
        mass = resid.sum(-1, keepdim=True)
        # mass == 0 only when p == q up to rounding, where a rejection had probability ~0; p is then exact.
        resid = torch.where(mass > 0, resid / mass.clamp_min(1e-30), p_at)
        p_at = torch.where(rejected.unsqueeze(1), resid, p_at)
    return n_acc, sample(p_at, generator)
