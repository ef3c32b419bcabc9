"""The policy engine: candidates -> feasibility -> score -> choose -> schedule, producing a Plan.

Pure Python over the catalogs and the policy data (no numpy), so that `specplug recommend` starts fast.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplug.catalog import GPU, Model, get_model
from specplug.catalog.drafters import Drafter, find_drafter
from specplug.catalog.models import served_revision
from specplug.catalog.precision import WeightFormat, effective_bytes, get_weight_format
from specplug.config import TreeSpec
from specplug.errors import CatalogError, SpecplugError
from specplug.methods import BLOCK_METHODS, COPY_METHODS, HEAD_METHODS, SPECULATING
from specplug.policy import context, perf
from specplug.policy.perf import Arch, Device, Outcome, Shape
from specplug.policy.schema import Policy, StackFactors
from specplug.policy.tokenizers import compatible

if TYPE_CHECKING:
    from specplug.capabilities import StackCapabilities
    from specplug.policy.calibration import Calibration
    from specplug.traffic import TrafficProfile

# Candidate order: the method table's, where ties in predicted speedup go to the earlier (simpler to run) method.
METHOD_ORDER = SPECULATING


# ------------------------------------------------------------------------------------------- inputs


# Legacy serve.dtype / estimate(dtype=...) spellings that meant a weight format.
_DTYPE_FORMATS = {"fp8": "fp8", "float8": "fp8", "int8": "int8", "w8a8": "int8", "int4": "int4-gptq", "awq": "int4-awq",
                  "gptq": "int4-gptq", "fp4": "nvfp4", "nvfp4": "nvfp4", "mxfp4": "mxfp4", "q4": "q4_k_m", "q8": "q8_0"}


def serve_format(m: Model, quantization: str | None = None, dtype: str | None = "auto") -> WeightFormat:
    """The weight format a deployment serves: ``quantization`` when set, else the checkpoint's own."""
    if quantization:
        return get_weight_format(quantization)
    legacy = _DTYPE_FORMATS.get((dtype or "auto").lower())
    return get_weight_format(legacy or m.weight_format or "bf16")


def arch_of(m: Model, fmt: WeightFormat | None = None, kv_bytes: float = 2.0) -> Arch:
    """The cost model's view of ``m`` served in ``fmt`` (default: its checkpoint format) with a KV cache of
    ``kv_bytes`` per value: bytes per weight drive both memory fit and the memory-bound step time."""
    fmt = fmt or get_weight_format(m.weight_format or "bf16")
    params = m.params_b or 7.0
    layers = m.num_layers or max(2, round(32 * (params / 7.0) ** 0.35))
    hidden = m.hidden_size or int(math.sqrt(params * 1e9 / (12 * layers)))
    kv = m.kv_bytes_per_token(kv_bytes) or 2 * layers * hidden * kv_bytes
    wbytes = effective_bytes(fmt, params, m.embedding_params_b, m.expert_params_b)
    return Arch(
        params_b=params,
        active_params_b=m.active_params_b or params,
        layers=layers,
        hidden=hidden,
        vocab=m.vocab_size or 32000,
        kv_bytes_per_token=kv,
        experts=m.moe_num_experts or 0,
        experts_per_token=m.moe_experts_per_token or 0,
        weight_bytes=wbytes,
    )


def guess_arch(params_b: float, like: Arch, wbytes: float = 2.0) -> Arch:
    """A plausible dense architecture of ``params_b`` billion parameters (drafters not in the catalog)."""
    layers = max(2, round(32 * (params_b / 7.0) ** 0.35))
    hidden = max(256, int(math.sqrt(max(params_b * 1e9 - like.vocab * 2 * 512, 1e6) / (12 * layers))))
    return Arch(params_b, params_b, layers, hidden, like.vocab, 2 * layers * hidden * 2.0 / 4, weight_bytes=wbytes)


_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*([mb])(?![a-z])", re.IGNORECASE)


