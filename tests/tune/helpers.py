"""Measurements built by hand, for the tune's decision logic."""

from __future__ import annotations

from specplug.bench.metrics import Acceptance
from specplug.bench.record import Percentiles, RunStats
from specplug.tune.state import Output, TrialResult


def run(conc: int, tok_s: float, *, drafts: float = 0, per_pos: list[float] | None = None, accepted: float = 0,
        k: int = 0) -> RunStats:
    acc = None
    if drafts:
        acc = Acceptance(source="vllm counters", drafts=drafts, draft_tokens=drafts * k, accepted_tokens=accepted,
                         acceptance_rate=accepted / (drafts * k), mean_acceptance_length=1 + accepted / drafts,
                         per_position=per_pos or [])
    return RunStats(role="speculative", concurrency=conc, requests=8, wall_s=10.0, output_tokens=int(tok_s * 10),
                    output_tokens_per_s=tok_s, ttft_s=Percentiles.of([0.1, 0.2]), tpot_s=Percentiles.of([0.01, 0.02]),
                    acceptance=acc)


def rate_run(rate: float, tpot_ms: float, *, goodput: float | None = None, output_len: int = 64) -> RunStats:
    """An open-loop level: Poisson arrivals at ``rate``/s, each stream decoding at ``tpot_ms`` per token (p50)."""
    tpot = tpot_ms / 1000.0
    return RunStats(role="speculative", concurrency=0, request_rate=rate, requests=16, wall_s=16 / rate,
                    output_tokens=16 * output_len, output_tokens_per_s=rate * output_len,
                    goodput_tokens_per_s=goodput, ttft_s=Percentiles.of([0.1, 0.2]),
                    tpot_s=Percentiles.of([tpot * 0.9, tpot * 1.1]))


def trial(id_: str, method: str, k: int, speeds: dict[int, list[float]], *, outputs: list[str] | None = None,
          status: str = "done", drafter: str | None = None, rates: dict[float, list[float]] | None = None,
          goodput: dict[int | float, list[float]] | None = None) -> TrialResult:
    """``speeds``: output tokens/s per concurrency per repeat; ``rates``: TPOT p50 ms per request rate per repeat;
    ``goodput``: tokens/s within the targets per level (concurrency or rate) per repeat."""
    good = {lv: list(v) for lv, v in (goodput or {}).items()}
    runs = [run(c, s, drafts=100 if k else 0, per_pos=[0.8, 0.6, 0.4, 0.2, 0.1][:k], accepted=100 * sum([0.8, 0.6, 0.4, 0.2, 0.1][:k]), k=k)
            for c, ss in speeds.items() for s in ss]
    for r in runs:
        if r.concurrency in good:
            r.goodput_tokens_per_s = good[r.concurrency].pop(0)
    runs += [rate_run(rt, t, goodput=good[rt].pop(0) if rt in good else None)
             for rt, ts in (rates or {}).items() for t in ts]
    outs = [Output(prompt_id=f"p{i}", text=t, tokens=list(t)) for i, t in enumerate(outputs or ["abc", "def"])]
    return TrialResult(id=id_, method=method, drafter=drafter, k=k, status=status, runs=runs if status == "done" else [],
                       outputs=outs if status == "done" else [], launch_s=5.0, wall_s=30.0)
