"""The rich table form of a Plan (what `specplug recommend` prints by default)."""

from __future__ import annotations

from typing import Any

from specplug.plan import LoadPrediction, Plan, ShapeAlternative


def _range(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _alternative_row(a: ShapeAlternative) -> tuple[str, ...]:
    if a.tree is not None and a.tree.topk > 1:
        shape = f"tree {a.tree.steps} steps x topk {a.tree.topk}, {a.tree.num_draft_tokens} tokens"
    else:
        shape = f"chain k={a.num_speculative_tokens}"
    verdict = "CHOSEN" if a.chosen else ("within the model's error" if a.within_error else "")
    return (shape, f"{a.speedup:.2f}x", f"{a.acceptance_length:.2f}", verdict, a.basis)


def _ms(x: float | None) -> str:
    return "queues" if x is None else f"{x:.1f}"


def load_tables(load: LoadPrediction) -> list[Any]:
    """Both arms at the request rate (recommend and estimate print the same table)."""
    from rich.text import Text

    from specplug.output import table

    within = load.max_request_rate_within_slo
    rows = []
    for name, arm, sat, slo in (("no speculation", load.baseline, load.saturation_request_rate.baseline,
                                 within.baseline if within else None),
                                ("speculation", load.speculative, load.saturation_request_rate.speculative,
                                 within.speculative if within else None)):
        rows.append((name, f"{arm.running_batch:.1f}", f"{arm.tpot_ms_p50:.1f} / {arm.tpot_ms_p90:.1f}",
                     f"{_ms(arm.ttft_ms_p50)} / {_ms(arm.ttft_ms_p90)}", f"{arm.output_tokens_per_s:,.0f}", f"{sat:.3g}",
                     *([f"{slo:.3g}"] if within else [])))
    cols = ["arm", "running batch", "TPOT ms p50/p90", "TTFT ms p50/p90", "output tok/s", "saturates at req/s",
            *(["max req/s within SLO (p90)"] if within else [])]
    out: list[Any] = [table(f"at {load.request_rate:g} requests/s (capacity {load.capacity_requests} requests)", cols, rows)]
    cross = load.crossover_request_rate
    if cross is None:
        out.append(Text(f"Speculation lowers TPOT up to the baseline's saturation ({load.saturation_request_rate.baseline:.3g} req/s)."))
    elif cross == 0:
        out.append(Text("Speculation does not lower TPOT at any request rate."))
    else:
        out.append(Text(f"Crossover: speculation stops lowering TPOT above {cross:.3g} requests/s."))
    out.append(Text(f"Basis: {load.basis}.", style="dim"))
    return out


def plan_tables(plan: Plan) -> list[Any]:
    from rich.text import Text

    from specplug.output import table

    s, p, hw = plan.speculation, plan.prediction, plan.hardware
    out: list[Any] = []
    if s.method == "none":
        choice = "no speculation"
    else:
        choice = f"{s.method}" + (f" with {s.drafter}" if s.drafter else "") + f", k={s.num_speculative_tokens}"
        if s.tree and s.tree.topk > 1:
            choice += f", tree steps {s.tree.steps} / topk {s.tree.topk} / {s.tree.num_draft_tokens} draft tokens"
        elif s.tree:
            choice += f" (steps {s.tree.steps}, topk 1, {s.tree.num_draft_tokens} draft tokens)"
    wl = plan.workload
    rows = [
        ("recommendation", choice),
        ("predicted speedup", (f"{p.speedup:.2f}x at batch size {p.batch_size or wl.concurrency}" + (f" (LOSSY: verification {s.verification})"
                                                                                    if s.lossy else ""))
         if s.method != "none" else "1.00x (off)"),
        ("acceptance length", f"{p.acceptance_length:.2f} tokens/step" + (f" (first draft token accepted {p.acceptance_rate:.0%})" if p.acceptance_rate else "")),
        ("stops paying above batch", f"never (up to capacity, {plan.capacity_requests})" if p.breakeven_batch_size is None
         else str(p.breakeven_batch_size)),
        *([("capacity", f"{plan.capacity_requests} requests at once"
            + (f" ({plan.capacity_requests_without_drafter} without the drafter)"
               if plan.capacity_requests_without_drafter != plan.capacity_requests else ""))]
          if plan.capacity_requests is not None else []),
        *([("loses below", f"{p.breakeven_acceptance_rate:.0%} of drafted tokens accepted (at batch {p.batch_size or wl.concurrency})")]
          if p.breakeven_acceptance_rate is not None else []),
        *([("request rate", f"{wl.request_rate:g} requests/s")] if wl.request_rate is not None else []),
        ("model", f"{plan.model.name} ({plan.model.hf_id})"),
        ("hardware", f"{hw.num_gpus} x {hw.gpu} ({hw.memory_gb:g} GiB, {hw.source}); TP {plan.parallelism.tensor_parallel_size}"
         + (f", PP {plan.parallelism.pipeline_parallel_size}" if plan.parallelism.pipeline_parallel_size > 1 else "")),
        ("stack", f"{plan.stack.name} {plan.stack.version or '(version unknown)'}"),
        # Under a request rate the running batch is the load model's (the headline says it), not a concurrency.
        ("traffic", f"{wl.type}, {'Poisson arrivals' if wl.request_rate is not None else f'{wl.concurrency} concurrent'}, "
                    f"{wl.input_len} in / {wl.output_len} out, T={wl.temperature:g}"),
    ]
    out.append(table("specplug recommend", ["", ""], rows))
    if plan.reasons:
        out.append(Text("Why:", style="bold"))
        out += [Text(f"  - {r}") for r in plan.reasons]
    m = plan.memory
    if m is not None:
        out.append(
            table(
                f"memory per GPU (decimal GB: {hw.memory_gb:g} GiB = {m.gpu_memory_gb:g} GB)" + ("" if m.fits else " - DOES NOT FIT"),
                ["GPU", "target weights", "drafter weights", "KV cache", "drafter KV", "activations", "headroom", "fits"],
                [(f"{m.gpu_memory_gb:g}", f"{m.target_weights_gb:.1f}", f"{m.drafter_weights_gb:.2f}", f"{m.kv_cache_gb:.1f}",
                  f"{m.drafter_kv_cache_gb:.2f}", f"{m.activations_gb:.1f}", f"{m.headroom_gb:.1f}", "yes" if m.fits else "NO")],
            )
        )
        if m.hint:
            out.append(Text(m.hint, style="bold red"))
    if s.schedule:
        out.append(
            table("schedule (k per running batch size; 0 = off)", ["batch sizes", "k"],
                  [(_range(e.min_batch, e.max_batch), e.num_speculative_tokens) for e in s.schedule])
        )
    if p.curve:
        out.append(
            table("predicted curve", ["batch", *[str(c.batch_size) for c in p.curve]],
                  [("speedup", *[f"{c.speedup:.2f}" for c in p.curve]), ("k", *[str(c.num_speculative_tokens) for c in p.curve])])
        )
    if plan.load is not None:
        out += load_tables(plan.load)
    if plan.alternatives:
        out.append(table(f"shapes for {s.method} (best first)", ["shape", "speedup", "tokens/step", "", "basis"],
                         [_alternative_row(a) for a in plan.alternatives]))
    out.append(
        table(
            "candidates",
            ["method", "drafter", "k", "speedup", "tokens/step", "verdict"],
            [
                (c.method, c.drafter or "", c.num_speculative_tokens or "", f"{c.speedup:.2f}x" if c.speedup else "",
                 f"{c.acceptance_length:.2f}" if c.acceptance_length else "",
                 "CHOSEN" if c.chosen else (c.ruled_out or "eligible"))
                for c in plan.candidates
            ],
        )
    )
    for w in plan.warnings:
        out.append(Text(f"warning: {w}", style="yellow"))
    return out