def size_from_name(name: str) -> float | None:
    """'double7/vicuna-68m' -> 0.068, 'Llama-3.2-1B' -> 1.0 (billions), else None."""
    found = _SIZE.findall(name.replace("_", "-"))
    if not found:
        return None
    n, unit = found[-1]
    return float(n) / (1000.0 if unit.lower() == "m" else 1.0)


def device_of(gpu: GPU, policy: Policy) -> Device:
    bw = gpu.memory_bw_gbs
    tf = gpu.tensor_tflops()
    if not bw or not tf:
        raise CatalogError(
            f"The GPU catalog lacks {'memory bandwidth' if not bw else 'tensor throughput'} for {gpu.name}, so its speed cannot be modelled.",
            "Pick a close catalog GPU with --gpu (see 'specplug gpus').",
        )
    link = policy.rules.nvlink_gbs if gpu.nvlink else policy.rules.pcie_gbs
    return Device(bw_gbs=bw, tflops=tf, memory_gb=gpu.memory_gb or 0.0, link_gbs=link)


@dataclass
class DraftChoice:
    method: str
    drafter_id: str | None = None
    drafter_model: Model | None = None
    drafter_arch: Arch | None = None
    catalog: Drafter | None = None
    note: str | None = None  # a caveat to warn about
    ruled_out: str | None = None
    unconfirmed: str | None = None  # scored for the user to see, never chosen
    vocab_mismatch: str | None = None  # how a draft model's vocabulary differs from the target's (None: it does not)


@dataclass
class Context:
    """Everything fixed for one planning question."""

    policy: Policy
    model: Model
    target: Arch
    gpu: GPU
    device: Device
    stack: str
    factors: StackFactors
    tp: int
    pp: int
    batch: int
    ctx: float
    workload: str
    temperature: float
    calibration: Calibration | None = None
    traffic: TrafficProfile | None = None
    trees: bool = False  # the stack drafts token trees (its capabilities)
    parallel_drafting: frozenset[str] = frozenset()  # drafter formats it drafts in one forward (its capabilities)
    mixes_prefill: bool = False  # a joining prefill rides in the running batch's step (its capabilities)
    notes: list[str] = field(default_factory=list)

    def model_ids(self) -> set[str]:
        return {self.model.hf_id, self.model.name, *self.model.aliases}


def local_layers(drafter: str) -> int | None:
    """``num_hidden_layers`` from a local drafter folder's config.json (None for a hub id or no such field)."""
    cfg = Path(drafter) / "config.json"
    try:
        n = json.loads(cfg.read_text(encoding="utf-8")).get("num_hidden_layers") if cfg.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and n > 0 else None


def _check_drafter_files(drafter: str, method: str) -> None:
    """A drafter outside the catalog is read from its config.json (a folder, the Hub or its cache): one trained for
    another method is an error naming the method it is. Files that cannot be read (offline, no copy) check nothing."""
    from specplug.catalog.drafterconfig import check_method, read_drafter

    try:
        info = read_drafter(drafter)
    except CatalogError:
        return
    check_method(info, method)


