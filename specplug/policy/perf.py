"""The performance model, in plain floats so that planning and fitting stay fast.

Per decoding step (the Medusa/EAGLE form):
``speedup = tau * T_base / (T_verify + T_draft + T_spec_overhead)``, where T_base is one ordinary step of the
target at batch b, T_verify the target's pass over the b*(k+1) (or tree) tokens, T_draft the drafter's
passes (one per tree level, topk tokens wide). A forward pass costs the larger of the GPU time (weights + KV bytes
over bandwidth vs FLOPs over throughput, per tensor-parallel rank, plus all-reduces) and the host time to launch it
(eager stacks launch per layer; CUDA-graph stacks barely at all); a tree's verification adds the stack's tree-mask
cost per token. Acceptance follows Leviathan et al. with a per-position decay; a tree holds the drafts its builder
scores likeliest, the j-th ranked sibling adding (1 - alpha) * ((j-1)^-gain - j^-gain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specplug.methods import BLOCK_METHODS
from specplug.policy.schema import MethodPrior, Policy, StackFactors


@dataclass(frozen=True)
class Arch:
    """What the cost model needs to know about a network (target, draft model or head)."""

    params_b: float
    active_params_b: float
    layers: int
    hidden: int
    vocab: int
    kv_bytes_per_token: float  # all layers, at the served KV-cache dtype
    experts: int = 0
    experts_per_token: int = 0
    weight_bytes: float = 2.0


@dataclass(frozen=True)
class Device:
    bw_gbs: float
    tflops: float
    memory_gb: float
    link_gbs: float  # per-GPU all-reduce bandwidth


@dataclass(frozen=True)
class Shape:
    """A speculation shape: chain of k (topk 1) or a tree of `steps` levels, `topk` wide, `tokens` verified."""

    k: int
    steps: int = 0
    topk: int = 1
    tokens: int = 0

    @property
    def depth(self) -> int:
        return self.steps or self.k

    @property
    def verify_tokens(self) -> int:
        return self.tokens or (self.k + 1)

    @property
    def width(self) -> float:
        """Tokens per sequence a drafting level runs: a tree builder expands its topk best branches at every level,
        however few of them the verification budget keeps (EAGLE-2, SGLang)."""
        return float(self.topk) if self.topk > 1 and self.steps else 1.0

    @property
    def is_tree(self) -> bool:
        return self.topk > 1 and self.steps > 0


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -60 else 0.0


# ------------------------------------------------------------------------------------------ acceptance


def first_alpha(
    policy: Policy,
    method: str,
    workload: str,
    temperature: float,
    size_ratio: float | None = None,
    drafter_params_b: float | None = None,
) -> float:
    """Acceptance of the first draft position, from the priors (before any calibration)."""
    prior = policy.prior(method)
    x = logit(prior.alpha_for(workload))
    x += prior.temperature_slope * min(temperature, 1.0)
    if method == "draft_model" and size_ratio:
        dm = policy.acceptance.draft_model
        x += dm.size_slope * math.log(size_ratio / dm.reference_ratio)
        if drafter_params_b:
            x += dm.params_slope * math.log(drafter_params_b / dm.reference_params_b)
    return min(sigmoid(x), policy.acceptance.max_alpha)


def position_alphas(
    alpha: float, decay: float, depth: int, tree_gain: float = 0.0, topk: int = 1, nodes: int = 0, confidence: float = 1.0
) -> list[float]:
    """Acceptance at each draft position, conditional on the one before: alpha * decay^i for a chain; for a tree
    of ``nodes`` drafts (at most ``topk`` siblings per node), the ratio of the chances that the accepted path
    reaches depth i+1 and depth i (see :func:`tree_reach`), whatever its budget: a tree of ``depth`` nodes is
    chosen by the drafter's scores and need not be the chain."""
    if topk <= 1:
        return [alpha * decay**i for i in range(depth)]
    reach = tree_reach(alpha, decay, depth, tree_gain, topk, nodes, confidence)
    return [r / prev if prev > 0 else 0.0 for r, prev in zip(reach, (1.0, *reach), strict=False)]


