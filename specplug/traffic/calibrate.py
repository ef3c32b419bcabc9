"""``specplug calibrate --traffic FILE``: replayed n-gram / suffix acceptance written as calibration entries,
with the same before / measured / after report a bench calibration gives."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specplug.errors import SpecplugError

if TYPE_CHECKING:
    from specplug.traffic.records import ReadProgress

REPLAY_STACK = "vllm"  # the stack whose proposers the replay follows (and the one that serves suffix decoding)


def calibrate_traffic(
    path: str | Path,
    *,
    model: str,
    method: str | None,
    workload: str | None,
    out: str | Path,
    gpu: str | None = None,
    num_gpus: int = 1,
    num_speculative_tokens: int | None = None,
    field_map: str | None = None,
    progress: ReadProgress | None = None,
) -> list:
    """Replay ``path`` for ``model``, merge its entries into ``out`` and report each method."""
    from specplug.bench.calibrate import CalibrateReport, Row, Side
    from specplug.catalog import get_model
    from specplug.config import WORKLOADS
    from specplug.planning import estimate
    from specplug.policy.calibration import entries_from_traffic, merge_into
    from specplug.policy.data import load_policy
    from specplug.probe import resolve_hardware
    from specplug.traffic import load_traffic

    methods = ("ngram", "suffix") if method is None else (method,)
    if any(m not in ("ngram", "suffix") for m in methods):
        raise SpecplugError(f"A traffic log calibrates copy-based methods only, not '{method}'.",
                            "Use --method ngram or suffix (or leave it out for both); bench learned drafters with --endpoint.")
    workload = workload or "chat"
    if workload not in WORKLOADS:
        raise SpecplugError(f"Unknown workload '{workload}'.", f"Choose one of: {', '.join(WORKLOADS)}.")
    m = get_model(model)
    pol = load_policy()
    k = num_speculative_tokens or pol.prior(methods[0]).default_k
    prof = load_traffic(path, m, k_max=max(8, k), progress=progress, field_map=field_map)
    hw = resolve_hardware(gpu, num_gpus)
    target = Path(out)

    def est(meth: str, cal: str | None):
        return estimate(m.hf_id, meth, num_speculative_tokens=k, gpu=hw.gpu, num_gpus=hw.num_gpus, workload=workload,
                        temperature=0.0, stack=REPLAY_STACK, input_len=max(1, round(prof.input_len)),
                        output_len=max(1, round(prof.output_len)), calibration=cal)

    before = {meth: est(meth, str(target) if target.exists() else None) for meth in methods}
    entries = entries_from_traffic(prof, m.hf_id, workload, k, methods)
    merge_into(target, entries)
    notes = [
        f"Replayed {prof.replayed} of {prof.requests} requests in {prof.path} ({prof.tokenizer})"
        + (f"; {prof.malformed_text()}" if prof.malformed else "") + ".",
        prof.shape_text()[0].upper() + prof.shape_text()[1:] + ".",
        "Replay measures greedy acceptance (a draft token counts when it equals the logged one), so the entries "
        "apply at temperature 0 and to any stack.",
    ]
    if workload == "chat":
        notes.append("Entries are filed under workload 'chat'; pass --workload to file them under your traffic's type.")
    reports = []
    for e in entries:
        after = est(e.method, str(target))

        def side(x) -> Side:
            return Side(acceptance_length=x.acceptance_length, acceptance_rate=(x.acceptance_length - 1) / k, speedup=x.speedup)

        reports.append(CalibrateReport(
            model=m.hf_id, method=e.method, workload=workload, stack=f"{REPLAY_STACK} (replayed)", gpu=hw.gpu,
            gpu_note=hw.note, temperature=0.0, num_speculative_tokens=k, calibration_file=str(target),
            entry=e.model_dump(mode="json", exclude_none=True),
            rows=[Row(concurrency=1, measured=Side(acceptance_length=e.acceptance_length, acceptance_rate=e.acceptance_rate),
                      before=side(before[e.method]), after=side(after))],
            notes=[],
        ))
    if reports:
        reports[-1].notes = notes  # said once, under the last table
    return reports
