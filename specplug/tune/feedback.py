"""Feeding the model: each candidate's acceptance measured at its deepest k becomes a calibration entry (in
the same file 'specplug calibrate' writes), next to what the policy predicted for it before."""

from __future__ import annotations

import datetime
from pathlib import Path

from pydantic import BaseModel

from specplug.errors import SpecplugError
from specplug.fileio import user_path
from specplug.plan import Plan
from specplug.policy.calibration import CalibrationEntry
from specplug.tune.decide import TrialSummary

# The calibration file tune creates beside specplug.yaml when the config names none.
DEFAULT_CALIBRATION = "calibration.yaml"


class AcceptanceCheck(BaseModel):
    """Predicted against measured acceptance for one candidate at the k it was measured with."""

    candidate: str
    method: str
    drafter: str | None = None
    k: int
    predicted_length: float | None = None
    measured_length: float | None = None
    measured_rate: float | None = None
    error: float | None = None  # measured / predicted - 1
    note: str | None = None


def deepest(summaries: list[TrialSummary]) -> list[TrialSummary]:
    """Per candidate, its deepest finished trial that measured acceptance."""
    best: dict[tuple[str, str | None], TrialSummary] = {}
    for s in summaries:
        if s.k and s.status == "done" and s.acceptance is not None:
            key = (s.method, s.drafter)
            if key not in best or s.k > best[key].k:
                best[key] = s
    return list(best.values())


def predicted_length(plan: Plan, s: TrialSummary, calibration: str | None) -> float | None:
    """What 'specplug estimate' says for this candidate at its k (batch 1), with the calibration in force before."""
    from specplug.planning import estimate

    try:
        est = estimate(
            plan.model.ref, s.method, drafter=s.drafter, num_speculative_tokens=s.k,
            stack=plan.stack.name, stack_version=plan.stack.version, gpu=plan.hardware.gpu,
            num_gpus=plan.hardware.num_gpus, batch_size=1, workload=plan.workload.type,
            temperature=plan.workload.temperature, calibration=calibration, require_fit=False,
        )
    except SpecplugError:
        return None
    return est.acceptance_length


def checks(plan: Plan, summaries: list[TrialSummary], calibration: str | None) -> list[AcceptanceCheck]:
    out = []
    for s in deepest(summaries):
        a = s.acceptance
        pred = predicted_length(plan, s, calibration)
        meas = a.acceptance_length if a else None
        out.append(AcceptanceCheck(
            candidate=s.id, method=s.method, drafter=s.drafter, k=s.k, predicted_length=pred, measured_length=meas,
            measured_rate=a.acceptance_rate if a else None,
            error=round(meas / pred - 1.0, 4) if pred and meas else None,
            note=None if pred else "no prediction for this setup",
        ))
    return out


def entries(plan: Plan, summaries: list[TrialSummary], out_dir: str | Path, temperature: float) -> list[CalibrationEntry]:
    today = datetime.date.today().isoformat()
    # A pinned speculation's trials ran with its tree (tune.trials.PINNED_KEYS); the other candidates' with chains.
    sp = plan.speculation
    pinned_tree = sp.tree if sp.tree is not None and sp.tree.topk > 1 else None
    out = []
    for s in deepest(summaries):
        a = s.acceptance
        if a is None or (a.acceptance_rate is None and a.acceptance_length is None):
            continue
        rate = a.acceptance_rate
        if rate is None and a.acceptance_length is not None:
            rate = (a.acceptance_length - 1.0) / s.k
        rate = min(max(rate, 1e-3), 0.999) if rate is not None else None  # the schema's open interval
        # The calibration's speedup is output tokens/s in a closed loop (not a rate's decode speed or a goodput).
        closed = [x for x in s.speedups if x.request_rate is None and any(
            lv.concurrency == x.concurrency and lv.request_rate is None and lv.score == "tokens_per_s" for lv in s.levels)]
        first = min(closed, key=lambda x: x.concurrency) if closed else None
        tree = pinned_tree if (s.method, s.drafter) == (sp.method, sp.drafter) else None
        out.append(CalibrationEntry(
            model=plan.model.hf_id, method=s.method, workload=plan.workload.type, drafter=s.drafter,  # type: ignore[arg-type]
            stack=plan.stack.name, temperature=temperature, num_speculative_tokens=s.k,
            tree_topk=tree.topk if tree else None, num_draft_tokens=tree.num_draft_tokens if tree else None,
            acceptance_rate=round(rate, 4) if rate is not None else None,
            acceptance_length=round(max(a.acceptance_length, 1.0), 4) if a.acceptance_length is not None else None,
            position_rates=[round(r, 4) for r in a.conditional_rates()] or None,
            measured_speedup=round(first.speedup, 4) if first and first.speedup > 0 else None,
            batch_size=first.concurrency if first else None, measured_at=today,
            source=f"tune {Path(out_dir).as_posix()} ({s.id})",
        ))
    return out


def calibration_path(config_path: str | Path, named: str | None) -> tuple[Path, str]:
    """The calibration file to merge into, and how specplug.yaml names it (relative to its folder)."""
    rel = named or DEFAULT_CALIBRATION
    p = user_path(rel)
    return (p if p.is_absolute() else Path(config_path).parent / p), rel
