"""From measurements to a decision: per concurrency, each trial's throughput against the control's with the
spread of the repeats; speculation is kept only where it wins by the margin plus that spread; the best
technique's k per concurrency becomes the per-batch schedule (k never grows with batch and, once off, stays off,
the rule every stack's schedule form can express)."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from specplug.bench.record import Percentiles, RunStats
from specplug.config import ScheduleEntry
from specplug.tune.acceptance import MeasuredAcceptance, pooled
from specplug.tune.state import Output, TrialResult


class LevelStat(BaseModel):
    concurrency: int
    repeats: int
    tokens_per_s: list[float] = Field(description="Output tokens/s of each repeat.")
    mean_tokens_per_s: float | None = None
    spread: float | None = Field(None, description="(max - min) / mean over the repeats; None with one repeat.")
    failed: int = 0
    ttft_s: Percentiles = Percentiles()
    tpot_s: Percentiles = Percentiles()
    acceptance_length: float | None = None


class Lossless(BaseModel):
    compared: int = 0
    identical: int = 0
    near_tie: int = 0
    late: int = 0
    systematic: int = 0
    errors: int = 0
    first: str | None = Field(None, description="The first systematic difference, for the report.")

    @property
    def ok(self) -> bool:
        return self.systematic == 0


class Speedup(BaseModel):
    concurrency: int
    speedup: float
    low: float = Field(description="Slowest repeat over the control's fastest.")
    high: float = Field(description="Fastest repeat over the control's slowest.")
    noise: float | None = Field(None, description="The larger relative spread of the two; None with one repeat.")
    passes: bool = False


class TrialSummary(BaseModel):
    id: str
    method: str
    drafter: str | None = None
    k: int
    status: str
    error: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    log_file: str | None = None
    levels: list[LevelStat] = Field(default_factory=list)
    speedups: list[Speedup] = Field(default_factory=list)
    acceptance: MeasuredAcceptance | None = None
    lossless: Lossless | None = None


class ConcurrencyChoice(BaseModel):
    concurrency: int
    k: int
    trial: str | None = None
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    note: str | None = None


class Decision(BaseModel):
    decided: bool = Field(True, description="False when nothing was measured to compare (the control or every "
                                            "candidate failed): a failure is no evidence, so nothing is written.")
    speculate: bool
    method: str = "none"
    drafter: str | None = None
    num_speculative_tokens: int = 0
    schedule: list[ScheduleEntry] = Field(default_factory=list)
    per_concurrency: list[ConcurrencyChoice] = Field(default_factory=list)
    why: str = ""
    notes: list[str] = Field(default_factory=list)


def _mean_pct(ps: list[Percentiles]) -> Percentiles:
    def avg(vals: list[float | None]) -> float | None:
        xs = [v for v in vals if v is not None]
        return sum(xs) / len(xs) if xs else None

    return Percentiles(p50=avg([p.p50 for p in ps]), p90=avg([p.p90 for p in ps]), p99=avg([p.p99 for p in ps]),
                       mean=avg([p.mean for p in ps]))


def level_stats(runs: list[RunStats], concurrency: list[int]) -> list[LevelStat]:
    out = []
    for c in concurrency:
        rs = [r for r in runs if r.concurrency == c]
        tps = [r.output_tokens_per_s for r in rs if r.output_tokens_per_s]
        mean = sum(tps) / len(tps) if tps else None
        spread = (max(tps) - min(tps)) / mean if mean and len(tps) > 1 else None
        lens = [r.acceptance.mean_acceptance_length for r in rs if r.acceptance and r.acceptance.mean_acceptance_length]
        out.append(LevelStat(
            concurrency=c, repeats=len(rs), tokens_per_s=[round(x, 3) for x in tps],
            mean_tokens_per_s=None if mean is None else round(mean, 3),
            spread=None if spread is None else round(spread, 4), failed=sum(r.failed for r in rs),
            ttft_s=_mean_pct([r.ttft_s for r in rs]), tpot_s=_mean_pct([r.tpot_s for r in rs]),
            acceptance_length=round(sum(lens) / len(lens), 4) if lens else None,
        ))
    return out


def lossless(outputs: list[Output], control: list[Output]) -> Lossless | None:
    """Greedy outputs against the control's, classified the way 'specplug verify' does."""
    from specplug.bench.client import Completion
    from specplug.bench.verify import classify

    if not outputs or not control:
        return None
    ctl = {o.prompt_id: o for o in control}
    res = Lossless()
    for o in outputs:
        base = ctl.get(o.prompt_id)
        if base is None:
            continue
        d = classify(o.prompt_id, Completion(text=base.text, tokens=base.tokens, top=base.top, error=base.error),
                     Completion(text=o.text, tokens=o.tokens, top=o.top, error=o.error), 32, 0.5)
        res.compared += 1
        res.identical += d.identical
        if d.kind in ("near-tie", "late"):
            setattr(res, d.kind.replace("-", "_"), getattr(res, d.kind.replace("-", "_")) + 1)
        elif d.kind == "error":
            res.errors += 1
        elif d.kind == "systematic":
            res.systematic += 1
            if res.first is None:
                res.first = (f"{o.prompt_id}: {d.unit} {d.position}: control {d.baseline_text!r}, "
                             f"this trial {d.speculative_text!r}")
    return res


