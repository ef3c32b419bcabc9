"""estimate: score one fixed speculative configuration (the CLI's ``specplug estimate``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specplug.capabilities import RESEARCH_CODE, StackCapabilities, research_code
from specplug.catalog import get_gpu
from specplug.catalog.precision import kv_cache_bytes
from specplug.config import WORKLOADS, ServeOptions, TreeSpec, WorkloadSpec
from specplug.errors import SpecplugError
from specplug.methods import HEAD_METHODS, SPECULATING
from specplug.plan import LoadPrediction, ModelRef, Parallelism, Plan, Speculation, StackRef
from specplug.policy import arms
from specplug.policy import engine as E
from specplug.policy import load as L
from specplug.policy.data import load_policy
from specplug.policy.planner import cost_context
from specplug.policy.schema import Policy
from specplug.probe import Hardware

ESTIMATE_METHODS = SPECULATING


class Estimate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    method: str
    drafter: str | None = None
    stack: str
    gpu: str
    num_gpus: int
    batch_size: int
    workload: str
    temperature: float
    num_speculative_tokens: int = Field(description="Draft length k (tree depth for trees).")
    tree: TreeSpec | None = None
    acceptance_rate: float = Field(description="First-position acceptance alpha.")
    acceptance_rates: list[float] = Field(description="Acceptance per draft position (tree-widened).")
    acceptance_length: float = Field(description="Mean tokens per verification step, bonus token included.")
    speedup: float = Field(description="Decode throughput vs the same stack without speculation, same batch.")
    baseline_step_ms: float
    target_step_ms: float = Field(description="The target's verification pass.")
    draft_step_ms: float
    overhead_ms: float
    spec_step_ms: float
    calibrated: bool = False
    fits: bool = True
    capacity_requests: int = Field(0, description="Requests the KV cache holds at once with the drafter, within the stack's cap.")
    capacity_requests_without_drafter: int = Field(0, description="The same without speculation.")
    load: LoadPrediction | None = Field(None, description="Both arms at request_rate (set with --request-rate).")
    warnings: list[str] = Field(default_factory=list)


def estimate(
    model: str,
    method: str,
    *,
    drafter: str | None = None,
    num_speculative_tokens: int | None = None,
    tree_topk: int | None = None,
    num_draft_tokens: int | None = None,
    gpu: str,
    num_gpus: int | None = None,
    batch_size: int | None = None,
    workload: str = "chat",
    temperature: float = 0.0,
    stack: str = "vllm",
    input_len: int = 1024,
    output_len: int = 256,
    calibration: str | None = None,
    policy: str | Path | dict[str, Any] | Policy | None = None,
    dtype: str = "auto",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    traffic: str | Path | None = None,
    request_rate: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_ttft_ms: float | None = None,
    require_fit: bool = True,
    caps: StackCapabilities | None = None,
    validate: Callable[[Plan], None] | None = None,
) -> Estimate:
    """Predicted speedup and acceptance of one configuration. k (and the tree) are optimised when not given; the GPU
    count, when not given, is the smallest that holds the model and ``batch_size`` requests (as recommend chooses).
    More requests than the KV cache holds queue: the speedup is then the ratio of both arms' throughput with all
    their slots busy. ``request_rate`` adds both arms' TPOT, TTFT and throughput under that load.
    ``validate`` is the stack's checks, run on the Plan this estimate stands for (the caller's: the policy never
    asks an adapter)."""
    if method not in ESTIMATE_METHODS:
        raise SpecplugError(f"Unknown method '{method}'.", f"Choose one of: {', '.join(ESTIMATE_METHODS)}.")
    if workload not in WORKLOADS:
        raise SpecplugError(f"Unknown workload '{workload}'.", f"Choose one of: {', '.join(WORKLOADS)}.")
    for name, v, lo in (("num_gpus", num_gpus, 1), ("batch_size", batch_size, 1), ("input_len", input_len, 1), ("output_len", output_len, 1)):
        if v is not None and v < lo:
            raise SpecplugError(f"{name} must be at least {lo}, got {v}.")
    if temperature < 0:
        raise SpecplugError(f"temperature must be 0 or more, got {temperature}.")
    if num_speculative_tokens is not None and not 1 <= num_speculative_tokens <= 64:
        raise SpecplugError(f"num_speculative_tokens must be 1..64, got {num_speculative_tokens}.")
    pol = load_policy(policy)
    m = E.check_model(model)
    g = get_gpu(gpu)
    fmt = E.serve_format(m, quantization, dtype)
    kvb = kv_cache_bytes(kv_cache_dtype)
    target = E.arch_of(m, fmt, kvb)
    dev = E.device_of(g, pol)
    prof = E.load_traffic_opt(traffic, m)
    if prof is not None and (input_len, output_len) == (1024, 256):
        # The defaults give way to what the traffic measured.
        input_len, output_len = max(1, round(prof.input_len or input_len)), max(1, round(prof.output_len or output_len))
    caps = caps or _unresolved(stack)
    warnings: list[str] = []
    from_rate = batch_size is None and request_rate is not None
    batch_size = batch_size or 1
    if num_gpus is None:
        num_gpus = _gpu_count(pol, m, target, g, dev, batch_size, input_len + output_len, caps, fmt.name)
        warnings.append(f"{num_gpus} x {g.name} is the smallest count that holds {m.name} ({fmt.name} weights) and its "
                        "KV cache, as recommend chooses; set --num-gpus to estimate another.")
    tp, pp = E.split_gpus(num_gpus, pol, 8, m)
    c = cost_context(pol, caps, m, target, g, dev, tp, pp, batch_size, input_len, output_len,
                     workload, temperature, E.load_calibration_opt(calibration), prof)
    if drafter:
        d = E.resolve_drafter(method, drafter, m, target, pol, caps, kvb)
    elif method == "draft_model":
        known = m.known_drafters("draft_model")
        if not known:
            raise SpecplugError(
                f"No known draft model for {m.name}.", "Pass --drafter with a smaller model that shares its tokenizer."
            )
        d = E.resolve_drafter(method, known[0].drafter_hf_id, m, target, pol, caps, kvb)
    else:
        heads = m.known_drafters(method) if method in HEAD_METHODS else []
        d = E.DraftChoice(method, heads[0].drafter_hf_id if heads else None, catalog=heads[0] if heads else None)
        if method in HEAD_METHODS and not heads:
            warnings.append(f"No published {method} head for {m.name} is known: the estimate assumes a typical one.")
        if method == "mtp" and not m.mtp_layers:
            warnings.append(f"{m.name} has no MTP layers: the estimate assumes it had one.")
    if d.ruled_out:
        warnings.append(d.ruled_out)
    if d.note:
        warnings.append(d.note)
    if (note := E.cross_target_note(d, m)) is not None:
        warnings.append(note)
    tree = None
    if tree_topk is not None or num_draft_tokens is not None:
        steps = num_speculative_tokens or pol.prior(method).default_k
        topk = tree_topk or 1
        tokens = num_draft_tokens or steps * topk + 1
        if tokens < 2:
            raise SpecplugError("num_draft_tokens must be at least 2.")
        tree = TreeSpec(steps=steps, topk=topk, num_draft_tokens=tokens)
    alpha, cal = E.alpha_for(c, d)
    tokens = input_len + output_len
    cap_base = E.capped_capacity(pol, m, target, dev.memory_gb, tp, pp, tokens, None, caps, g.name)
    cap = E.capped_capacity(pol, m, target, dev.memory_gb, tp, pp, tokens, d, caps, g.name)
    # require_fit=False scores a batch that ran (a published row), whatever this memory model says it holds.
    if from_rate:
        # recommend's rule: the batch the request rate keeps running without speculation.
        batch_size = max(1, min(cap_base, round(L.running_batch(arms.baseline_arm(c, input_len, cap_base), request_rate,
                                                                 output_len))))
    running = max(1, min(batch_size, cap_base)) if require_fit else batch_size
    c.batch = running
    queued = require_fit and 1 <= cap < running
    o = E.score(c, d, alpha, cap if queued else running, E.shapes(c, method, num_speculative_tokens, tree))
    if queued:
        # The drafter's memory leaves fewer slots than the baseline runs: its throughput with every slot busy.
        base_ms = arms.baseline_arm(c, input_len, cap_base).step_ms(running)
        o = dataclasses.replace(o, speedup=(cap * o.acceptance_length / o.cost.spec_ms) / (running / base_ms))
    if batch_size > running:
        warnings.append(f"The KV cache holds {cap_base} requests of {tokens} tokens on {num_gpus} x {g.name}: of the "
                        f"{batch_size} requests, {cap_base} run at once and the rest queue; estimated at that batch.")
    if tree is None and o.shape.steps:
        tree = TreeSpec(steps=o.shape.steps, topk=o.shape.topk, num_draft_tokens=o.shape.tokens)
    if stack != RESEARCH_CODE and validate is not None:
        # The checks every command runs, on the k and version this estimate scored. A tree given here is costed as
        # published runs used it: stacks fill trees their own way, so its size is not held to the plan's rule.
        validate(_plan_of(m, g.name, g.memory_gb or 0.0, num_gpus, caps, tp, pp, method, d.drafter_id, o.shape.depth,
                          quantization, kv_cache_dtype))
    # A stack starts with room for one request and queues the rest: what must fit is one request beside the weights.
    mem = E.memory(pol, m, target, dev.memory_gb, tp, pp, 1, tokens, d)
    if not mem.fits and not require_fit:
        warnings.append(f"Does not fit: {mem.used_gb:.1f} GB needed per GPU, {mem.usable_gb:.1f} GB usable.")
    elif not mem.fits:
        # No speedup is shown for a deployment that cannot start.
        raise SpecplugError(
            f"{m.name} with {method} does not fit on {num_gpus} x {g.name}: {mem.used_gb:.1f} GB needed per GPU, "
            f"{mem.usable_gb:.1f} GB usable.",
            f"'specplug recommend --model {m.name} --gpu {gpu} --num-gpus {num_gpus}' lists what would fit "
            "(more GPUs, --quantization, --kv-cache-dtype fp8, a shorter context).",
        )
    r = lambda x: round(x, 4)  # noqa: E731
    return Estimate(
        model=m.hf_id,
        method=method,
        drafter=d.drafter_id,
        stack=stack,
        gpu=g.name,
        num_gpus=num_gpus,
        batch_size=batch_size,
        workload=workload,
        temperature=temperature,
        num_speculative_tokens=o.shape.depth,
        tree=tree,
        acceptance_rate=r(alpha),
        acceptance_rates=[r(a) for a in o.alphas],
        acceptance_length=r(o.acceptance_length),
        speedup=r(o.speedup),
        baseline_step_ms=r(o.cost.baseline_ms),
        target_step_ms=r(o.cost.verify_ms),
        draft_step_ms=r(o.cost.draft_ms),
        overhead_ms=r(o.cost.overhead_ms),
        spec_step_ms=r(o.cost.spec_ms),
        calibrated=cal == "calibrated",
        fits=mem.fits,
        capacity_requests=cap,
        capacity_requests_without_drafter=cap_base,
        load=_load(c, d, alpha, o, input_len, output_len, cap_base, cap, request_rate, slo_tpot_ms, slo_ttft_ms)
        if request_rate is not None and mem.fits else None,
        warnings=warnings,
    )


def _load(c: E.Context, d: E.DraftChoice, alpha: float, o: Any, input_len: int, output_len: int, cap_base: int, cap: int,
          rate: float, slo_tpot_ms: float | None, slo_ttft_ms: float | None) -> LoadPrediction:
    """Both arms at ``rate``: the configuration's one shape at every batch (an estimate has no schedule)."""
    base = arms.baseline_arm(c, input_len, cap_base)
    spec = arms.speculative_arm(c, d, alpha, o.shape, None, input_len, cap)
    return arms.predict_load(base, spec, rate, output_len, slo_tpot_ms, slo_ttft_ms)


