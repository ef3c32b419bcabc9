"""Acceptance per draft position, pooled over a trial's levels, and what it implies at a shorter k.

The stacks count, per position i, the drafts whose first i+1 tokens were all accepted; divided by the number
of drafts that is P(position i accepted). A chain at k' < k accepts exactly the first k' of those positions,
so its acceptance length is 1 + the sum of the first k' values: one deep trial measures every shorter k.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from specplug.bench.record import RunStats


class MeasuredAcceptance(BaseModel):
    k: int
    source: str
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    per_position: list[float] = Field(default_factory=list, description="P(position i accepted), per draft.")
    acceptance_length: float | None = Field(None, description="Tokens per target pass, bonus token included.")
    acceptance_rate: float | None = Field(None, description="Accepted over drafted tokens.")

    def conditional_rates(self) -> list[float]:
        """P(position i accepted | the ones before were): the chain's own per-step rates."""
        out = []
        prev = 1.0
        for p in self.per_position:
            out.append(min(p / prev, 1.0) if prev > 0 else 0.0)
            prev = p
        return out

    def length_at(self, k: int) -> float | None:
        """Acceptance length a chain of ``k`` would have, from the positions measured here."""
        if self.per_position and k <= self.k:
            # Positions the counters left out past the last accepted one were never accepted.
            return 1.0 + sum(self.per_position[:k])
        if k == self.k:
            return self.acceptance_length
        return None


def pooled(runs: list[RunStats], k: int) -> MeasuredAcceptance | None:
    """One acceptance over a trial's runs: counters add up (per position weighted by drafts); gauges average."""
    accs = [r.acceptance for r in runs if r.acceptance is not None]
    if not accs:
        return None
    counted = [a for a in accs if a.drafts and a.accepted_tokens is not None and a.draft_tokens is not None]
    if counted:
        drafts = sum(a.drafts or 0.0 for a in counted)
        tokens = sum(a.draft_tokens or 0.0 for a in counted)
        accepted = sum(a.accepted_tokens or 0.0 for a in counted)
        width = max((len(a.per_position) for a in counted), default=0)
        per_pos = []
        for i in range(width):
            per_pos.append(sum((a.per_position[i] if i < len(a.per_position) else 0.0) * (a.drafts or 0.0)
                               for a in counted) / drafts)
        return MeasuredAcceptance(
            k=k, source=counted[0].source, drafts=drafts, draft_tokens=tokens, accepted_tokens=accepted,
            per_position=[round(p, 5) for p in per_pos[:k]], acceptance_length=1.0 + accepted / drafts,
            acceptance_rate=accepted / tokens if tokens else None,
        )
    lens = [a.mean_acceptance_length for a in accs if a.mean_acceptance_length is not None]
    rates = [a.acceptance_rate for a in accs if a.acceptance_rate is not None]
    if not lens and not rates:
        return None
    return MeasuredAcceptance(
        k=k, source=accs[0].source, acceptance_length=sum(lens) / len(lens) if lens else None,
        acceptance_rate=sum(rates) / len(rates) if rates else None,
    )
