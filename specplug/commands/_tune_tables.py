"""The tables tune prints: the trial plan before it runs, then the measurements per trial and concurrency, the
decision and schedule, and the predicted against the measured acceptance (rich renderables built from
:mod:`specplug.tune.trials` and :mod:`specplug.tune.evidence`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specplug.tune.settings import fmt_duration

if TYPE_CHECKING:
    from specplug.tune.evidence import TuneReport
    from specplug.tune.settings import TuneSettings
    from specplug.tune.trials import TrialPlan


def trial_plan_table(plan: TrialPlan, settings: TuneSettings, done: set[str] | frozenset[str] = frozenset()) -> list[Any]:
    """What will run, in order, and about how long (rich renderables)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title="specplug tune: trial plan", title_justify="left")
    for col in ("#", "trial", "method", "drafter", "k", "why", "about"):
        t.add_column(col, justify="right" if col in ("#", "k", "about") else "left")
    left = 0.0
    for i, tr in enumerate(plan.trials, 1):
        state = " (done)" if tr.id in done else ""
        if tr.id not in done:
            left += tr.estimate_s
        why = {"control": "K=0 baseline", "acceptance": "acceptance per position",
               "step-cost": "step cost at this k"}[tr.purpose]
        t.add_row(str(i), tr.id + state, tr.method, tr.drafter or "-", str(tr.k), why, fmt_duration(tr.estimate_s))
    basis = "measured on this machine" if plan.estimate_basis == "measured" else "a rough prior until the control has run"
    lines = [
        f"{len(plan.trials)} launch(es); concurrency {','.join(map(str, settings.concurrency))}"
        + (f" and request rate {','.join(f'{r:g}' for r in settings.request_rates)}/s (open loop)"
           if settings.request_rates else "") + ", "
        f"{settings.repeats} repeat(s) per level; about {fmt_duration(left)} left ({basis}).",
        *plan.notes,
    ]
    if settings.load_request_rate is not None:
        lines.append(f"The decision serves the stated load: {settings.load_request_rate:g} requests/s "
                     "(workload.request_rate).")
    elif settings.load_concurrency is not None:
        lines.append(f"The decision serves the stated load: concurrency {settings.load_concurrency} "
                     "(workload.concurrency).")
    return [t, Text("\n".join(lines))]


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


_MODES = {"schedule": "the stack switches k per batch size", "cutoff": "the stack runs one k, off above a batch size",
          "fixed": "the stack runs one k at every batch size"}


def _crossover_text(x: Any) -> str:
    if x.request_rate is None:
        return f"TPOT p50 below the control's at every measured rate (up to {x.pays_up_to:g}/s)."
    if x.request_rate == 0.0:
        return f"TPOT p50 no better than the control's from the lowest measured rate ({x.stops_at:g}/s)."
    return (f"TPOT p50 stops beating the control's at about {x.request_rate:.3g} requests/s (paid at "
            f"{x.pays_up_to:g}/s, not at {x.stops_at:g}/s).")