def resolve_drafter(method: str, drafter: str, target: Model, target_arch: Arch, policy: Policy, caps: StackCapabilities, kv_bytes: float = 2.0) -> DraftChoice:
    """A user-named drafter: catalog model, catalog head, local folder or unknown HF id (size guessed)."""
    cat = find_drafter(drafter, target.base_model or target.hf_id)
    if cat is None and (method in BLOCK_METHODS or method in HEAD_METHODS):
        _check_drafter_files(drafter, method)
    if method in BLOCK_METHODS:
        layers = local_layers(drafter)
        arch = perf.dflash_arch(target_arch, layers) if layers else None
        return DraftChoice(method, cat.drafter_hf_id if cat else drafter, drafter_arch=arch, catalog=cat)
    if method != "draft_model":
        return DraftChoice(method, cat.drafter_hf_id if cat else drafter, catalog=cat)
    try:
        dm = get_model(drafter)
    except CatalogError:
        dm = None
    if dm is not None:
        # A draft model is served in its own checkpoint's format (vLLM reads its quantization from its config).
        # Named at a revision: drafted from the commit its facts were read at, as the target is served.
        rev = served_revision(drafter, dm)
        ident = dm.local_path or (f"{dm.hf_id}@{rev}" if rev else dm.hf_id)
        choice = DraftChoice(method, ident, dm, arch_of(dm, kv_bytes=kv_bytes), cat)
        compat = compatible(target, dm, caps)
        if not compat.ok:
            choice.vocab_mismatch = compat.reason or "the vocabularies differ"
            choice.ruled_out = f"tokenizer mismatch: {choice.vocab_mismatch}"
        elif compat.reason:
            choice.note = f"Drafter {drafter}: {compat.reason}."
        return choice
    size = (cat.params_b if cat and cat.params_b else None) or size_from_name(drafter) or policy.rules.unknown_drafter_params_b
    return DraftChoice(
        method,
        drafter,
        None,
        guess_arch(size, target_arch),
        cat,
        note=(
            f"Drafter '{drafter}' is not in the model catalog: assumed {size:g}B parameters and the target's tokenizer; "
            "check that it shares the target's vocabulary."
        ),
    )


def rates_for(c: Context, d: DraftChoice) -> tuple[float, ...] | None:
    """Acceptance per draft position measured by replaying the user's traffic (copy-based methods only)."""
    if c.traffic is None or d.method not in COPY_METHODS:
        return None
    # A method that borrows its prior runs the same proposer: the lender's replay measures it.
    rates = c.traffic.position_rates(c.policy.prior(d.method).prior_from or d.method)
    return tuple(min(max(r, 0.0), c.policy.acceptance.max_alpha) for r in rates) if rates else None