def _gpu_count(pol: Policy, m: Any, target: Any, g: Any, dev: E.Device, batch: int, tokens: int, caps: StackCapabilities,
               fmt: str) -> int:
    """recommend's rule: the smallest count that holds the model and ``batch`` requests (and, on a stack that reserves
    one request of max_model_len at start, a useful context)."""
    context = min(m.max_position_embeddings or 0, pol.rules.memory.min_context) if caps.reserves_full_context else 0
    n = E.choose_gpus(pol, m, target, dev.memory_gb, batch, tokens, 8, context)
    if n is None:
        raise E.fits_on_no_count(m, fmt, batch, tokens, pol, g.name)
    return n


def _unresolved(stack: str) -> StackCapabilities:
    """Capabilities for a caller that resolved none (specplug.planning.estimate does): research code's own, else a
    stack that drafts chains one token a forward, costed by its policy row or the default one, with no vocabulary
    rules of its own."""
    return research_code() if stack == RESEARCH_CODE else StackCapabilities(stack, None, "unknown")


def _plan_of(m: Any, gpu: str, gpu_gb: float, n: int, caps: StackCapabilities, tp: int, pp: int, method: str,
             drafter: str | None, k: int, quantization: str | None, kv_cache_dtype: str) -> Plan:
    """The Plan this estimate stands for, for the checks every command runs."""
    return Plan(
        model=ModelRef(name=m.name, hf_id=m.local_path or m.hf_id, local_path=m.local_path, weight_format=m.weight_format),
        hardware=Hardware(gpu=gpu, num_gpus=n, memory_gb=gpu_gb, source="named"),
        stack=StackRef(name=caps.name, version=caps.version),  # type: ignore[arg-type]
        workload=WorkloadSpec(),
        parallelism=Parallelism(tensor_parallel_size=tp, pipeline_parallel_size=pp),
        speculation=Speculation(method=method, drafter=drafter, num_speculative_tokens=k),  # type: ignore[arg-type]
        serve=ServeOptions(quantization=quantization, kv_cache_dtype=kv_cache_dtype),  # type: ignore[arg-type]
    )
