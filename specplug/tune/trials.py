"""The trial plan: a K=0 control, the recommended technique and its runners-up, each over the k values worth
trying, in the order that gives a usable answer soonest, with the time each should take and a budget.

A launch serves one k (no stack here changes k at runtime), so the fewest-launches answer comes first: the
control, then each candidate once at its deepest k (acceptance per position is read there once; a chain's
acceptance at a shorter k follows from it), then the other k values, nearest the predicted best first,
which measure what does not follow: the step cost at each k and concurrency.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

from specplug.methods import DRAFTER_METHODS
from specplug.plan import Plan
from specplug.tune.settings import TuneSettings, fmt_duration

# Output tokens per second per stream before anything was measured here: a CPU-sized guess, refined by the control.
STREAM_TOKENS_PER_S_PRIOR = 25.0
# A pinned speculation's settings besides method, drafter and k: its trials run with them and they are written back.
# The control and the first candidate's deepest k: the least that decides anything, kept whatever the budget.
DECIDING = 2
PINNED_KEYS = ("tree", "prompt_lookup_min", "prompt_lookup_max", "draft_tensor_parallel_size")


class Candidate(BaseModel):
    """One technique (method x drafter) the tune compares against the control."""

    method: str
    drafter: str | None = None
    predicted_k: int | None = None
    predicted_speedup: float | None = None
    predicted_acceptance_length: float | None = None
    chosen: bool = False
    extra: dict[str, Any] = Field(default_factory=dict, description="The pinned speculation's other settings (PINNED_KEYS).")

    @property
    def label(self) -> str:
        if not self.drafter:
            return self.method
        return f"{self.method}({self.drafter.rstrip('/').rsplit('/', 1)[-1]})"


class Trial(BaseModel):
    """One launch: a candidate at one k (k=0: the control), measured at every concurrency."""

    id: str
    method: str
    drafter: str | None = None
    k: int = 0
    candidate: str = Field(description="The candidate's label ('control' for K=0).")
    extra: dict[str, Any] = Field(default_factory=dict, description="The candidate's other speculation settings.")
    purpose: Literal["control", "acceptance", "step-cost"] = "step-cost"
    estimate_s: float = 0.0

    @property
    def control(self) -> bool:
        return self.k == 0


class TrialPlan(BaseModel):
    candidates: list[Candidate]
    trials: list[Trial]
    dropped: list[Trial] = Field(default_factory=list, description="Trials the budget left out.")
    total_s: float = 0.0
    budget_s: float | None = None
    estimate_basis: str = "prior"
    notes: list[str] = Field(default_factory=list)


class Estimator(BaseModel):
    """Seconds per launch and per level, from priors until measurements replace them."""

    launch_s: float
    level_s: dict[int, float]
    rate_s: dict[float, float] = Field(default_factory=dict, description="Seconds per open-loop level, by rate.")
    check_s: float = 0.0
    basis: Literal["prior", "measured"] = "prior"

    def trial_s(self, settings: TuneSettings) -> float:
        levels = sum(self.level_s.get(c, 0.0) for c in settings.concurrency)
        levels += sum(self.rate_s.get(r, 0.0) for r in settings.request_rates)
        return self.launch_s + levels * settings.repeats + self.check_s


def prior_estimator(stack: str, settings: TuneSettings, requests_at: dict[Any, int]) -> Estimator:
    """``requests_at``: requests per level, by concurrency (closed loop) or by a level whose ``per_s`` is its rate."""
    level = {}
    rates = {}
    one = settings.max_tokens / STREAM_TOKENS_PER_S_PRIOR  # one request's decode, alone
    for lv, n in requests_at.items():
        per_s = getattr(lv, "per_s", None)
        # Closed loop: requests run lv at a time (ceil); open loop: the arrivals, then the last one's decode.
        t = -(-n // lv) * one if per_s is None else n / per_s + one
        t = min(t, settings.level_seconds) if settings.level_seconds else t
        if per_s is None:
            level[lv] = t
        else:
            rates[per_s] = t
    check = settings.check_prompts * one
    return Estimator(launch_s=launch_prior_s(stack), level_s=level, rate_s=rates, check_s=check)


def launch_prior_s(stack: str) -> float:
    """Seconds from start to healthy the stack's adapter declares, before a launch was measured here (a measured
    one replaces it); the named default for a stack whose adapter cannot load."""
    from specplug.errors import StackError
    from specplug.stacks.protocol import DEFAULT_LAUNCH_PRIOR_S
    from specplug.stacks.registry import get_adapter

    try:
        return get_adapter(stack).launch_prior_s
    except StackError:
        return DEFAULT_LAUNCH_PRIOR_S


def candidates_from(plan: Plan, settings: TuneSettings,
                    pinned: tuple[str, str | None, int] | tuple[str, str | None, int, dict[str, Any]] | None = None,
                    ) -> list[Candidate]:
    """The recommendation's scored techniques, chosen first then by predicted speedup; narrowed to
    ``settings.methods`` (which may add methods the recommendation could not score, e.g. a named drafter)."""
    # Scored means servable here; one predicted to lose is still worth measuring (the prediction may be wrong).
    scored = [c for c in plan.candidates if c.speedup is not None]
    scored.sort(key=lambda c: (not c.chosen, -(c.speedup or 0.0)))
    out: list[Candidate] = []
    seen: set[tuple[str, str | None]] = set()

    def add(method: str, drafter: str | None, **kw) -> None:
        if settings.drafter and method in DRAFTER_METHODS:
            drafter = settings.drafter
        key = (method, drafter)
        if key not in seen and method != "none":
            seen.add(key)
            out.append(Candidate(method=method, drafter=drafter, **kw))

    if pinned is not None and (not settings.methods or pinned[0] in settings.methods):
        add(pinned[0], pinned[1], predicted_k=pinned[2] or None, extra=dict(pinned[3]) if len(pinned) > 3 else {})
    for c in scored:
        if settings.methods and c.method not in settings.methods:
            continue
        add(c.method, c.drafter, predicted_k=c.num_speculative_tokens or None, predicted_speedup=c.speedup,
            predicted_acceptance_length=c.acceptance_length, chosen=c.chosen)
    for m in settings.methods:
        if not any(c.method == m for c in out):
            add(m, None)
    limit = max(settings.candidates, len(settings.methods))
    return out[:limit]


def ks_for(c: Candidate, settings: TuneSettings) -> list[int]:
    """k values worth trying: the ones asked for, else 1 and the predicted best's neighbourhood."""
    if settings.ks:
        return list(settings.ks)
    best = c.predicted_k or 4
    return sorted({1, *range(max(1, best - 2), best + 2)})


