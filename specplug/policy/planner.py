"""plan_from_config and recommend: resolve hardware and speculation, and fill the whole Plan."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specplug.catalog import Model, get_gpu
from specplug.config import Config, SpeculationSpec, TreeSpec
from specplug.errors import SpecplugError
from specplug.plan import (
    Candidate,
    CurvePoint,
    MemoryBudget,
    ModelRef,
    Parallelism,
    Plan,
    Prediction,
    ScheduleEntry,
    Speculation,
    StackRef,
)
from specplug.policy import engine as E
from specplug.policy.data import load_policy
from specplug.policy.perf import Outcome, Shape
from specplug.policy.schema import Policy

NGRAM_LOOKUP = (2, 4)


def _choose_gpus(policy: Policy, model: Model, wbytes: float, gpu_gb: float, seqs: int, tokens: int, per_node: int) -> int:
    """Smallest GPU count (1, 2, 4, 8, then whole nodes) whose memory holds the model and its KV cache."""
    target = E.arch_of(model, wbytes)
    for n in policy.rules.gpu_counts:
        tp, pp = _split(n, policy, per_node)
        if E.memory(policy, model, target, gpu_gb, tp, pp, seqs, tokens, None).fits:
            return n
    return policy.rules.gpu_counts[-1]


def _split(n: int, policy: Policy, per_node: int) -> tuple[int, int]:
    tp = min(n, policy.rules.tp_max, per_node)
    while n % tp:
        tp -= 1
    return tp, n // tp


def _candidates(
    c: E.Context, model: Model, stack: str, supported: dict[str, str | None], wbytes: float, version: str | None = None
) -> list[E.DraftChoice]:
    out: list[E.DraftChoice] = []
    for method in E.METHOD_ORDER:
        if method not in c.policy.acceptance.methods:
            continue
        reason = supported.get(method, f"{stack} does not offer {method}")
        if method in E.COPY_METHODS:
            out.append(E.DraftChoice(method, ruled_out=reason))
        elif method == "mtp":
            d = E.DraftChoice(method, model.hf_id if model.mtp_layers else None, ruled_out=reason)
            if not model.mtp_layers:
                d.ruled_out = f"{model.name} has no MTP layers"
            out.append(d)
        elif method == "draft_model":
            out.extend(_draft_models(c, model, stack, wbytes, reason, version))
        else:
            heads = model.known_drafters(method)
            if not heads:
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


def _draft_models(
    c: E.Context, model: Model, stack: str, wbytes: float, reason: str | None, version: str | None = None
) -> list[E.DraftChoice]:
    from specplug.catalog import models as all_models

    ids: list[str] = [d.drafter_hf_id for d in model.known_drafters("draft_model")]
    if model.tokenizer_family and not model.local_path:
        # Same-tokenizer catalog models 1/200 .. 1/6 of the target's size are natural drafters.
        same = sorted(
            (m for m in all_models() if m.tokenizer_family == model.tokenizer_family and m.hf_id != model.hf_id and m.params_b),
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
        d = E.resolve_drafter("draft_model", i, model, c.target, c.policy, stack, wbytes)
        issue = c.policy.rules.known_issue(d.drafter_id, stack, version)
        d.ruled_out = d.ruled_out or reason or (f"known problem in {stack}: {issue.reason}" if issue else None)
        out.append(d)
    return out


def _tree(c: E.Context, method: str, shape: Shape) -> TreeSpec | None:
    if not c.factors.trees or not c.policy.prior(method).tree:
        return None
    if shape.steps:
        return TreeSpec(steps=shape.steps, topk=shape.topk, num_draft_tokens=shape.tokens)
    return TreeSpec(steps=shape.k, topk=1, num_draft_tokens=shape.k + 1)


def _schedule(c: E.Context, d: E.DraftChoice, alpha: float, cands: list[Shape]) -> tuple[list[ScheduleEntry], list[CurvePoint]]:
    pts = c.policy.rules.batch_curve
    curve: list[CurvePoint] = []
    for b in pts:
        o = E.score(c, d, alpha, b, cands)
        on = o.speedup >= c.policy.rules.min_speedup
        curve.append(
            CurvePoint(
                batch_size=b,
                speedup=round(o.speedup if on else 1.0, 3),
                acceptance_length=round(o.acceptance_length if on else 1.0, 3),
                num_speculative_tokens=o.shape.depth if on else 0,
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
    return sched, curve


def _fix_hint(c: E.Context, model: Model, hw_gb: float, per_node: int, seqs: int, tokens: int, wbytes: float, d: E.DraftChoice | None) -> str:
    """The smallest change that makes the target itself fit first (more GPUs, shorter context, FP8), then
    what a drafter would add: the model not fitting is the problem, not the drafter."""
    hints: list[str] = []
    n = c.tp * c.pp
    heavy = d is not None and d.method not in E.COPY_METHODS and d.method != "none"

    def gpus_for(drafter: E.DraftChoice | None) -> int | None:
        for m in c.policy.rules.gpu_counts:
            if m > n:
                tp, pp = _split(m, c.policy, per_node)
                if E.memory(c.policy, model, c.target, hw_gb, tp, pp, seqs, tokens, drafter).fits:
                    return m
        return None

    plain = gpus_for(None)
    if plain is not None:
        with_d = gpus_for(d) if heavy else plain
        extra = ""
        if heavy and with_d != plain:
            extra = f" ({with_d} to add the {d.method} drafter)" if with_d else f" (the {d.method} drafter does not fit even then)"
        hints.append(f"use --num-gpus {plain} with n-gram or no drafter{extra}")
    base = E.memory(c.policy, model, c.target, hw_gb, c.tp, c.pp, seqs, 0, None)
    if base.fits:
        mem1 = E.memory(c.policy, model, c.target, hw_gb, c.tp, c.pp, 1, 1, None)
        fit_tokens = int(base.headroom_gb / max(seqs, 1) / mem1.kv_gb) if mem1.kv_gb > 0 else 0
        if fit_tokens >= 256:
            hints.append(
                f"shorten the context to about {fit_tokens} tokens per request (--input-len/--output-len) "
                "or serve fewer concurrent requests"
            )
    if c.target.weight_bytes > 1.0:
        t8 = E.arch_of(model, 1.0)
        if E.memory(c.policy, model, t8, hw_gb, c.tp, c.pp, seqs, tokens, None).fits:
            hints.append("serve FP8 weights (serve.dtype: fp8)")
    if not hints:
        hints.append("use a GPU with more memory")
    return "To fit: " + "; or ".join(hints) + "."


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


def plan_from_config(
    cfg: Config,
    *,
    probed: Any = None,
    stack_version: str | None = None,
    policy: str | Path | dict[str, Any] | Policy | None = None,
    calibration: str | None = None,
) -> Plan:
    """Resolve every ``auto`` in ``cfg`` (hardware, stack, speculation) and fill the whole Plan.

    An explicit ``speculation:`` is kept as given (its k chosen when missing) and still predicted; a warning
    says when the policy would choose differently. Same inputs give an identical Plan.
    """
    from specplug.adapter import default_stack
    from specplug.probe import resolve_hardware

    model = E.check_model(cfg.model)
    pol = load_policy(policy, cfg.policy or None)
    calib = E.load_calibration_opt(calibration or cfg.calibration)
    reasons: list[str] = []
    warnings: list[str] = []

    # ---- stack and version
    stack = cfg.stack.name if "name" in cfg.stack.model_fields_set else default_stack()
    if stack not in pol.stacks:
        raise SpecplugError(f"The policy has no cost factors for stack '{stack}'.", f"Known: {', '.join(pol.stacks)}.")
    supported, installed = E.stack_methods(stack, stack_version or cfg.stack.version, pol)
    if stack_version:
        version, vsource = stack_version, "flag"
    elif cfg.stack.version:
        version, vsource = cfg.stack.version, "pinned"
    elif installed:
        version, vsource = installed, "installed"
    else:
        version, vsource = None, "unknown"

    # ---- workload and hardware
    wl = cfg.workload
    seqs = wl.concurrency
    tokens = wl.input_len + wl.output_len
    if cfg.serve.max_model_len:
        tokens = min(tokens, cfg.serve.max_model_len)
    wbytes = E.weight_bytes(cfg.serve.dtype)
    hs = cfg.hardware_spec()
    hw = resolve_hardware(hs.gpu, hs.num_gpus, probed)
    gpu = get_gpu(hw.gpu)
    if hs.num_gpus is None and hw.source != "probed" and cfg.serve.tensor_parallel_size is None:
        n = _choose_gpus(pol, model, wbytes, hw.memory_gb, seqs, tokens, hs.gpus_per_node)
        msg = f"{n} x {gpu.name} is the smallest count (1, 2, 4, 8, then whole nodes) whose memory holds {model.name} and its KV cache"
        if hw.source == "default":
            note = hw.note.split(" Planning for the default")[0]
            msg = (
                f"{note} Planning for the default GPU, {gpu.name}: {msg}. "
                "Change it with --gpu NAME --num-gpus N or 'hardware:' in specplug.yaml."
            )
        else:
            msg += "; set --num-gpus to plan for another count."
        hw = hw.model_copy(update={"num_gpus": n, "note": msg})
        reasons.append(msg)
    elif hw.note:
        reasons.append(hw.note)
    n = hw.num_gpus
    if cfg.serve.tensor_parallel_size:
        tp = cfg.serve.tensor_parallel_size
        pp = max(cfg.serve.pipeline_parallel_size, n // tp) if n >= tp else cfg.serve.pipeline_parallel_size
    else:
        tp, pp = _split(n, pol, hs.gpus_per_node)
    par = Parallelism(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        num_nodes=max(1, math.ceil(tp * pp / hs.gpus_per_node)),
        gpus_per_node=hs.gpus_per_node,
    )
    device = E.device_of(gpu, pol)
    device = E.Device(device.bw_gbs, device.tflops, hw.memory_gb or device.memory_gb, device.link_gbs)
    factors = pol.stacks[stack]
    target = E.arch_of(model, wbytes)
    c = E.Context(
        policy=pol,
        model=model,
        target=target,
        gpu=gpu,
        device=device,
        stack=stack,
        factors=factors,
        tp=tp,
        pp=pp,
        batch=seqs,
        ctx=wl.input_len + wl.output_len / 2,
        workload=wl.type,
        temperature=wl.temperature,
        calibration=calib,
    )

    # ---- candidates
    explicit = cfg.speculation if isinstance(cfg.speculation, SpeculationSpec) else None
    cands = _candidates(c, model, stack, supported, wbytes, version)
    base_mem = E.memory(pol, model, target, device.memory_gb, tp, pp, seqs, tokens, None)
    scored: list[tuple[E.DraftChoice, float, Outcome]] = []
    candidates: list[Candidate] = []
    for d in cands:
        cand = Candidate(method=d.method, drafter=d.drafter_id)  # type: ignore[arg-type]
        if d.ruled_out:
            cand.ruled_out = d.ruled_out
            candidates.append(cand)
            continue
        mem = E.memory(pol, model, target, device.memory_gb, tp, pp, seqs, tokens, d)
        alpha, _ = E.alpha_for(c, d)
        o = E.score(c, d, alpha, seqs, E.shapes(c, d.method))
        cand.speedup = round(o.speedup, 3)
        cand.acceptance_length = round(o.acceptance_length, 3)
        cand.num_speculative_tokens = o.shape.depth
        if base_mem.fits and not mem.fits:
            cand.ruled_out = f"does not fit in memory with the drafter ({mem.used_gb:.1f} of {mem.usable_gb:.1f} GB per GPU)"
        elif o.speedup < pol.rules.min_speedup:
            cand.ruled_out = f"loses at batch size {seqs} (predicted {fmt(o.speedup)})"
        else:
            scored.append((d, alpha, o))
        candidates.append(cand)

    best = max(scored, key=lambda t: t[2].speedup, default=None)
    if best is not None:
        # A tie within 2% goes to the simpler (earlier) method: the model cannot tell them apart.
        top = best[2].speedup
        for t in scored:
            if t[2].speedup >= top * 0.98:
                best = t
                break

    # ---- the decision
    spec = Speculation()
    pred = Prediction()
    chosen: tuple[E.DraftChoice, float, Outcome] | None = None
    if explicit is not None and explicit.method != "none":
        d = (
            E.resolve_drafter(explicit.method, explicit.drafter, model, target, pol, stack, wbytes)
            if explicit.drafter
            else next((x for x in cands if x.method == explicit.method and x.drafter_id), E.DraftChoice(explicit.method))
        )
        if explicit.method in E.HEAD_METHODS and not d.drafter_id:
            raise SpecplugError(
                f"speculation.method is {explicit.method} but no drafter is given and none is known for {model.name}.",
                "Set speculation.drafter (or --drafter) to the head's Hugging Face id.",
            )
        if d.ruled_out:
            warnings.append(f"The configured drafter may not work: {d.ruled_out}.")
        issue = pol.rules.known_issue(d.drafter_id, stack, version)
        if issue:
            warnings.append(f"The configured drafter has a known problem in {stack}: {issue.reason}.")
        if supported.get(explicit.method):
            warnings.append(f"The configured method may not work: {supported[explicit.method]}.")
        alpha, _ = E.alpha_for(c, d)
        shapes = E.shapes(c, d.method, explicit.num_speculative_tokens, explicit.tree)
        o = E.score(c, d, alpha, seqs, shapes)
        chosen = (d, alpha, o)
        reasons.append(f"Speculation is set in the configuration: {explicit.method} kept as given.")
        if best is not None and (best[0].method, best[0].drafter_id) != (d.method, d.drafter_id) and best[2].speedup > o.speedup * 1.05:
            warnings.append(
                f"The policy would choose {best[0].method}"
                + (f" ({best[0].drafter_id})" if best[0].drafter_id else "")
                + f" here: predicted {fmt(best[2].speedup)} vs {fmt(o.speedup)} for the configured {d.method}."
            )
        elif best is None and o.speedup < pol.rules.min_speedup:
            warnings.append(f"The policy would not speculate here: predicted {fmt(o.speedup)} at batch size {seqs}.")
    elif explicit is not None:
        reasons.append("Speculation is turned off in the configuration (method: none).")
    elif best is not None:
        chosen = best
    else:
        reasons.append(
            f"No technique pays at batch size {seqs} on {n} x {gpu.name} with {stack}: speculation stays off."
            + (" At this batch the target is compute-bound, so verifying draft tokens costs real time." if seqs >= 32 else "")
        )

    if chosen is not None:
        d, alpha, o = chosen
        cand_shapes = E.shapes(c, d.method, explicit.num_speculative_tokens if explicit else None, explicit.tree if explicit else None)
        sched, curve = _schedule(c, d, alpha, cand_shapes)
        if explicit is not None and not any(e.num_speculative_tokens for e in sched):
            # The user chose this technique: honour it rather than render a schedule that never drafts.
            warnings.append(
                f"{d.method} is predicted not to pay at any batch size here (best {o.speedup:.2f}x); "
                "kept as configured, without a per-batch-size schedule."
            )
            sched = []
        pred = Prediction(
            speedup=round(o.speedup, 3),
            acceptance_length=round(o.acceptance_length, 3),
            acceptance_rate=round(alpha, 3),
            curve=curve,
            breakeven_batch_size=E.breakeven(c, d, alpha, cand_shapes),
        )
        spec = Speculation(
            method=d.method,  # type: ignore[arg-type]
            drafter=d.drafter_id if d.method not in E.COPY_METHODS else None,
            num_speculative_tokens=o.shape.depth,
            tree=explicit.tree if explicit and explicit.tree else _tree(c, d.method, o.shape),
            schedule=explicit.schedule if explicit and explicit.schedule else sched,
        )
        if d.method in ("ngram",):
            lo, hi = (explicit.prompt_lookup_min, explicit.prompt_lookup_max) if explicit else (None, None)
            spec.prompt_lookup_min, spec.prompt_lookup_max = lo or NGRAM_LOOKUP[0], hi or NGRAM_LOOKUP[1]
        if d.method == "draft_model":
            spec.draft_tensor_parallel_size = (explicit.draft_tensor_parallel_size if explicit else None) or E.draft_tp(d, tp)
        if d.note:
            warnings.append(d.note)
        for cand in candidates:
            cand.chosen = cand.method == d.method and cand.drafter == d.drafter_id and cand.ruled_out is None
        if explicit is None:
            reasons.append(_why(c, d, alpha, o, scored, n))
        if pred.breakeven_batch_size is not None and spec.schedule:
            reasons.append(
                f"Speculation stops paying above batch size {pred.breakeven_batch_size}; the schedule turns it off (k=0) there."
            )
        if E.alpha_for(c, d)[1] == "calibrated":
            reasons.append("Acceptance comes from the calibration file, not the prior.")
        if any(x.num_speculative_tokens == 0 for x in spec.schedule) and not E.stack_schedules(stack, version):
            warnings.append(f"{stack} cannot switch speculation off per batch size; the schedule's k=0 ranges are advisory.")

    # ---- memory
    mem = E.memory(pol, model, target, device.memory_gb, tp, pp, seqs, tokens, chosen[0] if chosen else None)
    hint = None if mem.fits else _fix_hint(c, model, device.memory_gb, hs.gpus_per_node, seqs, tokens, wbytes, chosen[0] if chosen else None)
    budget = _budget(mem, hint)
    if not mem.fits:
        warnings.insert(
            0,
            f"Does not fit: {mem.used_gb:.1f} GB needed per GPU, {mem.usable_gb:.1f} GB usable on {n} x {gpu.name}. {hint}",
        )

    # ---- warnings
    if wl.temperature >= pol.rules.high_temperature and chosen is not None:
        a0 = E.alpha_for(E.Context(**{**c.__dict__, "temperature": 0.0}), chosen[0])[0]
        warnings.append(
            f"Sampling at temperature {wl.temperature:g} lowers acceptance (predicted alpha {chosen[1]:.2f} vs {a0:.2f} greedy)."
        )
    cap = factors.spec_max_running_requests
    if cap and chosen is not None:
        warnings.append(
            f"{stack} caps running requests at {cap} when speculation is on"
            + (f", below the expected concurrency {seqs}" if seqs > cap else "")
            + "; set max_running_requests explicitly."
        )
    if factors.max_batch and seqs > factors.max_batch:
        warnings.append(f"{factors.label or stack} serves batch size {factors.max_batch} only; requests will queue.")
    if vsource == "unknown":
        warnings.append(f"{stack} is not installed here and no version is pinned: method support assumes a recent release.")

    return Plan(
        model=ModelRef(name=cfg.model or model.hf_id, hf_id=model.local_path or model.hf_id, local_path=model.local_path),
        hardware=hw,
        stack=StackRef(name=stack, version=version, version_source=vsource),  # type: ignore[arg-type]
        workload=wl,
        parallelism=par,
        speculation=spec,
        serve=cfg.serve,
        memory=budget,
        prediction=pred,
        candidates=candidates,
        reasons=reasons,
        warnings=warnings,
    )


def fmt(x: float) -> str:
    return f"{x:.2f}x"


def _why(c: E.Context, d: E.DraftChoice, alpha: float, o: Outcome, scored: list, n: int) -> str:
    kind = c.policy.prior(d.method).kind
    what = {
        "copy": "drafts are copied from the prompt and earlier output at almost no cost",
        "model": "a learned drafter predicts the target's next tokens",
    }[kind]
    others = sorted((t for t in scored if t[0] is not d), key=lambda t: -t[2].speedup)
    runner = f"; next best {others[0][0].method} at {fmt(others[0][2].speedup)}" if others else ""
    shape = f"k={o.shape.depth}" + (f", tree topk {o.shape.topk} x {o.shape.tokens} tokens" if o.shape.topk > 1 else "")
    return (
        f"{d.method} ({shape}) predicts {fmt(o.speedup)} at batch size {c.batch} for {c.workload} on {n} x {c.gpu.name}: "
        f"{what}; expected {o.acceptance_length:.2f} tokens per step (alpha {alpha:.2f}), "
        f"step {o.cost.spec_ms:.1f} ms vs {o.cost.baseline_ms:.1f} ms without{runner}."
    )


def recommend(
    model: str | None = None,
    *,
    gpu: str | None = None,
    num_gpus: int | None = None,
    batch_size: int | None = None,
    concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    workload: str | None = None,
    temperature: float | None = None,
    stack: str | None = None,
    stack_version: str | None = None,
    drafter: str | None = None,
    config: str | Path | Config | None = None,
    policy: str | Path | dict[str, Any] | None = None,
    calibration: str | None = None,
    probed: Any = None,
) -> Plan:
    """Recommend a speculative-decoding setup (the CLI's ``specplug recommend``); flags override the config.

    Unset traffic flags fall back to the config file, then to chat, 1 request, 1024 in / 256 out, greedy.
    """
    from specplug.config import load_config

    if isinstance(config, Config):
        cfg = config
    elif config is not None:
        cfg = load_config(config)
    else:
        cfg = Config()
    data = cfg.model_dump(exclude_unset=True)
    if model:
        data["model"] = model
    if stack:
        data["stack"] = {**(data.get("stack") or {}), "name": stack}
    if gpu or num_gpus:
        hw = data.get("hardware") if isinstance(data.get("hardware"), dict) else {}
        data["hardware"] = {**hw, **({"gpu": gpu} if gpu else {}), **({"num_gpus": num_gpus} if num_gpus else {})}
    wl = dict(data.get("workload") or {})
    if batch_size is not None or concurrency is not None:
        wl["concurrency"] = batch_size if batch_size is not None else concurrency
    for key, val in (("input_len", input_len), ("output_len", output_len), ("type", workload), ("temperature", temperature)):
        if val is not None:
            wl[key] = val
    data["workload"] = wl
    if drafter:
        spec = data.get("speculation") if isinstance(data.get("speculation"), dict) else None
        if spec is None:
            # A drafter alone means "use this draft model/head": infer the method from the catalog.
            from specplug.catalog.drafters import find_drafter

            cat = find_drafter(drafter)
            data["speculation"] = {"method": cat.method if cat else "draft_model", "drafter": drafter}
        else:
            data["speculation"] = {**spec, "drafter": drafter}
    from pydantic import ValidationError

    try:
        merged = Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SpecplugError(
            f"Invalid option {'.'.join(str(p) for p in err['loc'])}: {err['msg']}.",
            "Run 'specplug recommend --help' for the accepted values.",
        ) from None
    return plan_from_config(merged, probed=probed, stack_version=stack_version, policy=policy, calibration=calibration)