def rank_chances(a: float, gain: float, topk: int) -> list[float]:
    """Chance that the drafter's j-th ranked guess is the target's token, j = 1..topk: c(j) - c(j-1), where its top j
    catch it with c(j) = 1 - (1 - a) * j^-gain (the drafter's top-k mass)."""
    c = [0.0] + [1.0 - (1.0 - a) * j ** (-gain) for j in range(1, topk + 1)]
    return [c[j] - c[j - 1] for j in range(1, topk + 1)]


def tree_reach(
    alpha: float, decay: float, depth: int, tree_gain: float, topk: int, nodes: int, confidence: float = 1.0
) -> list[float]:
    """Chance that the accepted path reaches each depth of a tree of ``nodes`` drafts.

    The drafter's j-th ranked guess at depth d is right with :func:`rank_chances`; a node's chance is the product
    along its path and a depth's reach the sum of its nodes' chances. Tree builders (EAGLE-2, SGLang, TensorRT-LLM's
    dynamic trees) keep the nodes the drafter itself scores highest, best-first with siblings in rank order. That
    score is the drafter's probability, not the greedy acceptance: its top guess scores ``confidence`` * alpha_d and
    the rest of its mass splits over the siblings as the true chances do. Below 1 the builder spends budget on
    siblings that a deeper node would have used better, so a tree no larger than its depth falls below the chain."""
    import heapq

    true = [rank_chances(alpha * decay**d, tree_gain, topk) for d in range(depth)]
    scored = [rank_chances(confidence * alpha * decay**d, tree_gain, topk) for d in range(depth)]
    reach = [0.0] * depth
    # (-score of the path, depth, rank among siblings, parent's score, parent's chance, own chance)
    heap = [(-scored[0][0], 0, 0, 1.0, 1.0, true[0][0])]
    for _ in range(nodes):
        if not heap:
            break
        s, d, j, ps, pc, q = heapq.heappop(heap)
        reach[d] += q
        if j + 1 < topk:
            heapq.heappush(heap, (-ps * scored[d][j + 1], d, j + 1, ps, pc, pc * true[d][j + 1]))
        if d + 1 < depth:
            heapq.heappush(heap, (s * scored[d + 1][0], d + 1, 0, -s, q, q * true[d + 1][0]))
    return reach


def acceptance_length(alphas: list[float]) -> float:
    """Expected tokens per verification step, bonus token included: 1 + sum_i prod_{j<=i} alpha_j."""
    tau, run = 1.0, 1.0
    for a in alphas:
        run *= a
        tau += run
    return tau


def solve_alpha(
    tau: float, k: int, decay: float, match_accept: float | None = None, tree: tuple[float, ...] | None = None
) -> float:
    """First-position alpha whose chain of k gives acceptance length ``tau`` (bisection), scored as
    :func:`evaluate` scores it: with ``match_accept`` (a copy method) only a share alpha / match_accept of steps
    draft; with ``tree`` (topk, drafts, gain[, confidence]) the k levels hold that tree."""
    tau = min(max(tau, 1.0), k + 1.0)
    topk, nodes, gain, conf = (*tree, 1.0)[:4] if tree else (1, k, 0.0, 1.0)

    def length(a: float) -> float:
        share = min(1.0, a / match_accept) if match_accept else 1.0
        if share <= 0:
            return 1.0
        return 1.0 + share * (acceptance_length(position_alphas(a / share, decay, k, gain, int(topk), int(nodes), conf)) - 1.0)

    lo, hi = 0.0, 0.9999
    for _ in range(50):
        mid = (lo + hi) / 2
        if length(mid) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ------------------------------------------------------------------------------------------ cost


