"""The planning stages after the stack is known: hardware and precision, feasibility, candidates, the
decision, its per-batch schedule, memory, and the Plan."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specplug.capabilities import ACCEPTANCE_GATE, ACCEPTANCE_RATE_GATE
from specplug.catalog import Model, get_gpu
from specplug.catalog.drafters import Drafter
from specplug.catalog.models import served_revision
from specplug.compat import CompatRow, drafter_features, model_features, serve_features
from specplug.config import Config, ServeSpec, SpeculationSpec, TreeSpec
from specplug.errors import SpecplugError
from specplug.methods import COPY_METHODS, HEAD_METHODS, LOOKUP_METHODS
from specplug.plan import (
    Candidate,
    CurvePoint,
    MemoryBudget,
    ModelRef,
    Parallelism,
    Plan,
    Prediction,
    ScheduleEntry,
    ShapeAlternative,
    Speculation,
    StackRef,
)
from specplug.policy import arms, context
from specplug.policy import engine as E
from specplug.policy import load as loadmodel
from specplug.policy.perf import Arch, Outcome, Shape
from specplug.policy.schema import Policy
from specplug.policy.stages import (
    Budgeted,
    Costed,
    Decision,
    Fit,
    Hard,
    Inputs,
    Loaded,
    Planning,
    Request,
    Scores,
    Speculated,
    StackNotes,
    Work,
)

if TYPE_CHECKING:
    from specplug.capabilities import StackCapabilities
    from specplug.probe import Hardware

NGRAM_LOOKUP = (2, 4)
# Shapes shown beside the chosen one: the chosen and the next best, three in all.
ALTERNATIVES = 3


def _candidates(c: E.Context, model: Model, caps: StackCapabilities, kvb: float,
                found: Sequence[Drafter] = ()) -> list[E.DraftChoice]:
    """A choice per method: ``found`` adds drafters published outside the catalog (the caller's discovery)."""
    stack, supported, version = caps.name, caps.methods, caps.version
    out: list[E.DraftChoice] = []
    for method in E.METHOD_ORDER:
        if method not in c.policy.acceptance.methods:
            continue
        reason = supported.get(method, f"{stack} does not offer {method}")
        if method in COPY_METHODS:
            out.append(E.DraftChoice(method, ruled_out=reason))
        elif method == "mtp":
            d = E.DraftChoice(method, model.hf_id if model.mtp_layers else None, ruled_out=reason)
            if not model.mtp_layers:
                d.ruled_out = f"{model.name} has no MTP layers"
            out.append(d)
        elif method == "draft_model":
            out.extend(_draft_models(c, model, caps, kvb, reason))
        else:
            heads = model.known_drafters(method)
            known = {h.drafter_hf_id.lower() for h in heads}
            heads += [d for d in found if d.method == method and d.drafter_hf_id.lower() not in known]
            if not heads:
                from specplug.catalog.drafters import drafters_for

                named = drafters_for(model.base_model or model.hf_id, method, include_unconfirmed=True)
                if named and not reason:
                    # Guides name it but no source confirms the repository exists: shown with its prediction,
                    # never chosen.
                    d = E.DraftChoice(method, named[0].drafter_hf_id, catalog=named[0])
                    d.unconfirmed = (
                        f"{named[0].drafter_hf_id} is named in third-party guides but not confirmed to exist; "
                        "pass --drafter to use it"
                    )
                    out.append(d)
                    continue
                out.append(E.DraftChoice(method, ruled_out=reason or f"no known {method} head for {model.name} (pass --drafter)"))
                continue
            # Prefer a head without a known problem here, then one shown loading in this stack, then the first.
            rules = c.policy.rules
            heads = sorted(
                heads,
                key=lambda h: (
                    rules.known_issue(h.drafter_hf_id, stack, version) is not None,
                    stack not in h.stacks_known_to_load_it.lower(),
                    heads.index(h),
                ),
            )
            issue = rules.known_issue(heads[0].drafter_hf_id, stack, version)
            if issue and not reason:
                reason = f"known problem in {stack}: {issue.reason}"
            out.append(E.DraftChoice(method, heads[0].drafter_hf_id, catalog=heads[0], ruled_out=reason))
    return out


def _draft_models(c: E.Context, model: Model, caps: StackCapabilities, kvb: float, reason: str | None) -> list[E.DraftChoice]:
    from specplug.catalog import models as all_models

    stack, version = caps.name, caps.version
    ids: list[str] = [d.drafter_hf_id for d in model.known_drafters("draft_model")]
    if not model.local_path and (model.tokenizer_family or model.vocab_size):
        # Same-tokenizer catalog models 1/200 .. 1/6 of the target's size are natural drafters. A target read from
        # the Hub has no curated family: catalog models with its exact vocabulary size are candidates, and the
        # tokenizer check (its files, where they can be read) rules on each.
        def same_tokenizer(m: Model) -> bool:
            if model.tokenizer_family:
                return m.tokenizer_family == model.tokenizer_family
            return bool(m.tokenizer_family) and m.vocab_size == model.vocab_size

        same = sorted(
            (m for m in all_models() if same_tokenizer(m) and m.hf_id != model.hf_id and m.params_b),
            key=lambda m: (m.params_b, m.hf_id),
        )
        for m in same:
            ratio = (m.params_b or 0) / (model.params_b or 1)
            if 1 / 200 <= ratio <= 1 / 6 and m.hf_id not in ids:
                ids.append(m.hf_id)
    if not ids:
        return [E.DraftChoice("draft_model", ruled_out=reason or f"no smaller model with {model.name}'s tokenizer in the catalog (pass --drafter)")]
    out = []
    for i in ids[:4]:
        d = E.resolve_drafter("draft_model", i, model, c.target, c.policy, caps, kvb)
        issue = c.policy.rules.known_issue(d.drafter_id, stack, version)
        d.ruled_out = d.ruled_out or reason or (f"known problem in {stack}: {issue.reason}" if issue else None)
        if d.ruled_out is None and (why := _unsharded(d, caps, c.tp)):
            d.ruled_out = why
        elif d.vocab_mismatch and caps.vocab_bridge:
            # Acceptance over the shared tokens is not modelled: such a drafter is planned only when the user names it.
            d.ruled_out += ("; specplug does not pick a drafter of another vocabulary itself: name it with --drafter "
                            "(greedy draft sampling) to plan it")
        out.append(d)
    return out


def _unsharded(d: E.DraftChoice, caps: StackCapabilities, tp: int) -> str | None:
    """Why a draft model cannot be sharded the way the stack runs it at target tensor parallel size ``tp``."""
    from specplug.catalog import get_model
    from specplug.errors import SpecplugError

    dtp = tp if caps.draft_tp == "target" else E.draft_tp(d, tp) if caps.draft_tp == "own" else 1
    try:
        m = get_model(d.drafter_id or "")
    except SpecplugError:
        return None
    if m.splits_heads(dtp):
        return None
    return (f"{caps.name} runs it at tensor parallel size {dtp}, which does not split its {m.num_attention_heads} "
            f"attention heads ({m.num_kv_heads} KV heads)")


def _tree(c: E.Context, method: str, shape: Shape) -> TreeSpec | None:
    if not c.trees or not c.policy.prior(method).tree:
        return None
    if shape.steps:
        return TreeSpec(steps=shape.steps, topk=shape.topk, num_draft_tokens=shape.tokens)
    return TreeSpec(steps=shape.k, topk=1, num_draft_tokens=shape.k + 1)


def _off_below(c: E.Context, d: E.DraftChoice, alpha: float, batch: int, capacity: int) -> int | None:
    """The first batch size of the schedule's walk, up to ``batch``, where ``d`` stops paying (None: on up to it)."""
    _, curve, last_on = _schedule(c, d, alpha, E.shapes(c, d.method), capacity)
    if last_on is None or last_on >= batch:
        return None
    return last_on + 1


def _breakeven_rate(c: E.Context, d: E.DraftChoice, o: Outcome, batch: int) -> float | None:
    """Acceptance rate (accepted / drafted tokens) under which the plan's chain of learned drafts loses at ``batch``;
    None for trees and copy methods (their drafted tokens per step vary) or where no acceptance pays."""
    shape = o.shape
    if c.policy.prior(d.method).kind != "model" or shape.topk > 1 or shape.depth < 1:
        return None

    def pays(a: float) -> bool:
        return E.score(c, d, a, batch, [shape]).speedup >= 1.0

    lo, hi = 0.01, c.policy.acceptance.max_alpha
    if not pays(hi):
        return None
    if pays(lo):
        return None  # pays whatever is accepted: no floor to guard
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pays(mid) else (mid, hi)
    tau = E.score(c, d, hi, batch, [shape]).acceptance_length
    return round((tau - 1) / shape.depth, 3)


def _schedule(
    c: E.Context, d: E.DraftChoice, alpha: float, cands: list[Shape], capacity: int
) -> tuple[list[ScheduleEntry], list[CurvePoint], int | None]:
    """k per batch size along the policy's batch curve up to ``capacity`` (no batch beyond what the KV cache holds
    runs), and the largest batch that still speculates (None: up to capacity). In the cost model a bigger batch
    leaves less idle compute, so the predicted k never grows with batch and, once off, stays off: each point only
    considers shapes no deeper than the last (measurements may say otherwise: tune decides from them). The off point
    is found to the batch."""
    pts = [b for b in c.policy.rules.batch_curve if b < capacity] + [max(capacity, 1)]
    curve: list[CurvePoint] = []
    depth_cap: int | None = None
    gain_cap = math.inf
    for b in pts:
        allowed = [s for s in cands if depth_cap is None or s.depth <= depth_cap]
        o = E.score(c, d, alpha, b, allowed) if allowed else None
        on = o is not None and o.speedup >= c.policy.rules.min_speedup
        depth_cap = o.shape.depth if on and o is not None else 0
        # Published batch series fall with batch, MoE ones included (benchmarks/data); where the cost model
        # says a bigger batch gains more (few-expert MoE, a dense drafter on a sparse target), the curve holds.
        gain_cap = min(gain_cap, o.speedup if on and o else 1.0)
        curve.append(
            CurvePoint(
                batch_size=b,
                speedup=round(gain_cap, 3),
                acceptance_length=round(o.acceptance_length if on and o else 1.0, 3),
                num_speculative_tokens=depth_cap,
            )
        )
    sched: list[ScheduleEntry] = []
    for i, p in enumerate(curve):
        lo = p.batch_size
        hi = pts[i + 1] - 1 if i + 1 < len(pts) else None
        if sched and sched[-1].num_speculative_tokens == p.num_speculative_tokens:
            sched[-1] = ScheduleEntry(min_batch=sched[-1].min_batch, max_batch=hi, num_speculative_tokens=p.num_speculative_tokens)
        else:
            sched.append(ScheduleEntry(min_batch=lo, max_batch=hi, num_speculative_tokens=p.num_speculative_tokens))
    off = next((i for i, p in enumerate(curve) if not p.num_speculative_tokens), None)
    if off is None:
        return sched, curve, None
    if off == 0:
        return sched, curve, 0
    return _refine_off_point(c, d, alpha, cands, pts, curve, sched, off)


def _refine_off_point(
    c: E.Context, d: E.DraftChoice, alpha: float, cands: list[Shape], pts: list[int], curve: list[CurvePoint],
    sched: list[ScheduleEntry], off: int,
) -> tuple[list[ScheduleEntry], list[CurvePoint], int]:
    """The schedule with its off point found to the batch between grid points ``off - 1`` and ``off``, and the k
    stepping down inside that range where a shallower shape is what still pays."""
    cap = curve[off - 1].num_speculative_tokens
    allowed = [x for x in cands if x.depth <= cap]
    lo, hi = pts[off - 1], pts[off]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if E.score(c, d, alpha, mid, allowed).speedup >= c.policy.rules.min_speedup:
            lo = mid
        else:
            hi = mid
    at = next(i for i, e in enumerate(sched) if e.min_batch == pts[off])
    # Near the off point a shallower shape may be what still pays: the k steps down inside this range too.
    steps: list[ScheduleEntry] = [sched[at - 1].model_copy(update={"max_batch": lo})]
    while True:
        allowed = [x for x in cands if x.depth <= steps[-1].num_speculative_tokens]
        if E.score(c, d, alpha, lo, allowed).shape.depth >= steps[-1].num_speculative_tokens:
            break
        a, z = max(steps[-1].min_batch, pts[off - 1]), lo
        while z - a > 1:
            mid = (a + z) // 2
            if E.score(c, d, alpha, mid, allowed).shape.depth < steps[-1].num_speculative_tokens:
                z = mid
            else:
                a = mid
        k = E.score(c, d, alpha, z, allowed).shape.depth
        steps[-1] = steps[-1].model_copy(update={"max_batch": z - 1})
        steps.append(ScheduleEntry(min_batch=z, max_batch=lo, num_speculative_tokens=k))
    sched[at - 1 : at + 1] = [*steps, sched[at].model_copy(update={"min_batch": lo + 1})]
    return sched, curve, lo


def _fixes(s: Planning, heavy: bool) -> list[str]:
    """What would make a plan that does not fit start, each with the plan it would give (predicted by
    planning it): more GPUs, lighter weights, an FP8 KV cache, a shorter context, a smaller drafter."""
    from specplug.catalog.precision import get_weight_format

    cfg, req, n, fmt_name, kv_dtype, tokens = s.cfg, s.req, s.n, s.fmt.name, s.cfg.serve.kv_cache_dtype, s.tokens
    hs = cfg.hardware_spec()
    tries: list[tuple[str, dict[str, Any]]] = []
    pol = s.pol
    more = [m for m in pol.rules.gpu_counts if m > n]
    if more:
        tries += [(f"--num-gpus {m}", {"hardware": {**hs.model_dump(), "num_gpus": m}}) for m in more[:3]]
    if get_weight_format(fmt_name).bits_per_weight > 8.1:
        tries.append(("--quantization fp8 (FP8 weights)", {"serve": {"quantization": "fp8"}}))
    if get_weight_format(fmt_name).bits_per_weight > 4.6:
        tries.append(("--quantization int4-awq (INT4 weights; needs an AWQ checkpoint)", {"serve": {"quantization": "int4-awq"}}))
    from specplug.catalog import models as all_models

    # Published quantized checkpoints of this model: the usual way to serve lighter weights.
    base = E.check_model(cfg.model).hf_id.lower()
    for q in sorted((m for m in all_models() if m.base_model.lower() == base), key=lambda m: -get_weight_format(m.weight_format).bits_per_weight):
        tries.append((f"--model {q.hf_id} ({q.weight_format} checkpoint)", {"model": q.hf_id}))
    if kv_dtype == "auto":
        tries.append(("--kv-cache-dtype fp8 (FP8 KV cache)", {"serve": {"kv_cache_dtype": "fp8"}}))
    for frac in (2, 4):
        if tokens // frac >= 512:
            tries.append(
                (f"--max-model-len {tokens // frac} (shorter context)", {"serve": {"max_model_len": tokens // frac}})
            )
            break
    if heavy:
        tries.append(("speculation: auto (let specplug pick a drafter that fits)", {"speculation": "auto"}))
    out: list[str] = []
    seen_gpus = False
    for label, change in tries:
        if label.startswith("--num-gpus") and seen_gpus:
            continue
        data = cfg.model_dump(exclude_unset=True)
        for key, val in change.items():
            data[key] = {**(data.get(key) or {}), **val} if isinstance(val, dict) and isinstance(data.get(key), dict) else val
        fixed = Config.model_validate(data)
        num = fixed.hardware_spec().num_gpus
        hw = req.hardware if num is None else req.hardware.model_copy(update={"num_gpus": num})
        try:
            p = plan(fixed, hw, req.caps, req.policy, calibration=req.calibration, validate=req.validate,
                     found=req.found, _fixing=True)
            if req.validate is not None:
                req.validate(p)
        except SpecplugError:
            continue
        seen_gpus = seen_gpus or label.startswith("--num-gpus")
        what = (
            f"{p.speculation.method} k={p.speculation.num_speculative_tokens}, predicted {fmt(p.prediction.speedup)}"
            if p.speculation.enabled
            else "no speculation pays there"
        )
        out.append(f"{label}: fits, {what}")
    return out


def _budget(mem: E.Memory, hint: str | None) -> MemoryBudget:
    r = lambda x: round(x, 2)  # noqa: E731
    return MemoryBudget(
        gpu_memory_gb=r(mem.gpu_gb),
        target_weights_gb=r(mem.target_gb),
        drafter_weights_gb=r(mem.drafter_gb),
        kv_cache_gb=r(mem.kv_gb),
        drafter_kv_cache_gb=r(mem.drafter_kv_gb),
        activations_gb=r(mem.act_gb),
        headroom_gb=r(mem.headroom_gb),
        fits=mem.fits,
        hint=hint,
    )


def _inputs(s: Planning) -> Inputs:
    """The model, the policy (and which of its stack rows costs this stack), the calibration."""
    cfg, caps, pol = s.req.cfg, s.caps, s.req.policy
    costed_as = caps.costed_as(pol.stacks)
    warnings = []
    if costed_as not in pol.stacks:
        warnings.append(f"The policy has no cost factors for {s.stack}: predictions use its default CUDA-graph engine's.")
    elif costed_as != s.stack:
        warnings.append(
            f"The policy has no cost factors for {s.stack}: predictions use {costed_as}'s, as its adapter declares."
        )
    return Inputs(model=E.check_model(cfg.model), pol=pol,
                  calib=E.load_calibration_opt(s.req.calibration or cfg.calibration), costed_as=costed_as,
                  warnings=tuple(warnings))


def _workload_and_precision(s: Planning) -> Work:
    """The traffic (measured lengths stand in for defaults), the served weight format and the KV-cache bytes."""
    from specplug.catalog.precision import kv_cache_bytes

    cfg, model, reasons = s.req.cfg, s.model, []
    wl = cfg.workload
    prof = E.load_traffic_opt(wl.traffic, model) if wl.traffic else None
    if prof is not None:
        # Lengths measured on the user's requests stand in for the defaults (never for lengths they set).
        measured = {k: v for k, v in (("input_len", round(prof.input_len)), ("output_len", round(prof.output_len)))
                    if k not in wl.model_fields_set and v}
        if prof.request_rate and "request_rate" not in wl.model_fields_set:
            measured["request_rate"] = round(prof.request_rate, 4)
            reasons.append(_arrivals_reason(prof))
        wl = wl.model_copy(update=measured)
    tokens = wl.input_len + wl.output_len
    if cfg.serve.max_model_len:
        tokens = min(tokens, cfg.serve.max_model_len)
    context, context_auto, useful = 0, False, 0
    if s.caps.reserves_full_context:
        context = cfg.serve.max_model_len or model.max_position_embeddings or 0
        context_auto = not cfg.serve.max_model_len
        useful = min(context, s.pol.rules.memory.min_context) if context_auto else 0
    served = E.serve_format(model, cfg.serve.quantization, cfg.serve.dtype)
    kvb = kv_cache_bytes(cfg.serve.kv_cache_dtype)
    if served.name != (model.weight_format or "bf16"):
        reasons.append(
            f"Weights served as {served.name} ({served.bits_per_weight:g} bits) instead of the checkpoint's {model.weight_format}."
        )
    return Work(prof=prof, wl=wl, seqs=wl.concurrency, tokens=tokens, context=context, context_auto=context_auto,
                useful_context=useful, fmt=served, kvb=kvb, target=E.arch_of(model, served, kvb), reasons=tuple(reasons))


def _hardware(s: Planning) -> Hard:
    """The GPUs (the smallest count that holds the model when none is named) and their tensor x pipeline split."""
    cfg = s.req.cfg
    hs = cfg.hardware_spec()
    hw = s.req.hardware
    gpu = get_gpu(hw.gpu)
    served, target, serve, reasons = s.fmt, s.target, cfg.serve, []
    if hs.num_gpus is None and hw.source not in ("probed", "host") and cfg.serve.tensor_parallel_size is None:
        hw, served, target, serve, reasons = _gpu_count(s, hw, gpu)
    elif hw.note:
        reasons.append(hw.note)
    n = hw.num_gpus
    if serve.tensor_parallel_size:
        tp = serve.tensor_parallel_size
        pp = max(serve.pipeline_parallel_size, n // tp) if n >= tp else serve.pipeline_parallel_size
    elif s.caps.layer_split:
        tp, pp = 1, n  # one stage of layers per GPU, run in turn (StackCapabilities.layer_split)
    else:
        tp, pp = E.split_gpus(n, s.pol, hs.gpus_per_node, s.model)
    par = Parallelism(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      num_nodes=max(1, math.ceil(tp * pp / hs.gpus_per_node)), gpus_per_node=hs.gpus_per_node)
    return Hard(hw=hw, gpu=gpu, par=par, fmt=served, target=target, serve=serve, reasons=tuple(reasons))


def _gpu_count(s: Planning, hw: Any, gpu: Any) -> tuple[Any, Any, Arch, ServeSpec, list[str]]:
    """The smallest count of ``gpu`` that holds the model (with FP8 weights where nothing holds the checkpoint):
    the hardware, the served format and target, the serve section and the reasons."""
    cfg, pol, model = s.req.cfg, s.pol, s.model
    hs = cfg.hardware_spec()
    served, target, serve, reasons = s.fmt, s.target, cfg.serve, []
    # Where the stack reserves one request of max_model_len at start, the count holds a useful one (min_context,
    # or the configured max_model_len); _served_context then serves the longest that fits.
    ctx = s.useful_context if s.context_auto else s.context
    n = E.choose_gpus(pol, model, target, hw.memory_gb, s.seqs, s.tokens, hs.gpus_per_node, ctx)
    if n is None and cfg.serve.quantization is None and served.bits_per_weight > 8.1:
        # Nothing holds the checkpoint as it is: FP8 weights (quantized at load by the CUDA stacks) may.
        from specplug.catalog.precision import get_weight_format

        fp8 = get_weight_format("fp8")
        t8 = E.arch_of(model, fp8, s.kvb)
        n = E.choose_gpus(pol, model, t8, hw.memory_gb, s.seqs, s.tokens, hs.gpus_per_node, ctx)
        if n is not None:
            served, target = fp8, t8
            serve = cfg.serve.model_copy(update={"quantization": "fp8"})
            reasons.append(
                f"{model.name}'s {model.weight_format} checkpoint does not fit on any count of {gpu.name}: "
                "planned with FP8 weights (serve.quantization: fp8)."
            )
    if n is None:
        raise E.fits_on_no_count(model, served.name, s.seqs, s.tokens, pol, gpu.name)
    msg = (
        f"{n} x {gpu.name} is the smallest count (1, 2, 4, 8, then whole nodes) whose memory holds {model.name} "
        f"({served.name} weights) and its KV cache"
    )
    if hw.source == "default":
        msg = (
            f"{hw.probe_message} Planning for the default GPU, {gpu.name}: {msg}. "
            "Change it with --gpu NAME --num-gpus N or 'hardware:' in specplug.yaml."
        )
    else:
        msg += "; set --num-gpus to plan for another count."
    reasons.append(msg)
    return hw.model_copy(update={"num_gpus": n, "note": msg}), served, target, serve, reasons


def cost_context(
    pol: Policy, caps: StackCapabilities, model: Model, target: Arch, gpu: Any, device: E.Device, tp: int, pp: int,
    batch: int, input_len: int, output_len: int, workload: str, temperature: float, calibration: Any, traffic: Any,
) -> E.Context:
    """The cost model's view of one deployment, as recommend and estimate both score it: the stack's cost
    factors (its own policy row, else the one its adapter declares), device, split, batch and workload."""
    return E.Context(
        policy=pol,
        model=model,
        target=target,
        gpu=gpu,
        device=device,
        stack=caps.name,
        factors=pol.stack(caps.costed_as(pol.stacks)),
        tp=tp,
        pp=pp,
        batch=batch,
        ctx=input_len + output_len / 2,
        workload=workload,
        temperature=temperature,
        calibration=calibration,
        traffic=traffic,
        trees=caps.trees,
        parallel_drafting=caps.parallel_drafting,
        mixes_prefill=caps.mixes_prefill,
    )


def _cost_context(s: Planning) -> Costed:
    """The cost model's view of this deployment (:func:`cost_context`), on the GPUs' usable memory."""
    device = E.device_of(s.gpu, s.pol)
    device = E.Device(device.bw_gbs, device.tflops, s.hw.memory_gb or device.memory_gb, device.link_gbs)
    wl = s.wl
    caps = s.caps
    if (mixes := caps.mixes_prefill_with(s.cfg.serve.extra_args)) != caps.mixes_prefill:
        caps = dataclasses.replace(caps, mixes_prefill=mixes)  # a serve.extra_args flag turned it on or off
    c = cost_context(s.pol, caps, s.model, s.target, s.gpu, device, s.par.tensor_parallel_size,
                     s.par.pipeline_parallel_size, s.seqs, wl.input_len, wl.output_len, wl.type, wl.temperature,
                     s.result("inputs").calib, s.prof)
    return Costed(device=device, c=c)


def _feasibility(s: Planning) -> Fit:
    """The target must fit with one request (and the context the stack reserves) before any drafter is considered;
    more requests than the KV cache holds queue: the plan runs as many as it holds."""
    base_mem = _memory_with(s, None, seqs=1)
    if not base_mem.fits and s.req.require_fit:
        fixes = [] if s.fixing else _fixes(s, False)
        held = (f"one request of max_model_len {s.context} tokens, which {s.stack} reserves at start"
                if not s.context_auto and s.context > s.tokens else f"one request of {s.tokens} tokens")
        raise _does_not_fit(
            f"{s.model.name} does not fit on {s.n} x {s.gpu.name}: {base_mem.used_gb:.1f} GB needed per GPU "
            f"({base_mem.target_gb:.1f} GB of {s.fmt.name} weights, {base_mem.kv_gb:.1f} GB of KV cache for {held}), "
            f"{base_mem.usable_gb:.1f} GB usable.",
            fixes, "Use more GPUs, lighter weights or a shorter context.",
        )
    useful = s.useful_context
    if s.context_auto and not _memory_with(s, None, useful, seqs=1).fits:
        useful = 0
    capacity = capacity_with(s, None)
    seqs, reasons, warnings = s.seqs, [], []
    if s.wl.request_rate is not None and "concurrency" not in s.wl.model_fields_set:
        seqs, why = _batch_from_rate(s, capacity)
        reasons.append(why)
    elif s.seqs > capacity and s.req.require_fit:
        warnings.append(
            f"The KV cache holds {capacity} requests of {s.tokens} tokens on {s.n} x {s.gpu.name} "
            f"({_capacity_limit(s, None)}): of the {s.seqs} concurrent requests configured, {capacity} run at "
            "once and the rest queue; planned at that batch. More GPUs, an FP8 KV cache or lighter weights hold more."
        )
        seqs = capacity
    # The cost model's context follows the batch the plan runs at.
    c = s.c if seqs == s.c.batch else dataclasses.replace(s.c, batch=seqs)
    return Fit(capacity=capacity, seqs=seqs, useful_context=useful, c=c, reasons=tuple(reasons), warnings=tuple(warnings))


def _arrivals_reason(prof: Any) -> str:
    """Where the request rate came from when the traffic log's arrival times gave it, and how far to trust it."""
    text = (f"Request rate {prof.request_rate:.3g}/s from the traffic log's arrival times ({prof.timed} of "
            f"{prof.requests} requests timed, over {prof.span_s:,.0f} s); the load model takes arrivals as Poisson")
    if prof.arrival_cv is not None and prof.arrival_cv > 1.5:
        text += (f", but the log's gaps between arrivals vary {prof.arrival_cv:.1f}x as much as a Poisson stream's: "
                 "its bursts queue longer than predicted")
    return text + ". A sampled or idle-spanning log understates it: pass --request-rate."


def _batch_from_rate(s: Planning, capacity: int) -> tuple[int, str]:
    """With a request rate and no concurrency given, the batch that rate keeps running without speculation, and why."""
    rate, out = s.wl.request_rate, s.wl.output_len
    base = arms.baseline_arm(s.c, s.wl.input_len, capacity)
    b = loadmodel.running_batch(base, rate, out)
    batch = max(1, min(capacity, round(b)))
    sat = loadmodel.saturation_rate(base, out)
    tail = (f"; past its saturation ({sat:.3g} requests/s) all {capacity} slots are busy and requests queue"
            if rate >= sat else "")
    return batch, (f"At {rate:g} requests/s of {s.wl.input_len} tokens in / {out} out, about {b:.1f} requests decode "
                   f"at once without speculation{tail}: planned at batch size {batch}.")


def _stack_cap(s: Planning, speculating: bool) -> int | None:
    return E.request_cap(s.caps, s.cfg.serve.max_num_seqs, speculating, s.gpu.name, s.device.memory_gb)


def capacity_with(s: Planning, d: Any) -> int:
    """Requests of the workload's lengths that run at once with drafter ``d`` (:func:`E.capped_capacity`)."""
    key, memo = id(d), s.req.capacities
    if key not in memo:
        memo[key] = E.capped_capacity(s.pol, s.model, s.target, s.device.memory_gb, s.par.tensor_parallel_size,
                                      s.par.pipeline_parallel_size, s.tokens, d, s.caps, s.gpu.name,
                                      s.cfg.serve.max_num_seqs)
    return memo[key]


def _capacity_limit(s: Planning, d: Any) -> str:
    """What sets the capacity with ``d``: memory or the stack's request cap."""
    cap = _stack_cap(s, d is not None and d.method != "none")
    if cap and capacity_with(s, d) == cap:
        return f"{s.stack}'s cap of {cap} running requests"
    return "its KV cache at these lengths"


def _memory_with(s: Planning, drafter: Any, context: int | None = None, seqs: int | None = None) -> E.Memory:
    """Memory per GPU with ``drafter`` and ``seqs`` running requests (default: the plan's batch); the context the stack
    reserves counts unless it is the model's own maximum, which :func:`_served_context` lowers to what fits."""
    ctx = (0 if s.context_auto else s.context) if context is None else context
    return E.memory(s.pol, s.model, s.target, s.device.memory_gb, s.par.tensor_parallel_size,
                    s.par.pipeline_parallel_size, s.seqs if seqs is None else seqs, s.tokens, drafter, ctx)


def _score_at_capacity(s: Planning, d: Any, alpha: float, shapes: list[Shape]) -> Outcome:
    """``d`` scored at the plan's batch; where its drafter leaves room for fewer requests than that, the rest queue and
    the speedup is its throughput at its own capacity over the baseline's at the plan's batch."""
    cap = capacity_with(s, d)
    if cap >= s.seqs or cap < 1:
        return E.score(s.c, d, alpha, s.seqs, shapes)
    o = E.score(s.c, d, alpha, cap, shapes)
    base = E.score(s.c, d, alpha, s.seqs, [Shape(0)]).cost.baseline_ms
    return dataclasses.replace(o, speedup=(cap * o.acceptance_length / o.cost.spec_ms) / (s.seqs / base))


def _score_candidates(s: Planning) -> Scores:
    """Every method the policy knows, each ruled out with its reason or scored at the plan's batch size."""
    pol, c, seqs = s.pol, s.c, s.seqs
    cfg = s.req.cfg
    explicit = cfg.speculation if isinstance(cfg.speculation, SpeculationSpec) else None
    cands = _candidates(c, s.model, s.caps, s.kvb, s.req.found)
    reasons = _rule_out_known_broken(s, cands)
    scored: list[tuple[E.DraftChoice, float, Outcome]] = []
    candidates: list[Candidate] = []
    for d in cands:
        cand = Candidate(method=d.method, drafter=d.drafter_id)  # type: ignore[arg-type]
        if d.ruled_out:
            cand.ruled_out = d.ruled_out
            candidates.append(cand)
            continue
        mem = _memory_with(s, d, s.useful_context if s.context_auto else None, seqs=1)
        alpha, _ = E.alpha_for(c, d)
        o = _score_at_capacity(s, d, alpha, E.shapes(c, d.method))
        cand.speedup = round(o.speedup, 3)
        cand.acceptance_length = round(o.acceptance_length, 3)
        cand.num_speculative_tokens = o.shape.depth
        if not mem.fits or capacity_with(s, d) < 1:
            room = f" and a {s.useful_context}-token context" if s.context_auto and s.useful_context else ""
            cand.ruled_out = f"does not fit in memory with the drafter{room} ({mem.used_gb:.1f} of {mem.usable_gb:.1f} GB per GPU)"
            cand.speedup = None
        elif d.unconfirmed:
            cand.ruled_out = d.unconfirmed
        elif o.speedup < pol.rules.min_speedup:
            cand.ruled_out = f"loses at batch size {seqs} (predicted {fmt(o.speedup)})"
        elif seqs > 1 and (off := _off_below(c, d, alpha, seqs, capacity_with(s, d))) is not None:
            # Gains fade as batches grow: a technique that does not pay at a smaller batch is off at this one too.
            cand.ruled_out = f"does not pay at batch size {off} (the schedule keeps it off above)"
        else:
            scored.append((d, alpha, o))
        candidates.append(cand)

    best = max(scored, key=lambda t: t[2].speedup, default=None)
    if best is not None:
        # A tie within 2% goes to the simpler (earlier) method: the model cannot tell them apart.
        top = best[2].speedup
        best = next(t for t in scored if t[2].speedup >= top * 0.98)
    return Scores(explicit=explicit, cands=tuple(cands), scored=tuple(scored), candidates=tuple(candidates), best=best,
                  reasons=tuple(reasons))


def _features(s: Planning, d: E.DraftChoice) -> frozenset[str]:
    """The compatibility-table features (specplug.compat) this deployment turns on with candidate ``d``."""
    return (serve_features(s.cfg.serve, s.wl, s.par.pipeline_parallel_size, s.caps.compat_flags)
            | drafter_features(d.method, d.drafter_id) | model_features(s.model))


def _rule_out_known_broken(s: Planning, cands: list[E.DraftChoice]) -> list[str]:
    """Rule out the candidates the stack's compatibility table marks broken with this deployment's features at this
    release, with the row's note and source; one reason per row says what was avoided and why."""
    avoided: dict[CompatRow, list[str]] = {}
    for d in cands:
        if d.ruled_out:
            continue
        hit = next((f for f in s.caps.compat_findings(d.method, _features(s, d), s.model.hf_id) if f.refuses), None)
        if hit is not None:
            d.ruled_out = f"known broken on {s.stack} {s.caps.version or '(newest)'} with {hit.row.about()} ({hit.row.source})"
            avoided.setdefault(hit.row, []).append(d.method)
    return [f"Not planned on {s.stack} {s.caps.version or '(newest)'} with {row.about()}: "
            f"{', '.join(dict.fromkeys(methods))}: {row.note} ({row.source}"
            + (f"; fixed in {s.stack} {row.fixed_in}" if row.fixed_in else "") + ")."
            for row, methods in avoided.items()]


def _decide(s: Planning) -> Decision:
    """The configured speculation (scored, with a warning when the policy would choose otherwise), else the best."""
    seqs, explicit, best = s.seqs, s.explicit, s.result("scores").best
    if explicit is not None and explicit.method != "none":
        return _configured(s, explicit)
    if explicit is not None:
        return Decision(None, reasons=("Speculation is turned off in the configuration (method: none).",))
    if best is not None:
        return Decision(best)
    return Decision(None, reasons=(
        f"No technique pays at batch size {seqs} on {s.n} x {s.gpu.name} with {s.stack}: speculation stays off."
        + (" At this batch the target is compute-bound, so verifying draft tokens costs real time." if seqs >= 32 else ""),
    ))


def _configured(s: Planning, explicit: SpeculationSpec) -> Decision:
    """The configured technique, scored, with a warning where it may not work or the policy would choose otherwise."""
    pol, c, seqs, stack, best = s.pol, s.c, s.seqs, s.stack, s.result("scores").best
    warnings: list[str] = []
    d = (
        E.resolve_drafter(explicit.method, explicit.drafter, s.model, s.target, pol, s.caps, s.kvb)
        if explicit.drafter
        else next((x for x in s.result("scores").cands if x.method == explicit.method and x.drafter_id),
                  E.DraftChoice(explicit.method))
    )
    if explicit.method in HEAD_METHODS and not d.drafter_id:
        raise SpecplugError(
            f"speculation.method is {explicit.method} but no drafter is given and none is known for {s.model.name}.",
            "Set speculation.drafter (or --drafter) to the head's Hugging Face id.",
        )
    if d.ruled_out and not d.vocab_mismatch:
        warnings.append(f"The configured drafter may not work: {d.ruled_out}.")
    issue = pol.rules.known_issue(d.drafter_id, stack, s.caps.version)
    if issue:
        warnings.append(f"The configured drafter has a known problem in {stack}: {issue.reason}.")
    if s.caps.methods.get(explicit.method):
        warnings.append(f"The configured method may not work: {s.caps.methods[explicit.method]}.")
    alpha, _ = E.alpha_for(c, d)
    shapes = E.shapes(c, d.method, explicit.num_speculative_tokens or None, explicit.tree)
    o = _score_at_capacity(s, d, alpha, shapes)
    if best is not None and (best[0].method, best[0].drafter_id) != (d.method, d.drafter_id) and best[2].speedup > o.speedup * 1.05:
        warnings.append(
            f"The policy would choose {best[0].method}"
            + (f" ({best[0].drafter_id})" if best[0].drafter_id else "")
            + f" here: predicted {fmt(best[2].speedup)} vs {fmt(o.speedup)} for the configured {d.method}."
        )
    elif best is None and o.speedup < pol.rules.min_speedup:
        warnings.append(f"The policy would not speculate here: predicted {fmt(o.speedup)} at batch size {seqs}.")
    reasons = [f"Speculation is set in the configuration: {explicit.method} kept as given."]
    if d.vocab_mismatch and s.caps.vocab_bridge and explicit.draft_sampling != "probabilistic":
        # Validation lets it through (rule 1) and the adapter renders the bridge: the plan says why.
        reasons.append(f"The drafter's vocabulary differs from {s.model.name}'s "
                       f"({d.vocab_mismatch.split(';')[0]}): {s.caps.vocab_bridge}.")
    return Decision((d, alpha, o), reasons=tuple(reasons), warnings=tuple(warnings))


def _alternatives(
    c: E.Context, d: E.DraftChoice, alpha: float, batch: int, pool: list[Shape], chosen: Outcome, scale: float,
    source: str | None, published: float | None,
) -> list[ShapeAlternative]:
    """The chosen shape and the next best of ``pool`` at the plan's batch, fastest first, each with its basis and
    marked where it is within the model's own error of the chosen one. ``scale`` carries the headline's hold (the
    curve never gains with batch) to every shape alike."""
    outs = E.ranked(c, d, alpha, batch, pool if chosen.shape in pool else [chosen.shape, *pool])
    # The best of the other kind (a chain beside a tree, a tree beside a chain) first, then the next best.
    other = [o for o in outs if o.shape.is_tree != chosen.shape.is_tree][:1]
    rest = [o for o in outs if o.shape != chosen.shape and o not in other]
    keep = sorted([chosen, *other, *rest][:ALTERNATIVES], key=lambda o: -o.speedup)
    err = c.policy.rules.shape_error
    return [
        ShapeAlternative(
            num_speculative_tokens=o.shape.depth,
            tree=_tree(c, d.method, o.shape) if o.shape.is_tree else None,
            speedup=round(o.speedup * min(scale, 1.0), 3),
            acceptance_length=round(o.acceptance_length, 3),
            basis=_shape_basis(c, d, o.shape, source, published),
            chosen=o.shape == chosen.shape,
            within_error=o.shape != chosen.shape and abs(math.log(o.speedup / chosen.speedup)) <= err,
        )
        for o in keep
    ]


def _shape_basis(c: E.Context, d: E.DraftChoice, shape: Shape, source: str | None, published: float | None) -> str:
    """What a shape's prediction rests on: where its acceptance comes from, how the shape changes it, and the published
    sweeps the shape model was fitted to."""
    acc = {"calibrated": "acceptance from the calibration file", "traffic": "acceptance measured on the traffic"}.get(source or "")
    if acc is None and published is not None:
        own = d.catalog is not None and d.catalog.acceptance_length
        acc = f"{d.drafter_id}'s published acceptance" if own else f"published acceptance of {d.method} heads for this model"
    acc = acc or f"{c.policy.prior(d.method).prior_from or d.method} prior"
    tree = c.policy.acceptance.tree
    how = (f"tree: top-k gain {tree.gain:g}, builder confidence {tree.confidence:g}" if shape.is_tree
           else f"chain: acceptance x{c.policy.prior(d.method).decay:g} per position")
    sweeps = c.policy.sources.get("shape_sweeps") or []
    return f"{acc}; {how}; step cost of {c.factors.label or c.stack}" + (f"; shape sweeps fitted: {', '.join(sweeps)}" if sweeps else "")


def _tie_reason(alts: list[ShapeAlternative], tied: list[ShapeAlternative], err: float) -> str:
    """The sentence a plan carries when other shapes are predicted within the model's error of its own."""
    chosen = next(a for a in alts if a.chosen)
    names = ", ".join(f"{_shape_name(a)} ({a.speedup:.2f}x)" for a in tied)
    return (f"{names} {'is' if len(tied) == 1 else 'are'} predicted within the model's error (about {math.expm1(err):.0%}) of "
            f"{_shape_name(chosen)} ({chosen.speedup:.2f}x): the published data cannot order them; measure both "
            "(specplug tune).")


def _shape_name(a: ShapeAlternative) -> str:
    if a.tree is not None and a.tree.topk > 1:
        return f"tree {a.tree.steps}x{a.tree.topk}/{a.tree.num_draft_tokens}"
    return f"k={a.num_speculative_tokens}"


@dataclass(frozen=True)
class _Scheduled:
    """The chosen technique's schedule: the technique at the shape it drafts at the plan's batch, the schedule and
    curve, where it stops paying, the shapes its alternatives are drawn from, the headline speedup, and a warning
    where a configured technique never pays."""

    chosen: tuple[E.DraftChoice, float, Outcome]
    schedule: list[ScheduleEntry]
    curve: list[CurvePoint]
    last_on: int | None
    pool: list[Shape]
    headline: float
    warnings: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        return self.chosen[2]


def _chosen_schedule(s: Planning, chosen: tuple[E.DraftChoice, float, Outcome]) -> _Scheduled:
    """k per batch size for the chosen technique; the plan's own batch follows it (k never grows with batch)."""
    c, explicit, seqs = s.c, s.explicit, s.seqs
    d, alpha, o = chosen
    cand_shapes = E.shapes(
        c, d.method, (explicit.num_speculative_tokens or None) if explicit else None, explicit.tree if explicit else None
    )
    cap = capacity_with(s, d)
    sched, curve, last_on = _schedule(c, d, alpha, cand_shapes, cap)
    at = next((e for e in reversed(sched) if e.min_batch <= seqs), None)
    pool = E.shapes(c, d.method) if explicit else cand_shapes  # the shapes the alternatives are drawn from
    if explicit is None and at is not None and 0 < at.num_speculative_tokens < o.shape.depth:
        pool = [x for x in cand_shapes if x.depth <= at.num_speculative_tokens]
        o = _score_at_capacity(s, d, alpha, pool)
    if explicit is None and not s.caps.schedules_for(d.method):
        # The stack runs one k at every batch: the plan's shape along the curve, on until it stops paying.
        fixed = _schedule(c, d, alpha, [o.shape], cap)
        if any(e.num_speculative_tokens for e in fixed[0]):
            sched, curve, last_on = fixed
    warnings: tuple[str, ...] = ()
    if explicit is not None and not any(e.num_speculative_tokens for e in sched):
        # The user chose this technique: honour it rather than render a schedule that never drafts.
        warnings = (f"{d.method} is predicted not to pay at any batch size here (best {o.speedup:.2f}x); "
                    "kept as configured, without a per-batch-size schedule.",)
        sched = []
    # The headline is the curve's figure at this batch: the curve holds where the raw cost model would
    # let a bigger batch gain more.
    pt = next((p for p in reversed(curve) if p.batch_size <= seqs), None)
    headline = min(o.speedup, pt.speedup) if explicit is None and pt is not None and pt.num_speculative_tokens else o.speedup
    return _Scheduled((d, alpha, o), sched, curve, last_on, pool, headline, warnings)


def _speculation_section(s: Planning, sc: _Scheduled) -> tuple[Speculation, list[ScheduleEntry]]:
    """The Plan's speculation (without its acceptance floor): k (the schedule's largest where the stack follows one),
    the tree, the schedule; and the schedule the technique's own curve gives."""
    explicit, (d, _, o), sched = s.explicit, sc.chosen, sc.schedule
    k = explicit.num_speculative_tokens if explicit and explicit.num_speculative_tokens is not None else o.shape.depth
    shape = o.shape
    if explicit is None and sched:
        if s.caps.schedules_for(d.method):
            # Stacks size their buffers for the configured k: it is the schedule's largest (smallest batch).
            k = max(k, max(e.num_speculative_tokens for e in sched))
            if shape.topk <= 1 and k > shape.depth:
                shape = Shape(k)
        else:
            # The stack runs one k at every batch: the schedule can only say where speculation is off.
            sched = [e.model_copy(update={"num_speculative_tokens": min(e.num_speculative_tokens, k)}) for e in sched]
    tree = explicit.tree if explicit and explicit.tree else _tree(s.c, d.method, shape)
    if explicit is None and tree is not None and sched and tree.steps < k:
        # A tree is as deep as its steps (TensorRT-LLM: max_draft_len): no schedule entry may ask for more.
        sched = [e.model_copy(update={"num_speculative_tokens": min(e.num_speculative_tokens, tree.steps)}) for e in sched]
        k = tree.steps
    extra: dict[str, Any] = {}
    if d.method in LOOKUP_METHODS:
        lo, hi = (explicit.prompt_lookup_min, explicit.prompt_lookup_max) if explicit else (None, None)
        extra.update(prompt_lookup_min=lo or NGRAM_LOOKUP[0], prompt_lookup_max=hi or NGRAM_LOOKUP[1])
    if d.method == "draft_model":
        extra["draft_tensor_parallel_size"] = (
            (explicit.draft_tensor_parallel_size if explicit else None) or E.draft_tp(d, s.par.tensor_parallel_size)
        )
    spec = Speculation(
        method=d.method,  # type: ignore[arg-type]
        drafter=d.drafter_id if d.method not in COPY_METHODS else None,
        num_speculative_tokens=k,
        tree=tree,
        schedule=explicit.schedule if explicit and explicit.schedule else sched,
        verification=explicit.verification if explicit else None,
        draft_sampling=explicit.draft_sampling if explicit else None,
        allow_lossy=explicit.allow_lossy if explicit else False,
        **extra,
    )
    return spec, sched


def _chosen_warnings(s: Planning, d: E.DraftChoice, spec: Speculation) -> list[str]:
    """The drafter's caveats, the compatibility table's findings (and, for a configured technique that 'launch
    --force' starts anyway, what they refuse), a lossy verifier, a head trained elsewhere."""
    warnings = [d.note] if d.note else []
    warnings += [f.message(s.stack, s.caps.version, d.method)
                 for f in s.caps.compat_findings(d.method, _features(s, d), s.model.hf_id)]
    if spec.lossy:
        warnings.append(f"LOSSY: verification {spec.verification} accepts drafts the target would reject, so outputs "
                        "differ from the target model's own; the predicted speedup does not count its extra gain.")
    if (note := E.cross_target_note(d, s.c.model)) is not None:
        warnings.append(note)
    return warnings


def _chosen_reasons(s: Planning, sc: _Scheduled, spec: Speculation, sched: list[ScheduleEntry], source: str | None
                    ) -> tuple[list[str], list[ShapeAlternative]]:
    """Why this technique and shape, where its acceptance comes from, where it stops paying; and the shapes beside
    it."""
    c, (d, alpha, o), reasons = s.c, sc.chosen, []
    if s.explicit is None:
        reasons.append(_why(c, d, alpha, o, s.scored, s.n, sc.headline, spec.num_speculative_tokens))
    published = E.published_alpha(c, d) if source is None else None
    if published is not None and d.catalog is not None and d.catalog.acceptance_length:
        reasons.append(f"{d.drafter_id}'s acceptance is its own published figure, {d.catalog.acceptance_length:g} "
                       f"tokens per step ({d.catalog.acceptance_basis}), moved to this workload and temperature.")
    elif published is not None:
        reasons.append(f"Acceptance is the median of the published figures of {d.method} heads for this model.")
    elif source is None and (note := borrowed_note(c.policy, d.method)) is not None:
        reasons.append(note)
    if d.catalog is not None and d.catalog.found_in:
        prior = " Its acceptance is the method's prior." if published is None and source is None else ""
        reasons.append(f"{d.drafter_id} is not a catalog drafter: found in {d.catalog.found_in}; "
                       f"{d.catalog.source or 'its files say ' + d.method}.{prior}")
    alternatives = _alternatives(c, d, alpha, s.seqs, sc.pool, o, sc.headline / o.speedup, source, published)
    if (tied := [a for a in alternatives if a.within_error]):
        reasons.append(_tie_reason(alternatives, tied, c.policy.rules.shape_error))
    last_on = sc.last_on
    if last_on is not None and spec.schedule and spec.schedule == sched:
        reasons.append(
            f"Speculation stops paying (gaining {c.policy.rules.min_speedup:.2f}x or more) above batch size "
            f"{last_on}; the schedule turns it off (k=0) from {last_on + 1}."
        )
    if source == "calibrated":
        reasons.append("Acceptance comes from the calibration file, not the prior.")
    if (note := _context_note(c, d, alpha)) is not None:
        reasons.append(note)
    return reasons, alternatives


def _acceptance_floor(s: Planning, d: E.DraftChoice, spec: Speculation, pred: Prediction, source: str | None
                      ) -> tuple[dict[str, float | None], list[str], list[str]]:
    """Where acceptance is a prior, the stack's acceptance gate (if it has one) ends speculation below what pays: the
    floor (as an update of the speculation section), its reason, and a warning where the stack cannot follow the
    schedule's k=0 ranges."""
    floor: dict[str, float | None] = {}
    reasons: list[str] = []
    warnings: list[str] = []
    if s.explicit is not None:
        floor["acceptance_floor"] = s.explicit.acceptance_floor
    elif (ACCEPTANCE_GATE in s.caps.controls and source is None and pred.breakeven_acceptance_rate
          and (ACCEPTANCE_RATE_GATE in s.caps.controls or len({e.num_speculative_tokens for e in spec.schedule}) <= 1)):
        floor["acceptance_floor"] = pred.breakeven_acceptance_rate
        reasons.append(
            f"The acceptance here is not measured on this deployment (a prior or a published figure): {s.stack}'s "
            f"acceptance gate turns speculation off for the server's life if the measured acceptance rate averages "
            f"below {pred.breakeven_acceptance_rate:.2f}, where it stops paying at batch size {s.seqs} (PyTorch backend; "
            "calibrate with bench to replace the estimate)."
        )
    if (any(x.num_speculative_tokens == 0 for x in spec.schedule) and not s.caps.schedules_for(d.method)
            and "cutoff" not in s.caps.controls):
        warnings.append(f"{s.stack} cannot switch speculation off per batch size; the schedule's k=0 ranges are advisory.")
    return floor, reasons, warnings


def _schedule_and_speculation(s: Planning) -> Speculated:
    """k per batch size for the chosen technique (k is decided here and nowhere else), its prediction, the Plan's
    speculation section, and the candidates with the chosen one marked."""
    chosen, candidates = s.chosen, s.candidates
    spec, pred, alternatives = Speculation(), Prediction(batch_size=s.seqs), []
    reasons: list[str] = []
    warnings: list[str] = []
    if chosen is not None:
        sc = _chosen_schedule(s, chosen)
        chosen = sc.chosen
        d, alpha, o = chosen
        warnings += sc.warnings
        pred = Prediction(
            speedup=round(sc.headline, 3),
            batch_size=s.seqs,
            acceptance_length=round(o.acceptance_length, 3),
            acceptance_rate=round(alpha, 3),
            curve=sc.curve,
            breakeven_batch_size=sc.last_on,
            breakeven_acceptance_rate=_breakeven_rate(s.c, d, o, s.seqs),
        )
        spec, sched = _speculation_section(s, sc)
        warnings += _chosen_warnings(s, d, spec)
        candidates = [cand.model_copy(update={"chosen": cand.method == d.method and cand.drafter == d.drafter_id
                                                        and cand.ruled_out is None}) for cand in candidates]
        source = E.alpha_for(s.c, d)[1]
        why, alternatives = _chosen_reasons(s, sc, spec, sched, source)
        floor, gate, advisory = _acceptance_floor(s, d, spec, pred, source)
        spec = spec.model_copy(update=floor) if floor else spec
        reasons += why + gate
        warnings += advisory
    if s.prof is not None:
        reasons.append(_traffic_reason(s.c, s.prof, s.wl.traffic))
    if found := s.req.found:
        reasons.append(_found_reason(s, found, candidates))
    return Speculated(chosen=chosen, spec=spec, pred=pred, alternatives=tuple(alternatives),
                      candidates=tuple(candidates), reasons=tuple(reasons), warnings=tuple(warnings))


def _found_reason(s: Planning, found: Sequence[Drafter], candidates: list[Candidate]) -> str:
    """The drafters found outside the catalog, where each was, and what became of it."""
    by_id = {(c.method, (c.drafter or "").lower()): c for c in candidates}

    def fate(d: Drafter) -> str:
        c = by_id.get((d.method, d.drafter_hf_id.lower()))
        if c is None:
            return "a catalog head for the method ranks first"
        return "chosen" if c.chosen else f"ruled out: {c.ruled_out}" if c.ruled_out else f"{c.speedup}x"

    listed = "; ".join(f"{d.drafter_hf_id} ({d.method}{', trained for ' + d.trained_for if d.cross_target else ''}; "
                       f"{d.found_in}; {fate(d)})" for d in found)
    return f"Drafters found outside the catalog for {s.model.hf_id}: {listed}."


def _context_note(c: E.Context, d: E.DraftChoice, alpha: float) -> str | None:
    """What a long context does to the chosen drafter's acceptance, and what that rests on."""
    spread = c.traffic.contexts if c.traffic is not None and c.traffic.contexts else ()
    if max((c.ctx, *spread)) <= context.REFERENCE_CONTEXT or context.slope(d.method) == 0.0:
        return None
    traffic = dataclasses.replace(c.traffic, contexts=()) if spread else c.traffic
    short = E.alpha_for(dataclasses.replace(c, ctx=float(context.REFERENCE_CONTEXT), traffic=traffic), d)[0]
    if abs(short - alpha) < 0.005:
        return None
    where = (f"Over the traffic's contexts ({min(spread):,.0f} to {max(spread):,.0f} tokens from its shortest to its "
             "longest tenth)" if spread else f"At a mean context of {c.ctx:,.0f} tokens (input plus half the output)")
    return (f"{where} {d.method} accepts less: the first draft token accepted with probability {alpha:.2f} vs {short:.2f} "
            f"at {context.REFERENCE_CONTEXT} tokens. {context.basis(d.method)} No stack sets k by context depth, so k is "
            "chosen for this mix; requests much longer than it accept less still.")


def _memory(s: Planning) -> Budgeted:
    """The memory budget with the chosen drafter; a configured drafter that does not fit is an error with fixes."""
    chosen = s.chosen
    drafter = chosen[0] if chosen else None
    running = max(1, min(s.seqs, capacity_with(s, drafter)))
    mem = _memory_with(s, drafter, seqs=running)
    if not mem.fits:
        # Only a configured drafter gets here (chosen ones were checked): the drafter is what does not fit.
        fixes = [] if s.fixing else _fixes(s, True)
        raise _does_not_fit(
            f"{s.model.name} with the {chosen[0].method if chosen else ''} drafter does not fit on {s.n} x {s.gpu.name}: "
            f"{mem.used_gb:.1f} GB needed per GPU ({mem.drafter_gb + mem.drafter_kv_gb:.1f} GB for the drafter), "
            f"{mem.usable_gb:.1f} GB usable.",
            fixes, "Use a smaller drafter or more GPUs.",
        )
    mem, served, reasons = _served_context(s, mem, running)
    serve = s.cfg.serve if served is None else s.cfg.serve.model_copy(update={"max_model_len": served})
    return Budgeted(budget=_budget(mem, None), serve=serve, reasons=(*reasons, _capacity_reason(s)))


def _capacity_reason(s: Planning) -> str:
    """How many requests run at once, and what the drafter costs in requests and in throughput at saturation."""
    d = s.chosen[0] if s.chosen and s.spec.enabled else None
    base = s.capacity
    cap = capacity_with(s, d) if d is not None else base
    text = f"Capacity: {cap} requests of {s.tokens} tokens run at once ({_capacity_limit(s, d)})"
    if d is not None and cap < base:
        b_arm = arms.baseline_arm(s.c, s.wl.input_len, base)
        s_arm = _spec_arm(s, cap)
        lost = 1 - (s_arm.tokens_per_step(cap) / s_arm.step_ms(cap)) * cap / (base / b_arm.step_ms(base))
        text += (f"; {base} without the drafter: it costs {base - cap} requests ({(base - cap) / base:.0%})"
                 + (f" and {lost:.0%} of decode throughput when every slot is busy" if lost > 0 else
                    f", yet decode throughput when every slot is busy is {-lost:.0%} higher with it"))
    return text + "."


def _spec_arm(s: Planning, cap: int) -> loadmodel.Arm:
    d, alpha, o = s.chosen
    schedule = s.spec.schedule if s.caps.schedules_for(d.method) else None
    shape = Shape(s.spec.num_speculative_tokens) if s.spec.tree is None or s.spec.tree.topk <= 1 else o.shape
    return arms.speculative_arm(s.c, d, alpha, shape, schedule, s.wl.input_len, cap)


def _load(s: Planning) -> Loaded:
    """Both arms at the workload's request rate: TPOT, TTFT, throughput, saturation and crossover rates."""
    rate = s.wl.request_rate
    if rate is None:
        return Loaded(None)
    base = arms.baseline_arm(s.c, s.wl.input_len, s.capacity)
    spec = _spec_arm(s, capacity_with(s, s.chosen[0])) if s.chosen is not None and s.spec.enabled else base
    lp = arms.predict_load(base, spec, rate, s.wl.output_len, s.wl.slo_tpot_ms, s.wl.slo_ttft_ms)
    if spec is base:
        return Loaded(lp)
    if lp.crossover_request_rate is None:
        why = (f"Under load, speculation keeps lowering time per output token up to the baseline's saturation "
               f"({lp.saturation_request_rate.baseline:.3g} requests/s).")
    elif lp.crossover_request_rate == 0:
        why = "Under load, speculation does not lower time per output token at any request rate."
    else:
        why = (f"Under load, speculation lowers time per output token up to {lp.crossover_request_rate:.3g} "
               f"requests/s and costs it above (the baseline saturates at {lp.saturation_request_rate.baseline:.3g}, "
               f"speculation at {lp.saturation_request_rate.speculative:.3g}).")
    return Loaded(lp, reasons=(why,))


def _served_context(s: Planning, mem: E.Memory, seqs: int) -> tuple[E.Memory, int | None, list[str]]:
    """Where the stack must hold one request of the model's whole context at start and that does not fit, serve the
    longest context that does (a multiple of 1024 tokens) and say so: the memory budget at the served context, the
    max_model_len to serve (None: as configured) and the reason."""
    if not (s.context_auto and s.context > s.tokens):
        return mem, None, []
    drafter = s.chosen[0] if s.chosen else None
    full = _memory_with(s, drafter, s.context, seqs)
    if full.fits:
        return full, None, []
    lo, hi = s.tokens, s.context  # lo fits (mem did), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _memory_with(s, drafter, mid, seqs).fits else (lo, mid)
    served = max(s.tokens, lo // 1024 * 1024)
    why = (
        f"{s.factors.label or s.stack} starts only if its KV cache holds one request of max_model_len; the model's {s.context} tokens do "
        f"not fit beside the weights on {s.n} x {s.gpu.name}, so the plan serves max_model_len {served}. Set "
        "serve.max_model_len to choose, or give it room: more GPUs, an FP8 KV cache, lighter weights."
    )
    return _memory_with(s, drafter, served, seqs), served, [why]


def _stack_warnings(s: Planning) -> StackNotes:
    """Sampling temperature, the stack's request caps and batching, an unknown stack version."""
    wl, chosen, seqs, stack, warnings = s.wl, s.chosen, s.seqs, s.stack, []
    if wl.temperature >= s.pol.rules.high_temperature and chosen is not None:
        a0 = E.alpha_for(dataclasses.replace(s.c, temperature=0.0), chosen[0])[0]
        warnings.append(
            f"Sampling at temperature {wl.temperature:g} lowers acceptance (predicted alpha {chosen[1]:.2f} vs {a0:.2f} greedy)."
        )
    cap = s.caps.running_cap
    if cap and chosen is not None:
        warnings.append(
            f"{stack} caps running requests at {cap} when speculation is on"
            + (f", below the expected concurrency {seqs}" if seqs > cap else "")
            + "; set max_running_requests explicitly."
        )
    batch_cap = _stack_cap(s, False)
    if batch_cap and seqs > batch_cap:
        warnings.append(f"{s.factors.label or stack} decodes {batch_cap} requests together; the rest will queue.")
    if s.caps.version_source == "unknown":
        warnings.append(f"{stack} is not installed here and no version is pinned: method support assumes a recent release.")
    return StackNotes(tuple(warnings))


# The planning stages, in order, each with the Planning field its frozen result fills (the stack and its version
# were resolved before: specplug.capabilities).
STAGES: tuple[tuple[str, Callable[[Planning], Any]], ...] = (
    ("inputs", _inputs),
    ("work", _workload_and_precision),
    ("hard", _hardware),
    ("costed", _cost_context),
    ("fit", _feasibility),
    ("scores", _score_candidates),
    ("decision", _decide),
    ("speculated", _schedule_and_speculation),
    ("budgeted", _memory),
    ("loaded", _load),
    ("stack_notes", _stack_warnings),
)
# The stages that resolve the deployment (model, traffic, GPUs, cost model, what fits) before any technique is scored.
DEPLOYMENT_STAGES = STAGES[:5]


def plan(
    cfg: Config,
    hardware: Hardware,
    caps: StackCapabilities,
    policy: Policy,
    *,
    calibration: str | None = None,
    validate: Callable[[Plan], None] | None = None,
    found: Sequence[Drafter] = (),
    _fixing: bool = False,
) -> Plan:
    """Resolve every ``auto`` in ``cfg`` (the GPU count, speculation) on ``hardware`` for the stack ``caps``
    describes and fill the whole Plan, stage by stage. specplug.planning resolves the hardware, the stack and the
    policy, calls this, and checks the result.

    An explicit ``speculation:`` is kept as given (its k chosen when missing) and still predicted; a warning
    says when the policy would choose differently. A deployment that cannot fit in memory is an error that
    lists the fixes with what each would give. Same inputs give an identical Plan. ``validate`` is the stack's
    checks (the caller's: the policy never asks an adapter); a fix is offered only where it passes them.
    ``found``: drafters for the target found outside the catalog (specplug.catalog.discovery), candidates beside
    the catalog's own.
    """
    return _build(run(Request(cfg, hardware, caps, policy, calibration, validate, tuple(found), _fixing)))


def run(req: Request, stages: Sequence[tuple[str, Callable[[Planning], Any]]] = ()) -> Planning:
    """``stages`` (default: every one, :data:`STAGES`) run in order on ``req``, each result frozen in the Planning the
    next one reads. estimate runs :data:`DEPLOYMENT_STAGES`, then scores the technique it was given."""
    s = Planning(req)
    for name, stage in stages or STAGES:
        s = dataclasses.replace(s, **{name: stage(s)})
    return s


def _build(s: Planning) -> Plan:
    """The Plan from what the stages resolved."""
    model, sp = s.model, s.result("speculated")
    out = Plan(
        model=ModelRef(
            name=s.cfg.model or model.hf_id,
            hf_id=model.local_path or model.hf_id,
            local_path=model.local_path,
            revision=served_revision(s.cfg.model, model),
            weight_format=model.weight_format or "bf16",
        ),
        hardware=s.hw,
        stack=StackRef(name=s.stack, version=s.caps.version, version_source=s.caps.version_source),  # type: ignore[arg-type]
        workload=s.wl,
        parallelism=s.par,
        speculation=sp.spec,
        serve=s.cfg.serve.options(),  # the split is parallelism, resolved by _hardware
        memory=s.result("budgeted").budget,
        prediction=sp.pred,
        candidates=list(sp.candidates),
        alternatives=list(sp.alternatives),
        reasons=s.reasons(),
        warnings=s.warnings(),
        capacity_requests=capacity_with(s, s.chosen[0]) if s.chosen and s.spec.enabled else s.capacity,
        capacity_requests_without_drafter=s.capacity,
        load=s.result("loaded").load,
    )
    if s.prof is not None and "traffic" in Plan.model_fields:
        out.traffic = s.prof.summary()
    return out


def _does_not_fit(message: str, fixes: list[str], otherwise: str) -> SpecplugError:
    """The error for a deployment that cannot start: never a speedup, always the planned fixes."""
    return SpecplugError(message, ("What would fit:\n  " + "\n  ".join(fixes)) if fixes else otherwise)


def borrowed_note(policy: Any, method: str) -> str | None:
    """What a plan says when its method's prior is borrowed (``prior_from``) in whole or in part."""
    lender = policy.prior(method).prior_from
    if lender is None:
        return None
    if policy.prior(method).alpha == policy.prior(lender).alpha:
        return f"{method} has no published result of its own: its acceptance and cost are {lender}'s."
    return (f"{method} has no fitted prior: its acceptance is the policy's own table for it (see 'specplug policy "
            f"show'), and its cost and decay are {lender}'s.")


def _traffic_reason(c: E.Context, prof: Any, path: str | None) -> str:
    parts = [
        f"Traffic {path}: {prof.requests} requests"
        + (f" ({prof.malformed_text()})" if prof.malformed else "")
        + f", {prof.input_len:.0f} tokens in / {prof.output_len:.0f} out on average ({prof.tokenizer})",
        prof.shape_text(),
    ]
    for m in ("ngram", "suffix"):
        al = prof.acceptance_length(m, 4)
        if al is not None:
            parts.append(f"measured {m} acceptance length at k=4: {al:.2f}")
    return "; ".join(parts) + "."


def fmt(x: float) -> str:
    return f"{x:.2f}x"


def _why(c: E.Context, d: E.DraftChoice, alpha: float, o: Outcome, scored: list, n: int, headline: float, k: int) -> str:
    """The chosen technique in one sentence, with the same figures the headline shows: its speedup (the curve's at
    this batch), the k it drafts at this batch and the k configured (the schedule's largest) where they differ."""
    kind = c.policy.prior(d.method).kind
    what = {
        "copy": "drafts are copied from the prompt and earlier output at almost no cost",
        "model": "a learned drafter predicts the target's next tokens",
    }[kind]
    others = sorted((t for t in scored if t[0] is not d), key=lambda t: -t[2].speedup)
    runner = f"; next best {others[0][0].method} at {fmt(others[0][2].speedup)}" if others else ""
    shape = f"k={o.shape.depth}" + (f", tree topk {o.shape.topk} x {o.shape.tokens} tokens" if o.shape.topk > 1 else "")
    if k != o.shape.depth:
        shape += f" at this batch; k={k} configured, the schedule's largest, drafted at smaller batches"
    return (
        f"{d.method} ({shape}) predicts {fmt(round(headline, 3))} at batch size {c.batch} for {c.workload} on {n} x "
        f"{c.gpu.name}: {what}; expected {o.acceptance_length:.2f} tokens per step (the first draft token accepted with "
        f"probability {alpha:.2f}, later ones less), step {o.cost.spec_ms:.1f} ms vs {o.cost.baseline_ms:.1f} ms "
        f"without{runner}."
    )
