"""The evidence a tune leaves in its folder: tune.json (everything), tune.csv (one row per trial and
concurrency) and tune.png (speedup against concurrency per candidate, with the control's line)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from specplug.errors import SpecplugError, invalid
from specplug.fileio import read_json_object
from specplug.tune.decide import Decision, TrialSummary
from specplug.tune.feedback import AcceptanceCheck
from specplug.tune.settings import TuneSettings
from specplug.tune.trials import TrialPlan

REPORT_KIND = "specplug-tune"
REPORT_VERSION = 1


class ChainPoint(BaseModel):
    """A candidate's acceptance length at k, carried from its deepest trial and, where run, measured."""

    candidate: str
    k: int
    from_deepest: float | None = None
    measured: float | None = None


class TuneReport(BaseModel):
    kind: str = REPORT_KIND
    version: int = REPORT_VERSION
    specplug_version: str = ""
    created: str = ""
    config_file: str
    model: str
    stack: str
    stack_version: str | None = None
    hardware: str
    prompts: str
    settings: TuneSettings
    inputs: dict[str, Any] = Field(description="What the measurements depended on (see specplug.tune.lockref).")
    plan: TrialPlan
    trials: list[TrialSummary]
    decision: Decision
    acceptance: list[AcceptanceCheck] = Field(default_factory=list)
    chain: list[ChainPoint] = Field(default_factory=list)
    calibration_file: str | None = None
    complete: bool = True
    notes: list[str] = Field(default_factory=list)


CSV_FIELDS = [
    "trial", "method", "drafter", "k", "status", "concurrency", "request_rate", "repeats", "output_tokens_per_s",
    "score", "spread", "speedup",
    "speedup_low", "speedup_high", "beats_control", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
    "tpot_p90_s", "tpot_p99_s", "acceptance_length", "failed", "lossless",
]


def to_csv(rep: TuneReport) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for t in rep.trials:
        ll = "" if t.lossless is None else ("yes" if t.lossless.ok else f"no ({t.lossless.systematic} systematic)")
        if not t.levels:
            w.writerow({"trial": t.id, "method": t.method, "drafter": t.drafter or "", "k": t.k, "status": t.status})
            continue
        for lv in t.levels:
            sp = next((s for s in t.speedups if (s.concurrency, s.request_rate) == (lv.concurrency, lv.request_rate)),
                      None)
            row: dict[str, Any] = {
                "trial": t.id, "method": t.method, "drafter": t.drafter, "k": t.k, "status": t.status,
                "concurrency": lv.concurrency if lv.request_rate is None else None, "request_rate": lv.request_rate,
                "repeats": lv.repeats, "output_tokens_per_s": lv.mean_tokens_per_s, "score": lv.score,
                "spread": lv.spread, "speedup": sp.speedup if sp else (1.0 if t.k == 0 else None),
                "speedup_low": sp.low if sp else None, "speedup_high": sp.high if sp else None,
                "beats_control": (sp.passes if sp else None), "acceptance_length": lv.acceptance_length,
                "failed": lv.failed, "lossless": ll,
                "ttft_p50_s": lv.ttft_s.p50, "ttft_p90_s": lv.ttft_s.p90, "ttft_p99_s": lv.ttft_s.p99,
                "tpot_p50_s": lv.tpot_s.p50, "tpot_p90_s": lv.tpot_s.p90, "tpot_p99_s": lv.tpot_s.p99,
            }
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def best_per_candidate(rep: TuneReport) -> dict[str, list[tuple[int, float, float, float, int]]]:
    """Per candidate, per concurrency: its fastest k's (concurrency, speedup, low, high, k)."""
    out: dict[str, dict[int, tuple[int, float, float, float, int]]] = {}
    planned = {x.id: x.candidate for x in [*rep.plan.trials, *rep.plan.dropped]}  # mirrors told apart there
    for t in rep.trials:
        if t.k == 0:
            continue
        label = planned.get(t.id) or (t.method if not t.drafter else
                                      f"{t.method}({t.drafter.rstrip('/').rsplit('/', 1)[-1]})")
        for s in t.speedups:
            if s.request_rate is not None:  # the plot is against concurrency
                continue
            cur = out.setdefault(label, {}).get(s.concurrency)
            if cur is None or s.speedup > cur[1]:
                out[label][s.concurrency] = (s.concurrency, s.speedup, s.low, s.high, t.k)
    return {k: [v[c] for c in sorted(v)] for k, v in out.items()}


def plot_png(rep: TuneReport) -> bytes | None:
    """Speedup against concurrency per candidate (best k at each, bars from the repeats), the control's line at
    1.0 with its spread, and the bar speculation had to clear; None without matplotlib (the [bench] extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = rep.settings.concurrency
    fig, ax = plt.subplots(figsize=(7, 4.5))
    control = next((t for t in rep.trials if t.k == 0 and t.levels), None)
    ax.axhline(1.0, color="black", linewidth=1.2, label="control (K=0)")
    if control is not None:
        band = [(lv.concurrency, lv.spread or 0.0) for lv in control.levels if lv.request_rate is None]
        ax.fill_between([c for c, _ in band], [1 - s / 2 for _, s in band], [1 + s / 2 for _, s in band],
                        color="grey", alpha=0.2, label="control spread")
    ax.axhline(1.0 + rep.settings.margin, color="grey", linestyle=":", linewidth=1,
               label=f"margin ({rep.settings.margin:.0%}, + spread)")
    for label, pts in best_per_candidate(rep).items():
        cs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        err = [[max(p[1] - p[2], 0.0) for p in pts], [max(p[3] - p[1], 0.0) for p in pts]]
        line = ax.errorbar(cs, ys, yerr=err, marker="o", capsize=3, label=label)
        for c, y, k in zip(cs, ys, (p[4] for p in pts), strict=True):
            ax.annotate(f"k={k}", (c, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=line[0].get_color())
    if len(xs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tokens/s over the control's")
    ax.set_title(f"specplug tune: {rep.model.rstrip('/').rsplit('/', 1)[-1]} on {rep.stack} {rep.stack_version or ''}".strip())
    ax.legend(fontsize=8, loc="best")
    from specplug.bench.report import figure_png

    return figure_png(fig)


def write(rep: TuneReport, out_dir: str | Path) -> list[Path]:
    """tune.png, tune.csv, then tune.json last (it records whether the plot was written)."""
    from specplug.fileio import write_atomic, write_atomic_bytes
    from specplug.serialize import dump_json

    d = Path(out_dir)
    written = []
    png = plot_png(rep)
    if png is not None:
        written.append(write_atomic_bytes(d / "tune.png", png))
    else:
        rep.notes.append("No plot: matplotlib is not installed (pip install 'specplug[bench]').")
    written.append(write_atomic(d / "tune.csv", to_csv(rep)))
    written.append(write_atomic(d / "tune.json", dump_json(rep)))
    return written


def write_json(rep: TuneReport, out_dir: str | Path) -> Path:
    """tune.json alone: the report again once what it records has changed (the calibration written)."""
    from specplug.fileio import write_atomic
    from specplug.serialize import dump_json

    return write_atomic(Path(out_dir) / "tune.json", dump_json(rep))


def load(path: str | Path) -> TuneReport:
    p, data = read_json_object(path, "tune.json", "Pass the folder 'specplug tune -o DIR' wrote.")
    if data.get("kind") != REPORT_KIND:
        raise SpecplugError(f"{p} is not a specplug tune report.")
    try:
        return TuneReport.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, f"{p} is damaged", "Re-create it with 'specplug tune -o DIR --restart'.", SpecplugError) from None