def forward_ms(
    arch: Arch,
    dev: Device,
    sf: StackFactors,
    tp: int,
    n_tokens: int,
    n_seqs: int,
    ctx: float,
    layers: int | None = None,
) -> float:
    """One forward pass over ``n_tokens`` new tokens of ``n_seqs`` sequences with ``ctx`` cached tokens each."""
    layers = layers or arch.layers
    total, active = arch.params_b * 1e9, arch.active_params_b * 1e9
    if arch.experts and arch.experts_per_token and total > active:
        # Experts touched by n tokens: 1 - (1 - k/E)^n of them (uniform routing).
        share = arch.experts_per_token / arch.experts
        expert = (total - active) / (1 - share)
        shared = total - expert
        # Tokens of one sequence in a verification pass are consecutive positions of one text and route
        # mostly to the experts its first token uses: only a (1 - locality) share of them routes afresh.
        routed = n_seqs + max(n_tokens - n_seqs, 0) * (1 - sf.moe_draft_locality)
        touched = 1 - (1 - share) ** routed
        weights = (shared + expert * touched) * arch.weight_bytes
    else:
        weights = total * arch.weight_bytes
    kv = n_seqs * ctx * arch.kv_bytes_per_token
    mem_s = (weights + kv) / (tp * dev.bw_gbs * 1e9 * sf.bw_efficiency)
    flops = 2 * active * n_tokens + 4 * layers * arch.hidden * ctx * n_tokens
    if arch.experts and arch.experts_per_token and total > active:
        # Routed experts multiply many small, ragged matrices: their FLOPs run at a fraction of dense speed.
        share = arch.experts_per_token / arch.experts
        expert_active = (total - active) / (1 - share) * share
        flops += 2 * expert_active * n_tokens * (1 / sf.moe_flops_scale - 1)
    comp_s = flops / (tp * dev.tflops * 1e12 * sf.flops_efficiency)
    # Smooth roofline: the larger term dominates, both count near the ridge.
    gpu_s = (mem_s**3 + comp_s**3) ** (1 / 3)
    if tp > 1:
        msg = n_tokens * arch.hidden * 2
        per = sf.allreduce_latency_us * 1e-6 + 2 * (tp - 1) / tp * msg / (dev.link_gbs * 1e9)
        gpu_s += 2 * layers * per
    # Kernel latencies a CUDA graph still pays, per layer and whatever the token count: what makes verifying
    # k+1 tokens nearly free at small batch; MoE layers add routing, permutation and expert dispatch.
    gpu_s += layers * (sf.layer_latency_us + (sf.moe_layer_latency_us if arch.experts else 0.0)) * 1e-6
    if arch.experts:
        gpu_s += layers * n_tokens * sf.moe_token_latency_us * 1e-6
    host_s = (sf.forward_overhead_ms + sf.layer_overhead_ms * layers) * 1e-3
    return max(gpu_s, host_s) * 1e3


@dataclass(frozen=True)
class StepCost:
    baseline_ms: float
    verify_ms: float
    draft_ms: float
    overhead_ms: float

    @property
    def spec_ms(self) -> float:
        return self.verify_ms + self.draft_ms + self.overhead_ms


# DFlash drafters (vLLM's qwen3_dflash.py, SGLang's DFlash model): decoder layers at the target's width that attend
# over the target's hidden states captured at as many target layers (an fc fuses them), drafting a block through
# the target's LM head in one forward. z-lab's b16 drafters (e.g. Qwen3-8B-DFlash-b16) have 5 layers. DSpark drafters
# are the same backbone (5 layers in DeepSeek's Qwen3 ones) plus a low-rank sequential head, costed as DFlash.
DFLASH_LAYERS = 5
# Block drafters: decoder layers at the target's width that draft a whole block in one forward (DFlash; DSpark adds a
# small sequential head over the block).


def dflash_arch(target: Arch, layers: int = DFLASH_LAYERS) -> Arch:
    """A DFlash drafter of ``layers`` decoder layers for ``target`` (its weights, fusion fc and the LM head it runs)."""
    h = target.hidden
    p = (layers * 12 * h**2 + layers * h * h + target.vocab * h) / 1e9
    return Arch(p, p, layers, h, target.vocab, target.kv_bytes_per_token / max(target.layers, 1) * layers)