def tune_table(rep: TuneReport) -> list[Any]:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    concs = rep.settings.concurrency
    t = Table(title=f"specplug tune: {rep.model} on {rep.stack} {rep.stack_version or ''}, {rep.prompts}",
              title_justify="left")
    t.add_column("trial")
    t.add_column("k", justify="right")
    rates = rep.settings.request_rates
    for c in concs:
        t.add_column(f"c={c} tok/s", justify="right")
        t.add_column(f"c={c} speedup", justify="right")
    for r in rates:
        t.add_column(f"{r:g}/s TPOT ms", justify="right")
        t.add_column(f"{r:g}/s speedup", justify="right")
    t.add_column("acc len", justify="right")
    t.add_column("greedy = control", justify="left")
    for tr in rep.trials:
        if tr.status != "done":
            # Error text (server bodies, paths) is shown as written, never read as markup.
            t.add_row(escape(tr.id), str(tr.k), *(["", ""] * (len(concs) + len(rates))), "",
                      "[red]failed[/red]: " + escape((tr.error or "")[:100]))
            continue
        cells = []
        for key in [(c, None) for c in concs] + [(0, r) for r in rates]:
            lv = next((x for x in tr.levels if (x.concurrency, x.request_rate) == key), None)
            sp = next((x for x in tr.speedups if (x.concurrency, x.request_rate) == key), None)
            if key[1] is None:
                tok = _f(lv.mean_tokens_per_s, ".1f") if lv else "-"
            else:
                tok = _f(lv.tpot_s.p50 * 1000 if lv and lv.tpot_s.p50 else None, ".1f")
            if lv and lv.spread is not None:
                tok += f" ±{lv.spread / 2:.0%}"
            if tr.k == 0:
                cells += [tok, "1.00x"]
            elif sp is None:
                cells += [tok, "-"]
            else:
                style = "green" if sp.passes else ("red" if sp.speedup < 1 else "yellow")
                cells += [tok, f"[{style}]{sp.speedup:.2f}x[/{style}] ({sp.low:.2f}-{sp.high:.2f})"]
        acc = tr.acceptance.acceptance_length if tr.acceptance else None
        if tr.k == 0:
            ll = "(the control)"
        elif tr.lossless is None:
            ll = "-"
        elif tr.lossless.ok:
            ll = f"{tr.lossless.identical}/{tr.lossless.compared} identical" + (
                f", {tr.lossless.near_tie + tr.lossless.late} near-tie/late" if tr.lossless.near_tie + tr.lossless.late else "")
        else:
            ll = f"[red]MISMATCH[/red]: {tr.lossless.systematic}/{tr.lossless.compared} systematic"
        t.add_row(escape(tr.id), str(tr.k), *cells, _f(acc), ll)
    out: list[Any] = [t]
    d = rep.decision
    lines = []
    if d.speculate:
        lines.append(f"Decision: {d.method}" + (f" ({d.drafter})" if d.drafter else "") + f", k={d.num_speculative_tokens}")
        lines.append("Schedule: " + ", ".join(
            f"batch {e.min_batch}-{e.max_batch if e.max_batch is not None else '...'}: k={e.num_speculative_tokens}"
            for e in d.schedule))
    elif not d.decided:
        lines.append("Decision: none made (nothing was measured to compare)")
    else:
        lines.append("Decision: speculation: none")
    if d.load:
        lines.append(f"Stated load: {d.load}" + (f" ({_MODES[d.mode]})" if d.speculate and d.mode else ""))
    lines.append(f"Why: {d.why}")
    for pc in d.per_concurrency:
        if pc.note and d.speculate:
            lines.append(f"  c={pc.concurrency}: {pc.note}")
    if rep.settings.slo:
        targets = [f"TPOT <= {rep.settings.slo_tpot_ms:g} ms" if rep.settings.slo_tpot_ms else "",
                   f"TTFT <= {rep.settings.slo_ttft_ms:g} ms" if rep.settings.slo_ttft_ms else ""]
        lines.append("Speedups compare goodput: output tokens/s of the requests within " +
                     " and ".join(x for x in targets if x) + ".")
    elif rates:
        lines.append("At a request rate every arm delivers what arrives: the speedup there is the control's TPOT p50 "
                     "over the trial's.")
    for x in d.crossovers:
        lines.append(f"Crossover ({x.trial}): " + _crossover_text(x))
    lines += d.notes
    out.append(Text("\n".join(lines)))
    if rep.acceptance:
        a = Table(title="Acceptance: predicted (before this tune) vs measured", title_justify="left")
        for col in ("candidate", "k", "predicted len", "measured len", "measured rate", "off by"):
            a.add_column(col, justify="left" if col == "candidate" else "right")
        for x in rep.acceptance:
            a.add_row(x.candidate, str(x.k), _f(x.predicted_length), _f(x.measured_length),
                      "-" if x.measured_rate is None else f"{x.measured_rate:.1%}",
                      "-" if x.error is None else f"{x.error:+.0%}")
        out.append(a)
    if rep.chain:
        lines = ["Acceptance length at shorter k, carried from each candidate's deepest trial (measured where run):"]
        by: dict[str, list[str]] = {}
        for p in rep.chain:
            by.setdefault(p.candidate, []).append(f"k={p.k} {_f(p.from_deepest)} (measured {_f(p.measured)})")
        lines += [f"  {c}: " + "; ".join(v) for c, v in by.items()]
        out.append(Text("\n".join(lines)))
    failed = [tr for tr in rep.trials if tr.status != "done"]
    notes = list(rep.plan.notes)
    for tr in failed:
        notes.append(f"{tr.id} failed: {tr.error}")
        notes += [f"  | {ln}" for ln in tr.log_tail[-8:]]
    notes += rep.notes
    if notes:
        out.append(Text("\n".join(notes)))
    return out
