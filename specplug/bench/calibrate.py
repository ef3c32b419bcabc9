"""Calibration: measured acceptance (from a bench) against what ``estimate`` predicted, written as the
policy's calibration YAML so later estimates use the measurement instead of the prior."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

from pydantic import BaseModel

from specplug.bench.metrics import Acceptance
from specplug.bench.record import BenchRecord
from specplug.errors import SpecplugError
from specplug.stacks.registry import get_adapter, is_stack


class Side(BaseModel):
    acceptance_length: float | None = None
    acceptance_rate: float | None = None  # mean over drafted positions (accepted / drafted)
    speedup: float | None = None


class Row(BaseModel):
    concurrency: int
    measured: Side
    before: Side
    after: Side


class CalibrateReport(BaseModel):
    model: str
    method: str
    workload: str
    stack: str
    gpu: str
    gpu_note: str = ""
    temperature: float
    num_speculative_tokens: int | None
    calibration_file: str
    entry: dict
    rows: list[Row]
    notes: list[str] = []


def pooled_acceptance(record: BenchRecord) -> Acceptance | None:
    """One acceptance over every level: counters add up; gauges and lengths are averaged."""
    accs = [lv.speculative.acceptance for lv in record.levels if lv.speculative and lv.speculative.acceptance]
    if not accs:
        return None
    if all(a.drafts and a.draft_tokens is not None and a.accepted_tokens is not None for a in accs):
        drafts = sum(a.drafts or 0 for a in accs)
        tokens = sum(a.draft_tokens or 0 for a in accs)
        acc = sum(a.accepted_tokens or 0 for a in accs)
        return Acceptance(
            source=accs[0].source, drafts=drafts, draft_tokens=tokens, accepted_tokens=acc,
            acceptance_rate=acc / tokens if tokens else None, mean_acceptance_length=1 + acc / drafts,
        )
    lens = [a.mean_acceptance_length for a in accs if a.mean_acceptance_length is not None]
    rates = [a.acceptance_rate for a in accs if a.acceptance_rate is not None]
    return Acceptance(
        source=accs[0].source,
        mean_acceptance_length=sum(lens) / len(lens) if lens else None,
        acceptance_rate=sum(rates) / len(rates) if rates else None,
    )


def infer_k(acc: Acceptance) -> int | None:
    """The draft length the server used: draft tokens per draft (n-gram may propose fewer, so round up)."""
    if acc.drafts and acc.draft_tokens:
        return max(1, math.ceil(acc.draft_tokens / acc.drafts - 1e-9))
    return None


def _server_k(acc: Acceptance | None, given: int | None) -> tuple[int | None, str | None]:
    """The draft length to label the entry with: the one the server ran, read from its counters (draft tokens per
    draft), over a -k that is lower than what it drafted; a note says when the given k was overruled. A measured
    length below -k is kept as -k: n-gram drafts and per-batch schedules propose fewer than their k."""
    ran = infer_k(acc) if acc is not None else None
    if given is None or ran is None or ran <= given:
        return given, None
    return ran, (f"The server drafted {ran} tokens per step (its counters), more than -k {given}: the entry is labelled "
                 f"k={ran}, the draft length it ran.")


def _need_setup(workload: str | None, stack: str | None) -> None:
    """Ask once for everything the record does not say, rather than one flag per run."""
    from specplug.config import WORKLOADS

    missing = []
    if not workload:
        missing.append(f"--workload ({', '.join(WORKLOADS)}): the report does not say what traffic it measured")
    if not stack:
        missing.append("--stack: neither the report nor the server's metrics name the stack that served it")
    if missing:
        raise SpecplugError("The calibration entry needs what the report does not say.", "Pass " + "; and ".join(missing) + ".")


def _predicted(est) -> Side:
    k = est.num_speculative_tokens
    return Side(
        acceptance_length=est.acceptance_length,
        acceptance_rate=(est.acceptance_length - 1) / k if k else None,
        speedup=est.speedup,
    )


def _read_existing(path: Path):
    from specplug.policy.calibration import Calibration, load_calibration

    return load_calibration(path) if path.exists() else Calibration()


def _same_key(a, b) -> bool:
    keys = ("model", "method", "workload", "drafter", "stack", "temperature")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def calibrate(
    record: BenchRecord,
    *,
    model: str,
    method: str,
    workload: str | None,
    out: str | Path,
    gpu: str | None = None,
    stack: str | None = None,
    drafter: str | None = None,
    num_speculative_tokens: int | None = None,
    num_gpus: int = 1,
) -> CalibrateReport:
    """Compare, write/merge the calibration file atomically, and re-estimate with it.

    ``workload`` and ``stack`` default to what the record says; ``num_speculative_tokens`` gives way to the draft
    length the server's counters show it ran, when that is longer (the report's first note says so)."""
    from specplug.catalog import get_model
    from specplug.config import METHODS, WORKLOADS
    from specplug.fileio import write_atomic
    from specplug.planning import estimate
    from specplug.policy.calibration import Calibration, CalibrationEntry
    from specplug.probe import resolve_hardware
    from specplug.serialize import dump_yaml

    workload = workload or record.workload
    stack = stack or record.stack
    _need_setup(workload, stack)
    if workload not in WORKLOADS:
        raise SpecplugError(f"Unknown workload '{workload}'.", f"Choose one of: {', '.join(WORKLOADS)}.")
    if method not in METHODS or method == "none":
        raise SpecplugError(
            f"Unknown speculative method '{method}'.", f"Choose one of: {', '.join(m for m in METHODS if m != 'none')}."
        )
    acc = pooled_acceptance(record)
    if acc is None or (acc.mean_acceptance_length is None and acc.acceptance_rate is None):
        raise SpecplugError(
            "The bench measured no acceptance: the endpoint exposed no speculative-decoding metrics.",
            "Check that speculation is on and metrics are enabled (SGLang: --enable-metrics; llama.cpp: --metrics).",
        )
    k, k_note = _server_k(acc, num_speculative_tokens)
    k = k or infer_k(acc)
    hf_id = get_model(model).hf_id
    hw = resolve_hardware(gpu, num_gpus)
    rate = acc.acceptance_rate
    if rate is None and acc.mean_acceptance_length is not None and k:
        rate = (acc.mean_acceptance_length - 1) / k
    if rate is not None:
        rate = min(max(rate, 1e-3), 0.999)  # the schema's open interval; 0 or 1 exactly means too few samples
    length = acc.mean_acceptance_length if (acc.mean_acceptance_length and k) else None
    if rate is None and length is None:
        raise SpecplugError("Acceptance length without a draft length: pass --num-speculative-tokens.")
    levels = [lv for lv in record.levels if lv.speculative]
    first = min(levels, key=lambda lv: lv.concurrency)
    entry = CalibrationEntry(
        model=hf_id, method=method, workload=workload, drafter=drafter, stack=stack, temperature=record.temperature,
        num_speculative_tokens=k, acceptance_rate=round(rate, 4) if rate is not None else None,
        acceptance_length=round(length, 4) if length is not None else None,
        measured_speedup=round(first.speedup, 4) if first.speedup else None, batch_size=first.concurrency,
        measured_at=datetime.date.today().isoformat(),
    )
    path = Path(out)
    existing = _read_existing(path)

    def est(conc: int, cal: str | None):
        return estimate(
            hf_id, method, drafter=drafter, num_speculative_tokens=k, gpu=hw.gpu, num_gpus=hw.num_gpus,
            batch_size=conc, workload=workload, temperature=record.temperature, stack=stack,
            output_len=record.max_tokens, calibration=cal,
        )

    before = {lv.concurrency: _predicted(est(lv.concurrency, str(path) if path.exists() else None)) for lv in levels}
    merged = Calibration(entries=[e for e in existing.entries if not _same_key(e, entry)] + [entry])
    text = "# Written by 'specplug calibrate': measured acceptance replaces the policy's prior for this setup.\n"
    text += dump_yaml(merged.model_dump(mode="json", exclude_none=True))
    write_atomic(path, text)
    rows = []
    for lv in levels:
        a = lv.speculative.acceptance if lv.speculative else None
        rows.append(Row(
            concurrency=lv.concurrency,
            measured=Side(
                acceptance_length=a.mean_acceptance_length if a else None,
                acceptance_rate=a.acceptance_rate if a else None,
                speedup=lv.speedup,
            ),
            before=before[lv.concurrency],
            after=_predicted(est(lv.concurrency, str(path))),
        ))
    notes = [k_note] if k_note else []
    if hw.source == "default":
        notes.append(f"No GPU named or found: speedups are predicted for {hw.gpu}; acceptance does not depend on it.")
    if hw.source == "default" and stack and is_stack(stack) and get_adapter(stack).runs_without_gpu(None):
        notes.append(f"{get_adapter(stack).display_name}'s speed on a CPU is outside the GPU cost model: compare "
                     "acceptance, and read predicted speedups as what the same setup would give on the named GPU.")
    return CalibrateReport(
        model=hf_id, method=method, workload=workload, stack=stack, gpu=hw.gpu, gpu_note=hw.note,
        temperature=record.temperature, num_speculative_tokens=k, calibration_file=str(path),
        entry=entry.model_dump(mode="json", exclude_none=True), rows=rows, notes=notes,
    )