def draft_arch(method: str, target: Arch, drafter: Arch | None) -> Arch | None:
    """The network the drafter runs per draft pass (None for copy-based methods)."""
    if method == "draft_model":
        return drafter
    if method in BLOCK_METHODS:
        return drafter or dflash_arch(target)
    if method in ("eagle", "eagle3"):
        # One decoder layer at the target's width plus an LM head (EAGLE-3 drafts over a 32k vocabulary).
        vocab = min(target.vocab, 32000) if method == "eagle3" else target.vocab
        layer = 12 * target.hidden**2
        p = (layer + 2 * target.hidden**2 + vocab * target.hidden) / 1e9
        return Arch(p, p, 1, target.hidden, vocab, target.kv_bytes_per_token / max(target.layers, 1))
    if method == "mtp":
        per_layer_total = (target.params_b - target.vocab * target.hidden * 2e-9) / max(target.layers, 1)
        per_layer_active = (target.active_params_b - target.vocab * target.hidden * 2e-9) / max(target.layers, 1)
        head = target.vocab * target.hidden * 1e-9
        return Arch(
            per_layer_total + head,
            per_layer_active + head,
            1,
            target.hidden,
            target.vocab,
            target.kv_bytes_per_token / max(target.layers, 1),
            target.experts,
            target.experts_per_token,
            target.weight_bytes,  # MTP layers ship in the checkpoint's own format
        )
    if method in ("medusa", "mlp_speculator"):
        # A residual block plus an LM head per head/stage; one stage runs per pass.
        p = (target.hidden**2 + target.vocab * target.hidden) / 1e9
        return Arch(p, p, 1, target.hidden, target.vocab, 0.0)
    return None


def step_cost(
    policy: Policy,
    prior: MethodPrior,
    method: str,
    shape: Shape,
    target: Arch,
    drafter: Arch | None,
    dev: Device,
    sf: StackFactors,
    tp: int,
    batch: int,
    ctx: float,
    draft_tp: int | None = None,
    share: float = 1.0,
    parallel: bool = False,
) -> StepCost:
    """``share``: the fraction of steps (or of a batch's sequences) that draft; the rest verify one token.
    ``parallel``: a draft model the stack runs once per step over all k positions (PARD's parallel drafting)."""
    base = forward_ms(target, dev, sf, tp, batch, batch, ctx) + sf.step_overhead_ms
    if shape.k <= 0 or method == "none":
        return StepCost(base, base, 0.0, 0.0)
    n_verify = batch * shape.verify_tokens
    if method == "lookahead":
        # Jacobi lookahead branch (window 7 x level 5) and guess verification ride along in the same pass.
        n_verify = batch * (1 + 2 * 7 * 4)
    verify = forward_ms(target, dev, sf, tp, n_verify, batch, ctx) + sf.step_overhead_ms
    # Steps without a match cost a plain step; a batch mixing both costs in proportion to its tokens.
    verify = base + share * (verify - base)
    d = draft_arch(method, target, drafter)
    draft = 0.0
    if d is not None and prior.draft_forwards != "none":
        dtp = draft_tp or (tp if method != "draft_model" else 1)
        if prior.draft_forwards == "one" or parallel:
            passes, width = 1, shape.depth
        else:
            passes, width = shape.depth, max(1, round(shape.width))
        # A separate draft model caches the whole context; heads attend over the target's features (1 layer).
        for _ in range(passes):
            draft += forward_ms(d, dev, sf, dtp, batch * width, batch, ctx) + sf.draft_pass_overhead_ms
        if method == "draft_model" and not parallel:
            # The drafter also reads in the accepted tokens before drafting again (a parallel drafter reads them in
            # the same forward that proposes its k mask positions).
            draft += forward_ms(d, dev, sf, dtp, batch * 2, batch, ctx) * 0.5
    tokens = 1 + share * (shape.verify_tokens - 1)
    overhead = sf.spec_overhead_ms + sf.spec_overhead_per_seq_ms * batch + sf.spec_overhead_per_token_ms * batch * tokens
    if shape.is_tree:
        overhead += sf.tree_token_overhead_ms * batch * shape.verify_tokens
    return StepCost(base, verify, draft, overhead)


@dataclass(frozen=True)
class Outcome:
    shape: Shape
    alphas: tuple[float, ...]
    acceptance_length: float
    speedup: float
    cost: StepCost


