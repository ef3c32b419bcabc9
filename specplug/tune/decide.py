"""From measurements to a decision: per level (a concurrency, or a request rate in an open loop), each trial's
score against the control's with the spread of the repeats; speculation is kept only where it wins by the margin
plus that spread. The score is output tokens/s in a closed loop and each stream's decode speed (1/TPOT) at a
request rate, where every arm delivers what arrives; with latency targets, goodput (tokens/s of the requests
within them) everywhere.

The decision serves the stated production load. Where the stack switches k per running batch (a schedule), each
measured concurrency gets the k that won there, off where nothing did, so speculation may turn on above a batch
size. Where it runs one k at every batch (or can only turn it off above a threshold), the k is the one that won at
the stated load, and runs below it too: a loss measured below the production load does not turn off a win at it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from specplug.bench.record import Percentiles, RunStats
from specplug.config import ScheduleEntry
from specplug.tune.acceptance import MeasuredAcceptance, pooled
from specplug.tune.state import Output, TrialResult

# How a stack follows a per-batch schedule for a method: any k per batch range ('schedule'), one k up to a
# threshold and off above it ('cutoff'), or one k at every batch size ('fixed').
Mode = Literal["schedule", "cutoff", "fixed"]
Score = Literal["tokens_per_s", "decode_speed", "goodput"]


class LevelStat(BaseModel):
    concurrency: int = Field(description="Concurrent streams; 0 at an open-loop level (request_rate).")
    request_rate: float | None = None
    repeats: int
    tokens_per_s: list[float] = Field(description="Output tokens/s of each repeat.")
    mean_tokens_per_s: float | None = None
    score: Score = Field("tokens_per_s", description="What the speedup compares: output tokens/s (closed loop), "
                                                     "1/TPOT p50 (open loop) or goodput (with latency targets).")
    scores: list[float] = Field(default_factory=list, description="The score of each repeat.")
    spread: float | None = Field(None, description="(max - min) / mean of the score over the repeats; None with "
                                                   "one repeat.")
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
    request_rate: float | None = None
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
    request_rate: float | None = None
    k: int
    trial: str | None = None
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    note: str | None = None


class RateCrossover(BaseModel):
    """Where a trial's TPOT p50 stops beating the control's as the request rate grows (open-loop levels)."""

    trial: str
    pays_up_to: float | None = Field(None, description="The highest measured rate below the first loss.")
    stops_at: float | None = Field(None, description="The first measured rate where it no longer paid.")
    request_rate: float | None = Field(None, description="Interpolated crossover; 0.0: lost from the lowest rate; "
                                                         "None: paid at every measured rate.")


class Decision(BaseModel):
    decided: bool = Field(True, description="False when nothing was measured to compare (the control or every "
                                            "candidate failed): a failure is no evidence, so nothing is written.")
    speculate: bool
    method: str = "none"
    drafter: str | None = None
    num_speculative_tokens: int = 0
    schedule: list[ScheduleEntry] = Field(default_factory=list)
    per_concurrency: list[ConcurrencyChoice] = Field(default_factory=list)
    load: str | None = Field(None, description="The production load the decision serves, as measured (e.g. "
                                               "'concurrency 2', 'request rate 4/s').")
    mode: Mode | None = Field(None, description="How the stack follows the schedule for the chosen method.")
    crossover_request_rate: float | None = Field(
        None, description="Measured: the request rate above which the chosen trial's TPOT p50 is no better than the "
                          "control's (interpolated between the rates measured); 0.0 where it lost at the lowest, None "
                          "where it paid at every rate or no rate was measured.")
    crossovers: list[RateCrossover] = Field(default_factory=list, description="Every candidate trial's, measured.")
    why: str = ""
    notes: list[str] = Field(default_factory=list)


def _mean_pct(ps: list[Percentiles]) -> Percentiles:
    def avg(vals: list[float | None]) -> float | None:
        xs = [v for v in vals if v is not None]
        return sum(xs) / len(xs) if xs else None

    return Percentiles(p50=avg([p.p50 for p in ps]), p90=avg([p.p90 for p in ps]), p99=avg([p.p99 for p in ps]),
                       mean=avg([p.mean for p in ps]))


def _score(r: RunStats, kind: Score) -> float | None:
    if kind == "goodput":
        return r.goodput_tokens_per_s
    if kind == "decode_speed":
        return 1.0 / r.tpot_s.p50 if r.tpot_s.p50 else None
    return r.output_tokens_per_s


def level_stats(runs: list[RunStats], concurrency: list[int], rates: Sequence[float] = (),
                slo: bool = False) -> list[LevelStat]:
    """Per closed-loop concurrency, then per open-loop rate: the repeats' figures and the score compared."""
    out = []
    keys = [(c, None) for c in concurrency] + [(0, r) for r in rates]
    for c, rate in keys:
        rs = [r for r in runs if (r.request_rate == rate if rate is not None else
                                  r.concurrency == c and r.request_rate is None)]
        kind: Score = "goodput" if slo else ("decode_speed" if rate is not None else "tokens_per_s")
        tps = [r.output_tokens_per_s for r in rs if r.output_tokens_per_s]
        mean = sum(tps) / len(tps) if tps else None
        # Goodput may be 0 (no request within the targets): a score, not a missing one.
        scores = [x for r in rs if (x := _score(r, kind)) is not None and (x > 0 or kind == "goodput")]
        smean = sum(scores) / len(scores) if scores else None
        spread = (max(scores) - min(scores)) / smean if smean and len(scores) > 1 else None
        lens = [r.acceptance.mean_acceptance_length for r in rs if r.acceptance and r.acceptance.mean_acceptance_length]
        out.append(LevelStat(
            concurrency=c, request_rate=rate, repeats=len(rs), tokens_per_s=[round(x, 3) for x in tps],
            mean_tokens_per_s=None if mean is None else round(mean, 3), score=kind,
            scores=[round(x, 6) for x in scores], spread=None if spread is None else round(spread, 4),
            failed=sum(r.failed for r in rs), ttft_s=_mean_pct([r.ttft_s for r in rs]),
            tpot_s=_mean_pct([r.tpot_s for r in rs]),
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


def _key(lv: LevelStat | Speedup) -> tuple[int, float | None]:
    return (lv.concurrency, lv.request_rate)


def summarize(results: list[TrialResult], concurrency: list[int], margin: float, rates: Sequence[float] = (),
              slo: bool = False) -> list[TrialSummary]:
    """Every trial's levels, speedups over the control (with their bounds), acceptance and losslessness."""
    control = next((r for r in results if r.k == 0 and r.status == "done"), None)
    ctl_levels = {_key(lv): lv for lv in level_stats(control.runs, concurrency, rates, slo)} if control else {}
    out = []
    for r in results:
        s = TrialSummary(id=r.id, method=r.method, drafter=r.drafter, k=r.k, status=r.status, error=r.error,
                         log_tail=r.log_tail, log_file=r.log_file)
        if r.status == "done":
            s.levels = level_stats(r.runs, concurrency, rates, slo)
            if r.k > 0:
                s.acceptance = pooled(r.runs, r.k)
                s.lossless = lossless(r.outputs, control.outputs) if control else None
                for lv in s.levels:
                    sp = _speedup(lv, ctl_levels.get(_key(lv)), margin)
                    if sp is not None:
                        s.speedups.append(sp)
        out.append(s)
    return out


def _speedup(lv: LevelStat, ctl: LevelStat | None, margin: float) -> Speedup | None:
    if ctl is None or not lv.scores or not ctl.scores or min(ctl.scores) <= 0:
        return None
    ratio = (sum(lv.scores) / len(lv.scores)) / (sum(ctl.scores) / len(ctl.scores))
    if ratio <= 0:
        ratio = 1e-6  # nothing within the targets: a loss, kept finite for the logs below
    spreads = [x for x in (lv.spread, ctl.spread) if x is not None]
    noise = max(spreads) if spreads else None
    return Speedup(
        concurrency=lv.concurrency, request_rate=lv.request_rate, speedup=round(ratio, 4),
        low=round(min(lv.scores) / max(ctl.scores), 4), high=round(max(lv.scores) / min(ctl.scores), 4),
        noise=noise, passes=ratio >= 1.0 + margin + (noise or 0.0),
    )


def _label(method: str, drafter: str | None) -> str:
    return method if not drafter else f"{method}({drafter.rstrip('/').rsplit('/', 1)[-1]})"


def decide(
    summaries: list[TrialSummary], concurrency: list[int], margin: float, *, rates: Sequence[float] = (),
    load_concurrency: int | None = None, load_request_rate: float | None = None,
    mode_of: Callable[[str], Mode] | None = None, stack: str = "this stack",
) -> Decision:
    """The technique, k and schedule that serve the stated load best; speculation off where nothing wins there.

    ``mode_of(method)``: how the stack follows a schedule for that method (default: any k per batch range).
    Without a stated load, the lowest measured concurrency stands for it."""
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
    levels, rate_levels = sorted(concurrency), sorted(rates)
    prod, load = _production(levels, rate_levels, load_concurrency, load_request_rate, notes)
    control = next(s for s in summaries if s.k == 0 and s.status == "done")
    crossovers = [c for t in summaries if t.k > 0 and t.status == "done" if (c := _crossover(t, control, rate_levels))]
    mode_for = mode_of or (lambda _m: "schedule")
    best: _Option | None = None
    for key, trials in groups.items():
        opt = _option(key, trials, levels, prod, "fixed" if prod[1] is not None else mode_for(key[0]), stack)
        if opt is not None and (best is None or (opt.prod_gain, opt.total_gain) > (best.prod_gain, best.total_gain)):
            best = opt
    tried = ", ".join(sorted({_label(*k) for k in groups})) or "none whose outputs matched the control's"
    if best is None:
        per = [ConcurrencyChoice(concurrency=c, k=0) for c in levels]
        return Decision(speculate=False, why=_why_off(groups, levels, rate_levels, prod, load, margin, tried, unmeasured,
                                                      mode_for, stack),
                        per_concurrency=per, notes=notes, load=load, crossovers=crossovers)
    (method, drafter), choices = best.key, best.choices
    if any(sp.noise is None for s in groups[(method, drafter)] for sp in s.speedups):
        notes.append("One repeat per level: no run-to-run spread was measured, so only the margin guards the "
                     "decision (--repeats 2 or more measures it).")
    chosen = {c.trial for c in choices if c.trial} | ({best.prod_trial} if best.prod_trial else set())
    cross = next((c for c in crossovers if c.trial == best.prod_trial), None) or next(
        (c for c in crossovers if c.trial in chosen), None)
    return Decision(speculate=True, method=method, drafter=drafter, num_speculative_tokens=max(c.k for c in choices),
                    schedule=_entries(choices), per_concurrency=choices, why=best.why + unmeasured + ".", notes=notes,
                    load=load, mode=best.mode, crossover_request_rate=cross.request_rate if cross else None,
                    crossovers=crossovers)


class _Option(BaseModel):
    key: tuple[str, str | None]
    mode: Mode
    choices: list[ConcurrencyChoice]
    prod_gain: float
    total_gain: float
    prod_trial: str | None = None
    why: str


def _production(levels: list[int], rates: list[float], load_c: int | None, load_r: float | None,
                notes: list[str]) -> tuple[tuple[int, float | None], str]:
    """The measured level standing for the stated load (the nearest on a log scale, said so when not exact)."""
    if load_r is not None and rates:
        r = min(rates, key=lambda x: abs(math.log(x / load_r)))
        if r != load_r:
            notes.append(f"The stated load is {load_r:g} requests/s; the nearest measured rate, {r:g}/s, stands for it.")
        return (0, r), f"request rate {r:g}/s"
    if load_r is not None:
        notes.append(f"The stated load is {load_r:g} requests/s but no request rate was measured (--request-rate): "
                     "the decision serves workload.concurrency instead.")
    want = load_c or levels[0]
    c = min(levels, key=lambda x: abs(math.log(x / want)))
    if load_c is not None and c != load_c:
        notes.append(f"The stated load is concurrency {load_c}; the nearest measured level, {c}, stands for it.")
    return (c, None), f"concurrency {c}"


def _at(t: TrialSummary, key: tuple[int, float | None]) -> Speedup | None:
    return next((x for x in t.speedups if (x.concurrency, x.request_rate) == key), None)


def _where(key: tuple[int, float | None]) -> str:
    return f"request rate {key[1]:g}/s" if key[1] is not None else f"concurrency {key[0]}"


def _runs_there(mode: Mode, stack: str, at_rate: bool = False) -> str:
    if at_rate:
        return "a request rate names no batch size, so the k chosen there runs at every batch size"
    if mode == "cutoff":
        return f"{stack} can turn speculation off above a batch size, not on"
    return f"{stack} runs one draft length at every batch size"


def _option(key: tuple[str, str | None], trials: list[TrialSummary], levels: list[int],
            prod: tuple[int, float | None], mode: Mode, stack: str) -> _Option | None:
    """The technique's best schedule under the stack's mode, or None where it wins nowhere it could run."""
    label = _label(*key)
    at_prod = [(sp, t) for t in trials if (sp := _at(t, prod)) is not None and sp.passes]
    top = max(at_prod, key=lambda x: (round(math.log(x[0].speedup), 9), -x[1].k), default=None)
    if mode == "schedule":
        choices = []
        for c in levels:
            wins = [(sp, t) for t in trials if (sp := _at(t, (c, None))) is not None and sp.passes]
            w = max(wins, key=lambda x: (round(math.log(x[0].speedup), 9), -x[1].k), default=None)
            if w is None:
                choices.append(ConcurrencyChoice(concurrency=c, k=0, note="nothing beat the control by the margin"))
            else:
                sp, t = w
                choices.append(ConcurrencyChoice(concurrency=c, k=t.k, trial=t.id, speedup=sp.speedup, low=sp.low,
                                                 high=sp.high))
        on = [c for c in choices if c.k]
        if not on:
            return None
        off = [c for c in choices if not c.k]
        here = next(c for c in choices if c.concurrency == prod[0])
        why = (f"{label} beat the control by more than the margin plus the spread at concurrency "
               + ", ".join(str(c.concurrency) for c in on)
               + (f"; off (k=0) at {', '.join(str(c.concurrency) for c in off)}, where nothing did" if off else "")
               + (f"; at the stated load ({_where(prod)}) k={here.k}, {here.speedup:.2f}x" if here.k else
                  f"; off at the stated load ({_where(prod)})")
               + (f": {stack}'s schedule turns it on from batch {on[0].concurrency}"
                  if off and off[0].concurrency < on[0].concurrency else ""))
        gain = sum(math.log(c.speedup) for c in on if c.speedup)
        return _Option(key=key, mode=mode, choices=choices, prod_gain=math.log(here.speedup) if here.speedup else 0.0,
                       total_gain=gain, prod_trial=here.trial, why=why)
    if top is None:
        return None
    sp0, t0 = top
    k = t0.k
    choices: list[ConcurrencyChoice] = []
    lost_at: int | None = None
    for c in levels:
        sp = _at(t0, (c, None))
        # A cutoff keeps k from batch 1 through the stated load, and above it while k still wins.
        if mode == "cutoff" and prod[1] is None and c > prod[0] and (lost_at is not None or not (sp and sp.passes)):
            lost_at = lost_at or c
            choices.append(ConcurrencyChoice(concurrency=c, k=0, note=f"k={k} did not beat the control here, and "
                                             f"{stack} keeps it off above the first such batch"))
            continue
        note = None
        if sp is not None and not sp.passes:
            inside = ("inside the run-to-run spread" if sp.noise is not None and abs(sp.speedup - 1.0) <= sp.noise
                      else "a gain short of the margin" if sp.speedup >= 1.0 else "a loss")
            note = (f"k={k} runs here too ({_runs_there(mode, stack, prod[1] is not None)}): {sp.speedup:.2f}x "
                    f"({sp.low:.2f}-{sp.high:.2f}, {inside})")
        choices.append(ConcurrencyChoice(concurrency=c, k=k, trial=t0.id, speedup=sp.speedup if sp else None,
                                         low=sp.low if sp else None, high=sp.high if sp else None, note=note))
    why = (f"{label} k={k} beat the control at the stated load ({_where(prod)}) by {sp0.speedup:.2f}x "
           f"({sp0.low:.2f}-{sp0.high:.2f} over the repeats), more than the margin plus the spread")
    elsewhere = [c for c in choices if c.k and c.note]
    if elsewhere:
        why += ("; " + _runs_there(mode, stack, prod[1] is not None) + (", so it" if prod[1] is None else ": it")
                + " also runs at "
                + ", ".join(f"concurrency {c.concurrency} ({c.speedup:.2f}x)" for c in elsewhere))
    if lost_at is not None:
        why += f"; off from concurrency {lost_at}"
    gain = sum(math.log(c.speedup) for c in choices if c.k and c.speedup)
    return _Option(key=key, mode=mode, choices=choices, prod_gain=math.log(sp0.speedup), total_gain=gain,
                   prod_trial=t0.id, why=why)


def _why_off(groups: dict[tuple[str, str | None], list[TrialSummary]], levels: list[int], rates: list[float],
             prod: tuple[int, float | None], load: str, margin: float, tried: str, unmeasured: str,
             mode_for: Callable[[str], Mode], stack: str) -> str:
    """Why speculation is off, in words the measurements bear out."""
    wins = [(sp, t) for ts in groups.values() for t in ts for sp in t.speedups if sp.passes]
    where = f"any measured concurrency ({', '.join(map(str, levels))})"
    if rates:
        where += f" or request rate ({', '.join(f'{r:g}' for r in rates)}/s)"
    if not wins:
        return (f"No technique beat the control by the margin ({margin:.0%}) plus the run-to-run spread at {where}; "
                f"tried: {tried}{unmeasured}.")
    sp, t = max(wins, key=lambda x: x[0].speedup)
    mode = "fixed" if prod[1] is not None else mode_for(t.method)
    at = _at(t, prod)
    there = f" (k={t.k} measured {at.speedup:.2f}x there, {at.low:.2f}-{at.high:.2f})" if at else ""
    key = (sp.concurrency, sp.request_rate)
    if key[1] is not None and prod[1] is None:
        reason = "a request rate names no batch size a schedule could turn it on at"
    elif prod[1] is not None:
        reason = "the decision is made at the stated rate"
    else:
        reason = _runs_there(mode, stack) + ", so it would run at the stated load too"
    return (f"At the stated load ({load}) no technique beat the control by the margin ({margin:.0%}) plus the "
            f"run-to-run spread{there}; {_label(t.method, t.drafter)} k={t.k} did at {_where(key)} "
            f"({sp.speedup:.2f}x), but {reason}; tried: {tried}{unmeasured}.")


def _crossover(t: TrialSummary, control: TrialSummary, rates: list[float]) -> RateCrossover | None:
    """Where the trial's TPOT p50 stops beating the control's over the measured rates (log-interpolated)."""
    pts = []
    for r in rates:
        a = next((lv for lv in t.levels if lv.request_rate == r), None)
        b = next((lv for lv in control.levels if lv.request_rate == r), None)
        if a and b and a.tpot_s.p50 and b.tpot_s.p50:
            pts.append((r, math.log(b.tpot_s.p50 / a.tpot_s.p50)))
    if not pts:
        return None
    prev = None
    for r, gain in pts:
        if gain <= 0:
            if prev is None:
                return RateCrossover(trial=t.id, stops_at=r, request_rate=0.0)
            (r0, g0) = prev
            f = g0 / (g0 - gain)  # where the log gain crosses 0, on a log rate scale
            x = math.exp(math.log(r0) + f * (math.log(r) - math.log(r0)))
            return RateCrossover(trial=t.id, pays_up_to=r0, stops_at=r, request_rate=round(x, 4))
        prev = (r, gain)
    return RateCrossover(trial=t.id, pays_up_to=pts[-1][0])


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