def build(
    candidates: list[Candidate], settings: TuneSettings, est: Estimator, budget_s: float | None = None,
    done: set[str] | frozenset[str] = frozenset(),
) -> TrialPlan:
    """Order the trials (fewest launches to an answer first) and trim them to the budget, which counts only
    what is left to run (``done``: trials an earlier run finished)."""
    per = est.trial_s(settings)
    control = Trial(id="control", method="none", k=0, candidate="control", purpose="control", estimate_s=per)
    first: list[Trial] = []
    rest: list[tuple[tuple[int, int], Trial]] = []
    labels = unique_labels(candidates)
    for rank, (c, label) in enumerate(zip(candidates, labels, strict=True)):
        ks = ks_for(c, settings)
        deepest = max(ks)
        for k in ks:
            t = Trial(id=f"{_slug(label)}-k{k}", method=c.method, drafter=c.drafter, k=k, candidate=label,
                      purpose="acceptance" if k == deepest else "step-cost", estimate_s=per, extra=dict(c.extra))
            if k == deepest:
                first.append(t)
            else:
                rest.append(((abs(k - (c.predicted_k or deepest)), rank), t))
    ordered = [control, *first, *(t for _, t in sorted(rest, key=lambda x: x[0]))]
    if budget_s is not None:
        check_budget(budget_s, sum(0.0 if t.id in done else t.estimate_s for t in ordered[:DECIDING]), est.basis)
    plan = TrialPlan(candidates=candidates, trials=[], budget_s=budget_s, estimate_basis=est.basis)
    total = 0.0
    for i, t in enumerate(ordered):
        cost = 0.0 if t.id in done else t.estimate_s
        # The control and the first candidate's deepest k are the least that decides anything: always kept.
        if budget_s is not None and i >= DECIDING and total + cost > budget_s:
            plan.dropped.append(t)
            continue
        plan.trials.append(t)
        total += cost
    plan.total_s = total
    if plan.dropped:
        plan.notes.append(
            f"--budget left out {len(plan.dropped)} trial(s): " + ", ".join(t.id for t in plan.dropped) + "."
        )
    return plan


def check_budget(budget_s: float, least_s: float, basis: str) -> None:
    """Refuse, before anything starts, a budget below the least that decides anything: a budget is a promise, and
    running the control and one candidate past it would break it."""
    if least_s <= budget_s:
        return
    from specplug.errors import SpecplugError

    raise SpecplugError(
        f"--budget {fmt_duration(budget_s)} is below the least that decides anything: the control and one candidate "
        f"take about {fmt_duration(least_s)} ({'measured here' if basis == 'measured' else 'a rough prior'}).",
        f"Raise it to --budget {fmt_duration(60 * math.ceil(least_s / 60))} or more, or make each trial shorter "
        "(fewer --concurrency levels, --repeats 1, --level-seconds N, --num-prompts N).",
    )


def unique_labels(candidates: list[Candidate]) -> list[str]:
    """Each candidate's label; where two would give the same trial ids (mirrors of one drafter under other
    owners), those two name more of the drafter's path, so labels that do not collide stay as they were."""
    labels = [c.label for c in candidates]
    for depth in (2, 3, None):
        slugs = [_slug(x) for x in labels]
        dup = {x for x in slugs if slugs.count(x) > 1}
        if not dup:
            return labels
        labels = [_label_at(c, depth) if _slug(x) in dup else x for c, x in zip(candidates, labels, strict=True)]
    slugs = [_slug(x) for x in labels]
    seen: dict[str, int] = {}
    out = []
    for x, sl in zip(labels, slugs, strict=True):
        seen[sl] = seen.get(sl, 0) + 1
        out.append(x if slugs.count(sl) == 1 else f"{x}#{seen[sl]}")
    return out


def _label_at(c: Candidate, depth: int | None) -> str:
    if not c.drafter:
        return c.method
    parts = [p for p in c.drafter.rstrip("/").split("/") if p]
    return f"{c.method}({'/'.join(parts[-depth:] if depth else parts)})"


def _slug(label: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "trial"
