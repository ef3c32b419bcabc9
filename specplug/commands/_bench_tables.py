"""The tables bench, verify and calibrate print: rich renderables built from the reports the library returns
(:mod:`specplug.bench.record`, :mod:`specplug.bench.verify`, :mod:`specplug.bench.calibrate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specplug.bench.calibrate import CalibrateReport
    from specplug.bench.record import BenchRecord
    from specplug.bench.verify import VerifyReport


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _trio(p: Any) -> str:
    return f"{_ms(p.p50)}/{_ms(p.p90)}/{_ms(p.p99)}"


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def bench_table(record: BenchRecord) -> list[Any]:
    """Rich renderables: one row per endpoint per concurrency, then the verdict."""
    from rich.table import Table
    from rich.text import Text

    src = record.workload or record.prompts_file or "?"
    title = f"specplug bench: {record.model or '?'} on {record.stack or 'unknown stack'}, workload {src}"
    t = Table(title=title, title_justify="left")
    for col in ("conc", "run", "ok/err", "req/s", "out tok/s", "TTFT ms p50/90/99", "TPOT ms p50/90/99",
                "acc len", "acc rate", "speedup"):
        t.add_column(col, justify="right" if col not in ("run",) else "left")
    for lv in record.levels:
        for stats in (lv.speculative, lv.baseline):
            if stats is None:
                continue
            spec = stats.role == "speculative"
            acc = stats.acceptance
            speed = ""
            if spec and lv.speedup is not None:
                style = "green" if lv.speedup >= 1.0 else "red"
                speed = f"[{style}]{lv.speedup:.2f}x[/{style}]"
            t.add_row(
                str(lv.concurrency) if spec else "",
                ("spec" if spec else "base") + (" (cut)" if stats.interrupted else ""),
                f"{stats.requests}/{stats.failed}",
                _num(stats.requests_per_s),
                _num(stats.output_tokens_per_s, ".1f"),
                _trio(stats.ttft_s),
                _trio(stats.tpot_s),
                _num(acc.mean_acceptance_length) if acc else "-",
                (f"{acc.acceptance_rate:.1%}" if acc and acc.acceptance_rate is not None else "-"),
                speed,
            )
        t.add_section()
    out: list[Any] = [t]
    lines = [record.verdict] if record.verdict else []
    per_pos = _per_position(record)
    if per_pos:
        lines.append(per_pos)
    for lv in record.levels:
        for stats in (lv.speculative, lv.baseline):
            for e in stats.errors if stats else []:
                lines.append(f"conc {lv.concurrency} {stats.role}: {e}")
    if not record.complete:
        lines.append("Interrupted: the table holds what finished.")
    lines.extend(record.notes)
    if lines:
        out.append(Text("\n".join(lines)))
    return out


def _per_position(record: BenchRecord) -> str:
    parts = []
    for lv in record.levels:
        acc = lv.speculative.acceptance if lv.speculative else None
        if acc and acc.per_position:
            parts.append(f"c={lv.concurrency}: " + " ".join(f"{x:.2f}" for x in acc.per_position))
    return ("Per-position acceptance " + "; ".join(parts)) if parts else ""


def verify_table(rep: VerifyReport) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    head = Text(
        f"specplug verify: {rep.model or '?'}  {rep.endpoint} vs baseline {rep.baseline}\n"
        f"{rep.identical}/{rep.prompts} identical ({rep.share_identical:.0%}) by {rep.compared_by}, "
        f"max_tokens {rep.max_tokens}, temperature 0"
    )
    out: list = [head]
    for c in rep.schema_checks:
        line = (f"JSON schema {rep.json_schema}: {c.role} {c.valid}/{c.outputs} valid, {c.parsed}/{c.outputs} parse as JSON"
                + (f", {c.truncated} cut at max_tokens" if c.truncated else ""))
        out.append(Text(line + (f" (first invalid: {c.first_problem})" if c.first_problem else ""),
                        style="red" if c.broken else ""))
    diffs = [r for r in rep.results if not r.identical]
    if diffs:
        t = Table(title="Differences (first diverging position)", title_justify="left")
        for col in ("prompt", "kind", "position", "margin", "after ...", "baseline", "speculative"):
            t.add_column(col, overflow="fold")
        for r in diffs:
            if r.kind == "error":
                t.add_row(r.prompt_id, "error", "", "", "", r.error or "", "")
                continue
            t.add_row(
                r.prompt_id, r.kind, f"{r.unit} {r.position} of {r.length_baseline}",
                "-" if r.margin is None else f"{r.margin:.3f}", repr(r.context), repr(r.baseline_text),
                repr(r.speculative_text),
            )
        out.append(t)
        out.append(Text(rep.explanation, style="dim"))
    style = "red" if rep.failed else "green"
    out.append(Text(rep.verdict, style=style))
    return out


def calibrate_table(rep: CalibrateReport) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    t = Table(
        title=f"specplug calibrate: {rep.model} {rep.method} on {rep.stack} ({rep.gpu}), workload {rep.workload}, "
        f"k={rep.num_speculative_tokens or '?'}",
        title_justify="left",
    )
    for col in ("conc", "", "accept len", "accept rate", "speedup"):
        t.add_column(col, justify="right" if col else "left")
    for r in rep.rows:
        for label, side in (("predicted before", r.before), ("measured", r.measured), ("predicted after", r.after)):
            t.add_row(
                str(r.concurrency) if label == "predicted before" else "", label,
                f(side.acceptance_length, ".2f"), f(side.acceptance_rate, ".1%"),
                "-" if side.speedup is None else f"{side.speedup:.2f}x",
            )
        t.add_section()
    lines = [f"Wrote {rep.calibration_file}: use it with --calibration {rep.calibration_file} "
             "or 'calibration:' in specplug.yaml."]
    lines += rep.notes
    return [t, Text("\n".join(lines))]