def evaluate(
    policy: Policy,
    method: str,
    shape: Shape,
    alpha: float,
    target: Arch,
    drafter: Arch | None,
    dev: Device,
    sf: StackFactors,
    tp: int,
    batch: int,
    ctx: float,
    rates: tuple[float, ...] | None = None,
    parallel: bool = False,
) -> Outcome:
    """Speedup of one shape. ``rates``: measured acceptance per draft position (a traffic replay), which
    replaces the prior's alpha * decay^i chain where given; ``parallel``: see :func:`step_cost`."""
    prior = policy.prior(method)
    share = prior.drafted_share(rates[0] if rates else alpha) if shape.depth else 1.0
    if rates:
        # Measured rates past the first position are already conditional on a match.
        alphas = [rates[min(i, len(rates) - 1)] * (prior.decay ** max(0, i - len(rates) + 1)) for i in range(shape.depth)]
    elif share <= 0.0:
        alphas = [0.0] * shape.depth  # the proposer never matches: no step drafts
    else:
        # A copy method drafts on a share of steps only: its drafts accept alpha / share once it matched, and the
        # first position's unconditional rate is share times that.
        tree = policy.acceptance.tree
        alphas = position_alphas(alpha / share, prior.decay, shape.depth, tree.gain, shape.topk if shape.steps else 1,
                                 shape.verify_tokens - 1, tree.confidence)
        if alphas:
            alphas[0] *= share
    tau = acceptance_length(alphas)
    cost = step_cost(policy, prior, method, shape, target, drafter, dev, sf, tp, batch, ctx, share=share, parallel=parallel)
    return Outcome(shape, tuple(alphas), tau, tau * cost.baseline_ms / cost.spec_ms, cost)


def shapes_for(policy: Policy, method: str, trees: bool) -> list[Shape]:
    """Shapes worth trying: chains k in k_range; for tree stacks also (steps, topk, tokens) grids."""
    prior = policy.prior(method)
    lo, hi = policy.rules.k_range
    hi = min(hi, prior.max_k)
    out = [Shape(k) for k in range(lo, max(lo, hi) + 1)]
    if trees and prior.tree:
        for steps in range(2, max(lo, hi) + 1):
            for topk in (2, 4, 8):
                for tokens in (8, 16, 32, 64):
                    if steps < tokens <= steps * topk + 1:
                        out.append(Shape(steps, steps, topk, tokens))
    return out


def ranked(
    policy: Policy,
    method: str,
    alpha: float,
    target: Arch,
    drafter: Arch | None,
    dev: Device,
    sf: StackFactors,
    tp: int,
    batch: int,
    ctx: float,
    shapes: list[Shape],
    rates: tuple[float, ...] | None = None,
    parallel: bool = False,
) -> list[Outcome]:
    """Every shape's outcome, fastest first; a shape within 0.05% of a faster one keeps its place only if it came
    first in ``shapes`` (ties go to the smaller, earlier shape, so choices are stable)."""
    outs = [evaluate(policy, method, s, alpha, target, drafter, dev, sf, tp, batch, ctx, rates, parallel) for s in shapes]
    order: list[Outcome] = []
    for o in outs:
        at = next((i for i, x in enumerate(order) if o.speedup > x.speedup * 1.0005), len(order))
        order.insert(at, o)
    return order


def best(
    policy: Policy,
    method: str,
    alpha: float,
    target: Arch,
    drafter: Arch | None,
    dev: Device,
    sf: StackFactors,
    tp: int,
    batch: int,
    ctx: float,
    shapes: list[Shape],
    rates: tuple[float, ...] | None = None,
    parallel: bool = False,
) -> Outcome:
    top: Outcome | None = None
    for s in shapes:
        o = evaluate(policy, method, s, alpha, target, drafter, dev, sf, tp, batch, ctx, rates, parallel)
        # Strictly better only: ties keep the smaller (earlier) shape, so choices are stable.
        if top is None or o.speedup > top.speedup * 1.0005:
            top = o
    assert top is not None
    return top