def summarize(results: list[TrialResult], concurrency: list[int], margin: float) -> list[TrialSummary]:
    """Every trial's levels, speedups over the control (with their bounds), acceptance and losslessness."""
    control = next((r for r in results if r.k == 0 and r.status == "done"), None)
    ctl_levels = {lv.concurrency: lv for lv in level_stats(control.runs, concurrency)} if control else {}
    out = []
    for r in results:
        s = TrialSummary(id=r.id, method=r.method, drafter=r.drafter, k=r.k, status=r.status, error=r.error,
                         log_tail=r.log_tail, log_file=r.log_file)
        if r.status == "done":
            s.levels = level_stats(r.runs, concurrency)
            if r.k > 0:
                s.acceptance = pooled(r.runs, r.k)
                s.lossless = lossless(r.outputs, control.outputs) if control else None
                for lv in s.levels:
                    sp = _speedup(lv, ctl_levels.get(lv.concurrency), margin)
                    if sp is not None:
                        s.speedups.append(sp)
        out.append(s)
    return out


def _speedup(lv: LevelStat, ctl: LevelStat | None, margin: float) -> Speedup | None:
    if ctl is None or not lv.mean_tokens_per_s or not ctl.mean_tokens_per_s or not ctl.tokens_per_s:
        return None
    ratio = lv.mean_tokens_per_s / ctl.mean_tokens_per_s
    spreads = [x for x in (lv.spread, ctl.spread) if x is not None]
    noise = max(spreads) if spreads else None
    return Speedup(
        concurrency=lv.concurrency, speedup=round(ratio, 4),
        low=round(min(lv.tokens_per_s) / max(ctl.tokens_per_s), 4),
        high=round(max(lv.tokens_per_s) / min(ctl.tokens_per_s), 4),
        noise=noise, passes=ratio >= 1.0 + margin + (noise or 0.0),
    )


def _label(method: str, drafter: str | None) -> str:
    return method if not drafter else f"{method}({drafter.rstrip('/').rsplit('/', 1)[-1]})"


def decide(summaries: list[TrialSummary], concurrency: list[int], margin: float) -> Decision:
    """The technique whose schedule gains most, and its k per concurrency; speculation off where nothing wins."""
    notes: list[str] = []
    groups: dict[tuple[str, str | None], list[TrialSummary]] = {}
    for s in summaries:
        if s.k == 0 or s.status != "done":
            continue
        if s.lossless is not None and not s.lossless.ok:
            notes.append(f"{s.id} is left out: its greedy outputs differ from the control's ({s.lossless.first}).")
            continue
        groups.setdefault((s.method, s.drafter), []).append(s)
    failed = [s.id for s in summaries if s.status != "done"]
    if not any(s.k == 0 and s.status == "done" for s in summaries):
        return Decision(decided=False, speculate=False, why="The control (K=0) did not run, so nothing can be compared.",
                        notes=notes)
    if not any(s.k > 0 and s.status == "done" for s in summaries):
        why = (f"No candidate was measured (failed: {', '.join(failed)}); a failure is no evidence against "
               "speculation, so nothing was decided." if failed else "No candidate was measured, so nothing was decided.")
        return Decision(decided=False, speculate=False, why=why, notes=notes)
    # Failed trials measured nothing: the decision is among the others, and says which were not weighed.
    unmeasured = f"; failed, not measured: {', '.join(failed)}" if failed else ""
    best: tuple[float, tuple[str, str | None], list[ConcurrencyChoice]] | None = None
    for key, trials in groups.items():
        choices = _schedule_points(trials, concurrency)
        gain = sum(math.log(c.speedup) for c in choices if c.k and c.speedup)
        if best is None or gain > best[0]:
            best = (gain, key, choices)
    if best is None or best[0] <= 0.0:
        tried = ", ".join(sorted({_label(*k) for k in groups})) or "none whose outputs matched the control's"
        why = (f"No technique beat the control by the margin ({margin:.0%}) plus the run-to-run spread at any "
               f"measured concurrency ({', '.join(map(str, concurrency))}); tried: {tried}{unmeasured}.")
        per = [ConcurrencyChoice(concurrency=c, k=0) for c in concurrency]
        return Decision(speculate=False, why=why, per_concurrency=per, notes=notes)
    _, (method, drafter), choices = best
    if any(sp.noise is None for s in groups[(method, drafter)] for sp in s.speedups):
        notes.append("One repeat per level: no run-to-run spread was measured, so only the margin guards the "
                     "decision (--repeats 2 or more measures it).")
    sched = _entries(choices)
    on = [c for c in choices if c.k]
    why = (f"{_label(method, drafter)} beat the control by more than the margin ({margin:.0%}) plus the spread at "
           f"concurrency {', '.join(str(c.concurrency) for c in on)}"
           + (f"; off (k=0) from {min(c.concurrency for c in choices if not c.k)}" if len(on) < len(choices) else "")
           + unmeasured + ".")
    return Decision(speculate=True, method=method, drafter=drafter, num_speculative_tokens=max(c.k for c in choices),
                    schedule=sched, per_concurrency=choices, why=why, notes=notes)