_K_IN_BASIS = re.compile(r"\bk\s*=\s*(\d+)", re.IGNORECASE)
_T_IN_BASIS = re.compile(r"\btemperature\s*=?\s*(\d+(?:\.\d+)?)|\bT\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def basis_temperature(basis: str | None) -> float:
    """The sampling temperature a published acceptance was measured at (0 where the basis states none)."""
    m = _T_IN_BASIS.search(basis or "")
    return float(m.group(1) or m.group(2)) if m else 0.0


def published_alpha(c: Context, d: DraftChoice) -> float | None:
    """First-position acceptance implied by the drafter's own published acceptance length (its card or paper),
    moved to this workload and temperature by the method prior's effects; None when none is published."""
    if d.method in COPY_METHODS or d.method == "draft_model":
        return None
    prior = c.policy.prior(d.method)

    def alpha_of(x: Drafter) -> float | None:
        m = _K_IN_BASIS.search(x.acceptance_basis or "")
        if not x.acceptance_length or not m:
            return None
        # Back to temperature 0 by the method's temperature effect, which the workload's is then applied on top of.
        a = perf.solve_alpha(x.acceptance_length, int(m.group(1)), prior.decay)
        return perf.sigmoid(perf.logit(a) - prior.temperature_slope * min(basis_temperature(x.acceptance_basis), 1.0))

    own = alpha_of(d.catalog) if d.catalog is not None else None
    if own is None and d.catalog is not None and d.catalog.cross_target:
        return None  # its siblings were trained on this target; it was not
    if own is None:
        # Heads of one method for one target are trained on the same outputs: their published acceptance
        # says more about this one than the method's average over every target does.
        siblings = sorted(a for a in (alpha_of(x) for x in c.model.known_drafters(d.method)) if a is not None)
        own = siblings[len(siblings) // 2] if siblings else None
    if own is None:
        return None
    a = own
    x = perf.logit(a) + perf.logit(prior.alpha_for(c.workload)) - perf.logit(prior.alpha_for("chat"))
    x += prior.temperature_slope * min(c.temperature, 1.0)
    return min(perf.sigmoid(x), c.policy.acceptance.max_alpha)


def cross_target_note(d: DraftChoice, target: Model) -> str | None:
    """The warning a plan or estimate carries when its head was trained on a sibling checkpoint."""
    if d.catalog is None or not d.catalog.cross_target:
        return None
    return (
        f"{d.catalog.drafter_hf_id} was trained on {d.catalog.trained_for}, not {target.hf_id}: its acceptance "
        "here is unmeasured and the prediction discounts it; measure it with `specplug bench` and `calibrate`."
    )


def alpha_for(c: Context, d: DraftChoice) -> tuple[float, str | None]:
    """First-position acceptance for a candidate, and where it came from: 'calibrated' (a calibration
    entry), 'traffic' (measured on the user's logs, or the prior moved by their measured shape) or None."""
    prior = c.policy.prior(d.method)
    rates = rates_for(c, d)
    if rates:
        return rates[0], "traffic"
    if c.calibration is not None:
        e = c.calibration.match(c.model_ids(), d.method, c.workload, d.drafter_id, c.stack, c.temperature)
        if e is not None:
            from specplug.policy.calibration import first_alpha_from

            tree = c.policy.acceptance.tree
            return min(first_alpha_from(e, prior.decay, prior.match_accept, tree.gain, tree.confidence), c.policy.acceptance.max_alpha), "calibrated"
    ratio = params = None
    if d.method == "draft_model" and d.drafter_arch is not None:
        ratio, params = d.drafter_arch.params_b / max(c.target.params_b, 1e-3), d.drafter_arch.params_b
    a = published_alpha(c, d) or perf.first_alpha(c.policy, d.method, c.workload, c.temperature, ratio, params)
    if d.catalog is not None and d.catalog.cross_target:
        a = perf.sigmoid(perf.logit(a) - c.policy.acceptance.cross_target_logit)
    # Priors and published figures are short-context acceptance: learned drafters accept less over a long context,
    # averaged over the traffic's contexts where a log gives them.
    spread = c.traffic.contexts if c.traffic is not None and c.traffic.contexts else (c.ctx,)
    a = sum(context.alpha_at(d.method, a, x) for x in spread) / len(spread)
    if c.traffic is not None and prior.kind == "model":
        shifted = perf.sigmoid(perf.logit(a) + c.traffic.workload_shift())
        return min(shifted, c.policy.acceptance.max_alpha), "traffic"
    return a, None


def shapes(c: Context, method: str, k: int | None = None, tree: TreeSpec | None = None) -> list[Shape]:
    if tree is not None:
        return [Shape(tree.steps, tree.steps, tree.topk, tree.num_draft_tokens)]
    if k is not None:
        return [Shape(k)]
    return perf.shapes_for(c.policy, method, c.trees)


def drafts_in_parallel(c: Context, d: DraftChoice) -> bool:
    """A draft model whose format the stack drafts all k tokens of in one forward (PARD on vLLM 0.32+)."""
    return d.method == "draft_model" and d.catalog is not None and d.catalog.format in c.parallel_drafting


def score(c: Context, d: DraftChoice, alpha: float, batch: int, cands: list[Shape]) -> Outcome:
    return perf.best(
        c.policy, d.method, alpha, c.target, d.drafter_arch, c.device, c.factors, c.tp, batch, c.ctx, cands, rates_for(c, d),
        parallel=drafts_in_parallel(c, d),
    )


def ranked(c: Context, d: DraftChoice, alpha: float, batch: int, cands: list[Shape]) -> list[Outcome]:
    """Every shape in ``cands`` scored at ``batch``, fastest first (its head is :func:`score`'s choice)."""
    return perf.ranked(
        c.policy, d.method, alpha, c.target, d.drafter_arch, c.device, c.factors, c.tp, batch, c.ctx, cands, rates_for(c, d),
        parallel=drafts_in_parallel(c, d),
    )


# ------------------------------------------------------------------------------------------- memory


@dataclass
class Memory:
    gpu_gb: float
    target_gb: float
    drafter_gb: float
    kv_gb: float
    drafter_kv_gb: float
    act_gb: float
    usable_gb: float

    @property
    def used_gb(self) -> float:
        return self.target_gb + self.drafter_gb + self.kv_gb + self.drafter_kv_gb + self.act_gb

    @property
    def headroom_gb(self) -> float:
        return self.usable_gb - self.used_gb

    @property
    def fits(self) -> bool:
        return self.headroom_gb >= 0


# GPU memory comes in GiB (the catalog's sizes are the vendors' GiB figures, NVML's total is read as GiB); weights and
# KV cache are counted in decimal GB (params_b x bytes), so a GPU's size is converted before the two are compared.
GIB_IN_GB = 1024**3 / 1e9


def memory(
    policy: Policy, model: Model, target: Arch, gpu_gib: float, tp: int, pp: int, seqs: int, tokens_per_seq: int, d: DraftChoice | None,
    context: int = 0,
) -> Memory:
    """Memory per GPU in decimal GB for a GPU of ``gpu_gib`` GiB. The KV cache holds ``seqs`` sequences of
    ``tokens_per_seq``, and at least one request of ``context`` tokens where the stack reserves that at start."""
    gpu_gb = gpu_gib * GIB_IN_GB
    # Token-slots of KV cache at every layer's full width (sliding-window layers keep only their window).
    slots = max(seqs * tokens_per_seq * model.kv_share(tokens_per_seq), context * model.kv_share(context))
    tokens = max(seqs * tokens_per_seq, context)
    ranks = tp * pp
    kv_heads = model.num_kv_heads or model.num_attention_heads or tp
    # KV heads split over TP ranks; with fewer KV heads than ranks they are replicated.
    kv_split = min(tp, kv_heads) * pp if not model.uses_mla else pp
    target_gb = target.params_b * target.weight_bytes / ranks
    kv_gb = slots * target.kv_bytes_per_token / kv_split / 1e9
    dw = dkv = 0.0
    if d is not None and d.method not in COPY_METHODS and d.method != "none":
        da = d.drafter_arch or perf.draft_arch(d.method, target, None)
        if da is not None:
            dtp = 1 if d.method == "draft_model" and draft_tp(d, tp) == 1 else tp
            dw = da.params_b * da.weight_bytes / dtp
            if d.method == "draft_model":
                dkv = tokens * da.kv_bytes_per_token / dtp / 1e9
            elif d.method in ("eagle", "eagle3", "mtp", *BLOCK_METHODS):
                # One (EAGLE, MTP) or a few (DFlash) layers' KV cache at the target's shape.
                dkv = tokens * target.kv_bytes_per_token / max(target.layers, 1) * da.layers / kv_split / 1e9
    rules = policy.rules.memory
    act = rules.activation_gb + rules.activation_frac * gpu_gb
    return Memory(gpu_gb, target_gb, dw, kv_gb, dkv, act, gpu_gb * rules.gpu_memory_utilization)


def capacity(
    policy: Policy, model: Model, target: Arch, gpu_gib: float, tp: int, pp: int, tokens_per_seq: int, d: DraftChoice | None,
) -> int:
    """How many requests of ``tokens_per_seq`` the KV cache holds at once beside the weights (and ``d``'s weights and
    KV cache): what memory allows, before any request cap the stack sets."""
    empty = memory(policy, model, target, gpu_gib, tp, pp, 0, tokens_per_seq, d)
    one = memory(policy, model, target, gpu_gib, tp, pp, 1, tokens_per_seq, d)
    per_request = one.used_gb - empty.used_gb
    if per_request <= 0:
        return 0
    return max(0, math.floor(empty.headroom_gb / per_request + 1e-9))


def request_cap(caps: StackCapabilities, max_num_seqs: int | None, speculating: bool, gpu: str, gpu_gib: float) -> int | None:
    """The most requests the stack runs at once as configured on ``gpu`` (None: as many as memory holds)."""
    found = [x for x in (max_num_seqs or caps.max_batch_on(gpu, gpu_gib), caps.running_cap if speculating else None) if x]
    return min(found) if found else None


def capped_capacity(
    policy: Policy, model: Model, target: Arch, gpu_gib: float, tp: int, pp: int, tokens_per_seq: int, d: DraftChoice | None,
    caps: StackCapabilities, gpu: str, max_num_seqs: int | None = None,
) -> int:
    """:func:`capacity` within the stack's request cap on ``gpu``: the requests that run at once; more queue."""
    n = capacity(policy, model, target, gpu_gib, tp, pp, tokens_per_seq, d)
    cap = request_cap(caps, max_num_seqs, d is not None and d.method != "none", gpu, gpu_gib)
    return min(n, cap) if cap else n


def choose_gpus(
    policy: Policy, model: Model, target: Arch, gpu_gib: float, seqs: int, tokens: int, per_node: int, context: int = 0
) -> int | None:
    """Smallest GPU count (1, 2, 4, 8, then whole nodes) whose memory holds the model and the KV cache of ``seqs``
    requests (and one request of ``context`` tokens)."""
    for n in policy.rules.gpu_counts:
        tp, pp = split_gpus(n, policy, per_node, model)
        if memory(policy, model, target, gpu_gib, tp, pp, seqs, tokens, None, context).fits:
            return n
    return None


def fits_on_no_count(model: Model, fmt: str, seqs: int, tokens: int, policy: Policy, gpu: str) -> SpecplugError:
    """The error when no GPU count :func:`choose_gpus` tries holds the model (recommend and estimate say the same)."""
    return SpecplugError(
        f"{model.name} in {fmt} with {seqs} x {tokens} tokens of KV cache does not fit even on {policy.rules.gpu_counts[-1]} x {gpu}.",
        "Serve lighter weights (--quantization fp8 or int4-awq), an FP8 KV cache (--kv-cache-dtype fp8), "
        "fewer concurrent requests or a shorter context.",
    )


def draft_tp(d: DraftChoice, tp: int) -> int:
    """Small draft models run unsharded (vLLM allows draft TP 1 or the target's); big ones shard like the target."""
    if d.method == "draft_model" and d.drafter_arch is not None and d.drafter_arch.params_b <= 3.5:
        return 1
    return tp


# ------------------------------------------------------------------------------------------- helpers


def check_model(name: str | None) -> Model:
    if not name:
        raise SpecplugError(
            "No model given.",
            "Pass --model NAME (an alias such as llama-3.1-70b, a Hugging Face id or a local folder), "
            "or set 'model:' in specplug.yaml.",
        )
    return get_model(name)


def split_gpus(n: int, policy: Policy, per_node: int, model: Model | None = None) -> tuple[int, int]:
    """Tensor x pipeline sizes for ``n`` GPUs: the largest tensor group within a node that divides ``n``
    and the attention heads (and whose KV heads split evenly or replicate), pipeline stages for the rest."""

    def ok(tp: int) -> bool:
        return n % tp == 0 and (model is None or model.splits_heads(tp))

    tp = min(n, policy.rules.tp_max, per_node)
    while tp > 1 and not ok(tp):
        tp -= 1
    return tp, n // tp


def load_traffic_opt(path: Any, model: Model, **kw: Any) -> TrafficProfile | None:
    if not path:
        return None
    from specplug.traffic import load_traffic

    return load_traffic(path, model, **kw)


def load_calibration_opt(path: str | None) -> Calibration | None:
    if not path:
        return None
    from specplug.policy.calibration import load_calibration

    return load_calibration(path)

