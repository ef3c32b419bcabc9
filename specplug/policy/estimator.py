"""estimate: score one fixed speculative configuration (the CLI's ``specplug estimate``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specplug.capabilities import RESEARCH_CODE, StackCapabilities, research_code
from specplug.catalog.models import served_revision
from specplug.config import WORKLOADS, Config, ServeOptions, TreeSpec, WorkloadSpec
from specplug.errors import SpecplugError
from specplug.methods import HEAD_METHODS, SPECULATING
from specplug.plan import LoadPrediction, ModelRef, Parallelism, Plan, Speculation, StackRef
from specplug.policy import arms, planner
from specplug.policy import engine as E
from specplug.policy.data import load_policy
from specplug.policy.schema import Policy
from specplug.policy.stages import Request
from specplug.probe import Hardware, resolve_hardware
from specplug.request import PlanRequest

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
    caps = caps or _unresolved(stack)
    # The flags become a config by the rule recommend, plan, render and launch use (specplug.request), and the
    # deployment is resolved by the planner's own stages (model, traffic, GPU count and split, cost model, what fits);
    # only the technique is given here instead of chosen.
    lengths = {} if traffic and (input_len, output_len) == (1024, 256) else {"input_len": input_len, "output_len": output_len}
    request = PlanRequest.from_flags(
        model=model, gpu=gpu, num_gpus=num_gpus, concurrency=batch_size, workload=workload, temperature=temperature,
        traffic=traffic, request_rate=request_rate, slo_tpot_ms=slo_tpot_ms, slo_ttft_ms=slo_ttft_ms,
        quantization=quantization, kv_cache_dtype=kv_cache_dtype, **lengths,  # the defaults give way to the traffic's
    )
    cfg = request.apply(Config(serve={"dtype": dtype}))  # type: ignore[arg-type]
    s = planner.run(Request(cfg, resolve_hardware(gpu, num_gpus), caps, load_policy(policy), calibration, validate, (),
                            False, require_fit), planner.DEPLOYMENT_STAGES)
    pol, m, g, target, kvb, c = s.pol, s.model, s.gpu, s.target, s.kvb, s.c
    num_gpus, tp, pp = s.n, s.par.tensor_parallel_size, s.par.pipeline_parallel_size
    input_len, output_len, tokens = s.wl.input_len, s.wl.output_len, s.tokens
    warnings: list[str] = [*s.reasons(), *s.warnings()]
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
        verified = num_draft_tokens or steps * topk + 1
        if verified < 2:
            raise SpecplugError("num_draft_tokens must be at least 2.")
        tree = TreeSpec(steps=steps, topk=topk, num_draft_tokens=verified)
    alpha, cal = E.alpha_for(c, d)
    cap_base, cap = s.capacity, planner.capacity_with(s, d)
    running = s.seqs  # the batch the deployment runs (what the KV cache holds, unless require_fit=False)
    batch_size = running if batch_size is None else batch_size
    queued = require_fit and 1 <= cap < running
    o = E.score(c, d, alpha, cap if queued else running, E.shapes(c, method, num_speculative_tokens, tree))
    if queued:
        # The drafter's memory leaves fewer slots than the baseline runs: its throughput with every slot busy.
        base_ms = arms.baseline_arm(c, input_len, cap_base).step_ms(running)
        o = dataclasses.replace(o, speedup=(cap * o.acceptance_length / o.cost.spec_ms) / (running / base_ms))
    if tree is None and o.shape.steps:
        tree = TreeSpec(steps=o.shape.steps, topk=o.shape.topk, num_draft_tokens=o.shape.tokens)
    if stack != RESEARCH_CODE and validate is not None:
        # The checks every command runs, on the k and version this estimate scored. A tree given here is costed as
        # published runs used it: stacks fill trees their own way, so its size is not held to the plan's rule.
        validate(_plan_of(m, g.name, g.memory_gb or 0.0, num_gpus, caps, tp, pp, method, d.drafter_id, o.shape.depth,
                          s.cfg.serve.quantization, kv_cache_dtype, served_revision(model, m)))
    # A stack starts with room for one request and queues the rest: what must fit is one request beside the weights.
    mem = E.memory(pol, m, target, s.device.memory_gb, tp, pp, 1, tokens, d)
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


def _unresolved(stack: str) -> StackCapabilities:
    """Capabilities for a caller that resolved none (specplug.planning.estimate does): research code's own, else a
    stack that drafts chains one token a forward, costed by its policy row or the default one, with no vocabulary
    rules of its own."""
    return research_code() if stack == RESEARCH_CODE else StackCapabilities(stack, None, "unknown")


def _plan_of(m: Any, gpu: str, gpu_gb: float, n: int, caps: StackCapabilities, tp: int, pp: int, method: str,
             drafter: str | None, k: int, quantization: str | None, kv_cache_dtype: str, revision: str | None) -> Plan:
    """The Plan this estimate stands for, for the checks every command runs."""
    return Plan(
        model=ModelRef(name=m.name, hf_id=m.local_path or m.hf_id, local_path=m.local_path, revision=revision,
                       weight_format=m.weight_format),
        hardware=Hardware(gpu=gpu, num_gpus=n, memory_gb=gpu_gb, source="named"),
        stack=StackRef(name=caps.name, version=caps.version),  # type: ignore[arg-type]
        workload=WorkloadSpec(),
        parallelism=Parallelism(tensor_parallel_size=tp, pipeline_parallel_size=pp),
        speculation=Speculation(method=method, drafter=drafter, num_speculative_tokens=k),  # type: ignore[arg-type]
        serve=ServeOptions(quantization=quantization, kv_cache_dtype=kv_cache_dtype),  # type: ignore[arg-type]
    )
