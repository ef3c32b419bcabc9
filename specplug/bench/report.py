"""A bench record as files: CSV, the PNG plot, and the output folder (the table is the CLI's:
:mod:`specplug.commands._bench_tables`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from specplug.bench.record import BenchRecord, RunStats
from specplug.fileio import write_atomic, write_atomic_bytes

CSV_FIELDS = [
    "concurrency", "role", "requests", "failed", "wall_s", "output_tokens", "requests_per_s", "output_tokens_per_s",
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "latency_p50_s",
    "latency_p90_s", "latency_p99_s", "acceptance_source", "drafts", "draft_tokens", "accepted_tokens",
    "acceptance_rate", "mean_acceptance_length", "per_position", "speedup", "tpot_speedup",
]


def to_csv(record: BenchRecord) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for lv in record.levels:
        for s in (lv.speculative, lv.baseline):
            if s is not None:
                w.writerow(_csv_row(lv.concurrency, s, lv.speedup, lv.tpot_speedup))
    return buf.getvalue()


def _csv_row(conc: int, s: RunStats, speedup: float | None, tpot_speedup: float | None) -> dict[str, Any]:
    a = s.acceptance
    spec = s.role == "speculative"
    row: dict[str, Any] = {
        "concurrency": conc, "role": s.role, "requests": s.requests, "failed": s.failed, "wall_s": s.wall_s,
        "output_tokens": s.output_tokens, "requests_per_s": s.requests_per_s, "output_tokens_per_s": s.output_tokens_per_s,
        "speedup": speedup if spec else None, "tpot_speedup": tpot_speedup if spec else None,
    }
    for name, p in (("ttft", s.ttft_s), ("tpot", s.tpot_s), ("latency", s.latency_s)):
        row.update({f"{name}_p50_s": p.p50, f"{name}_p90_s": p.p90, f"{name}_p99_s": p.p99})
    if a:
        row.update(
            acceptance_source=a.source, drafts=a.drafts, draft_tokens=a.draft_tokens, accepted_tokens=a.accepted_tokens,
            acceptance_rate=a.acceptance_rate, mean_acceptance_length=a.mean_acceptance_length,
            per_position=" ".join(f"{x:.4f}" for x in a.per_position),
        )
    return {k: ("" if v is None else v) for k, v in row.items()}


def plot_png(record: BenchRecord) -> bytes | None:
    """Speedup and acceptance against concurrency; None when matplotlib is missing (the [bench] extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    levels = [lv for lv in record.levels if lv.speculative is not None]
    xs = [lv.concurrency for lv in levels]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    sp = [(lv.concurrency, lv.speedup) for lv in levels if lv.speedup is not None]
    if sp:
        ax1.plot([x for x, _ in sp], [y for _, y in sp], marker="o", label="throughput speedup")
    tp = [(lv.concurrency, lv.tpot_speedup) for lv in levels if lv.tpot_speedup is not None]
    if tp:
        ax1.plot([x for x, _ in tp], [y for _, y in tp], marker="s", linestyle="--", label="per-token latency speedup")
    ax1.axhline(1.0, color="grey", linewidth=1)
    ax1.set_title("Speedup vs concurrency")
    ax1.set_xlabel("concurrency")
    ax1.set_ylabel("speculative / baseline")
    acc = [(lv.concurrency, lv.speculative.acceptance) for lv in levels if lv.speculative and lv.speculative.acceptance]
    lens = [(x, a.mean_acceptance_length) for x, a in acc if a.mean_acceptance_length is not None]
    rates = [(x, a.acceptance_rate) for x, a in acc if a.acceptance_rate is not None]
    if lens:
        ax2.plot([x for x, _ in lens], [y for _, y in lens], marker="o", color="tab:green", label="mean acceptance length")
        ax2.set_ylabel("tokens per target pass")
    if rates:
        ax2r = ax2.twinx()
        ax2r.plot([x for x, _ in rates], [y for _, y in rates], marker="^", color="tab:orange", label="acceptance rate")
        ax2r.set_ylim(0, 1)
        ax2r.set_ylabel("accepted / drafted")
        ax2r.legend(loc="lower right")
    ax2.set_title("Acceptance vs concurrency")
    ax2.set_xlabel("concurrency")
    for ax in (ax1, ax2):
        if len(xs) > 1 and min(xs) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs or [1])
        ax.set_xticklabels([str(x) for x in xs] or ["1"])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right" if ax is ax1 else "upper left")
    fig.suptitle(f"{record.model or ''} {record.stack or ''} {record.workload or record.prompts_file or ''}".strip())
    return figure_png(fig)


def figure_png(fig: Any) -> bytes:
    """A laid-out matplotlib figure as PNG bytes (written atomically by the caller); the figure is closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def write_outputs(record: BenchRecord, out_dir: str | Path) -> list[Path]:
    """bench.json, bench.csv and bench.png into ``out_dir`` (each written atomically)."""
    from specplug.serialize import dump_json

    d = Path(out_dir)
    written = [write_atomic(d / "bench.json", dump_json(record)), write_atomic(d / "bench.csv", to_csv(record))]
    png = plot_png(record)
    if png is not None:
        written.append(write_atomic_bytes(d / "bench.png", png))
    else:
        record.notes.append("No plot: matplotlib is not installed (pip install 'specplug[bench]').")
    return written