def _schedule_points(trials: list[TrialSummary], concurrency: list[int]) -> list[ConcurrencyChoice]:
    """Per concurrency (ascending) the k that passes, such that k never grows with batch and the summed log
    speedup is largest (a small dynamic programme over the measured levels); off where nothing passes."""
    levels = sorted(concurrency)
    options: list[list[tuple[int, float, TrialSummary | None, Speedup | None]]] = []
    for c in levels:
        opts: list[tuple[int, float, TrialSummary | None, Speedup | None]] = [(0, 0.0, None, None)]
        for t in trials:
            sp = next((x for x in t.speedups if x.concurrency == c), None)
            if sp is not None and sp.passes:
                opts.append((t.k, math.log(sp.speedup), t, sp))
        options.append(opts)
    memo: dict[tuple[int, int], tuple[float, list[int]]] = {}

    def best(i: int, cap: int) -> tuple[float, list[int]]:
        """Largest gain from level i on with every k <= cap, and the option index chosen at each level."""
        if i == len(levels):
            return 0.0, []
        if (i, cap) not in memo:
            cands = []
            for j, (k, gain, _, _) in enumerate(options[i]):
                if k <= cap:
                    rest, picks = best(i + 1, k)
                    cands.append((gain + rest, -k, [j, *picks]))
            total, _, picks = max(cands, key=lambda x: (round(x[0], 9), x[1]))
            memo[(i, cap)] = (total, picks)
        return memo[(i, cap)]

    top = max((t.k for t in trials), default=0)
    _, picks = best(0, top)
    out: list[ConcurrencyChoice] = []
    for i, (c, j) in enumerate(zip(levels, picks, strict=True)):
        k, gain, t, sp = options[i][j]
        alone = max(options[i], key=lambda o: o[1])
        note = None
        if alone[1] > gain + 1e-9:
            note = f"k={alone[0]} was faster here alone ({alone[3].speedup:.2f}x); k never grows with batch"
        elif t is None:
            note = "nothing beat the control by the margin"
        if t is None or sp is None:
            out.append(ConcurrencyChoice(concurrency=c, k=0, note=note))
        else:
            out.append(ConcurrencyChoice(concurrency=c, k=k, trial=t.id, speedup=sp.speedup, low=sp.low, high=sp.high,
                                         note=note))
    return out


def _entries(choices: list[ConcurrencyChoice]) -> list[ScheduleEntry]:
    """Ranges between the measured concurrencies: each measured level's k holds up to the next one."""
    out: list[ScheduleEntry] = []
    for i, c in enumerate(choices):
        lo = 1 if i == 0 else c.concurrency
        hi = choices[i + 1].concurrency - 1 if i + 1 < len(choices) else None
        if out and out[-1].num_speculative_tokens == c.k:
            out[-1] = ScheduleEntry(min_batch=out[-1].min_batch, max_batch=hi, num_speculative_tokens=c.k)
        else:
            out.append(ScheduleEntry(min_batch=lo, max_batch=hi, num_speculative_tokens=c.k))
    return out
