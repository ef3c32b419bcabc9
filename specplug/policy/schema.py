"""The policy: acceptance priors, stack cost factors and rules, as validated data.

The shipped policy is ``policies/default.yaml`` (hand-set rules and physics) with ``policies/fitted.yaml``
(written by ``scripts/fit_policy.py`` from published results) merged on top; users merge their own file
(``--policy FILE`` or ``policy:`` in specplug.yaml) last. Every merge is deep (mappings merge key by key,
anything else replaces) and the result is validated here, so a typo in an override is an error, not a no-op.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specplug.config import WORKLOADS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MethodPrior(_Strict):
    """Acceptance of one technique: alpha of the first draft position per workload at temperature 0."""

    kind: str = Field(description="'model' (a learned or two-model drafter) or 'copy' (n-gram/suffix/lookahead).")
    alpha: dict[str, float] = Field(description="Workload -> first-position acceptance at temperature 0.")
    decay: float = Field(1.0, gt=0.0, le=1.0, description="Acceptance at position i is alpha * decay^(i-1).")
    temperature_slope: float = Field(
        0.0, le=0.5, description="Change of logit(alpha) per unit of temperature (up to 1.0); negative lowers it."
    )
    tree: bool = Field(False, description="Drafts trees in stacks that support them (topk > 1).")
    default_k: int = Field(4, ge=1, le=64)
    max_k: int = Field(8, ge=1, le=64)
    draft_forwards: str = Field(
        "per_token",
        description="Drafter passes per step: 'per_token' (one per draft token), 'one' (all heads at once), 'none'.",
    )
    prior_from: str | None = Field(
        None,
        description="A method with no published result of its own: every field not given here is that method's "
        "(after merging), and plans say whose prior they use.",
    )
    match_accept: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="Copy methods that draft only on a match: acceptance of the first token when one is found. A "
        "step drafts with probability alpha / match_accept; the others verify just their own token.",
    )

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: dict[str, float]) -> dict[str, float]:
        for w, a in v.items():
            if w not in WORKLOADS:
                raise ValueError(f"unknown workload '{w}' (known: {', '.join(WORKLOADS)})")
            if not 0.0 < a < 1.0:
                raise ValueError(f"alpha for '{w}' must be between 0 and 1, got {a}")
        if "chat" not in v:
            raise ValueError("alpha needs at least a 'chat' entry (the fallback for other workloads)")
        return v

    def alpha_for(self, workload: str) -> float:
        return self.alpha.get(workload, self.alpha["chat"])

    def drafted_share(self, alpha: float) -> float:
        """Share of steps that draft at all: 1, except for copy methods that propose only on a match."""
        return min(1.0, alpha / self.match_accept) if self.match_accept else 1.0


class DraftModelPrior(_Strict):
    """Two-model drafting: acceptance grows with the drafter's size relative to the target."""

    size_slope: float = Field(0.25, ge=0.0, le=2.0, description="d logit(alpha) / d ln(draft params / target params).")
    reference_ratio: float = Field(0.1, gt=0.0, description="Size ratio at which the table's alpha applies.")
    params_slope: float = Field(
        0.0, ge=0.0, le=2.0, description="d logit(alpha) / d ln(draft params): a bigger drafter predicts any target better."
    )
    reference_params_b: float = Field(1.0, gt=0.0, description="Drafter size (billions) at which params_slope adds nothing.")
    same_family_bonus: float = Field(0.0, description="Logit bonus when drafter and target are of one family.")


class TreePrior(_Strict):
    """Tree drafting: a drafter's top j guesses catch the target's token with 1 - (1 - alpha) * j^-gain; the tree keeps
    the nodes the drafter scores highest, its top guess scoring ``confidence`` times its acceptance (perf.tree_reach)."""

    gain: float = Field(0.45, ge=0.0, le=1.5)
    confidence: float = Field(
        1.0, gt=0.0, le=1.0,
        description="The drafter's own probability of its top guess over that guess's greedy acceptance: below 1 the "
        "tree builder favours siblings over depth.",
    )


class AcceptancePriors(_Strict):
    methods: dict[str, MethodPrior]
    draft_model: DraftModelPrior = Field(default_factory=DraftModelPrior)
    tree: TreePrior = Field(default_factory=TreePrior)
    max_alpha: float = Field(0.97, gt=0.0, lt=1.0)
    cross_target_logit: float = Field(
        0.5,
        ge=0.0,
        description="Logit taken off a head's acceptance where it was trained on a sibling checkpoint (another "
        "post-training of the same architecture and tokenizer) rather than the target it is used with.",
    )

    @model_validator(mode="before")
    @classmethod
    def _borrowed_priors(cls, data: Any) -> Any:
        """Fill each ``prior_from`` method from the method it names, so a borrowed prior follows that method's fit."""
        methods = data.get("methods") if isinstance(data, dict) else None
        if not isinstance(methods, dict):
            return data
        out = dict(methods)
        for name, row in methods.items():
            source = row.get("prior_from") if isinstance(row, dict) else None
            if source is None:
                continue
            base = methods.get(source)
            if not isinstance(base, dict) or base.get("prior_from") is not None:
                raise ValueError(f"methods.{name}.prior_from: '{source}' is not a method with a prior of its own "
                                 f"(known: {', '.join(m for m, r in methods.items() if isinstance(r, dict) and not r.get('prior_from'))})")
            out[name] = {**base, **row}
        return {**data, "methods": out}


class StackFactors(_Strict):
    """How fast a serving stack runs the model: launch-bound host overhead and achieved bandwidth/FLOPs."""

    label: str = ""
    bw_efficiency: float = Field(0.8, gt=0.0, le=1.0, description="Share of peak memory bandwidth achieved.")
    flops_efficiency: float = Field(0.6, gt=0.0, le=1.0, description="Share of peak dense FLOPs achieved.")
    layer_overhead_ms: float = Field(0.0, ge=0.0, description="Host (kernel launch) time per layer per forward.")
    forward_overhead_ms: float = Field(0.0, ge=0.0, description="Fixed host time per forward pass.")
    step_overhead_ms: float = Field(0.5, ge=0.0, description="Scheduler/sampling time per decoding step.")
    spec_overhead_ms: float = Field(0.5, ge=0.0, description="Extra time per step when speculating.")
    spec_overhead_per_token_ms: float = Field(
        0.0, ge=0.0, description="Extra time per verified token across the batch (rejection sampling, proposer bookkeeping)."
    )
    moe_flops_scale: float = Field(
        1.0, gt=0.0, le=1.0, description="Share of the dense FLOP rate that routed-expert matrix products reach."
    )
    moe_draft_locality: float = Field(
        0.0, ge=0.0, le=1.0, description="Share of a sequence's extra verified tokens routed to experts it already uses."
    )
    draft_pass_overhead_ms: float = Field(
        0.0, ge=0.0, description="Host and pipeline time per drafter pass (input preparation, sampling, launch)."
    )
    spec_overhead_per_seq_ms: float = Field(
        0.0, ge=0.0, description="Extra time per running request per step when speculating (proposer, sampler metadata)."
    )
    tree_token_overhead_ms: float = Field(
        0.0, ge=0.0, description="Extra time per verified token across the batch when the draft is a tree (topk > 1): "
        "tree attention masks and the kernels a stack uses for them instead of its chain path's."
    )
    allreduce_latency_us: float = Field(10.0, ge=0.0, description="Latency of one tensor-parallel all-reduce.")
    layer_latency_us: float = Field(
        0.0, ge=0.0, description="GPU time per layer per forward that does not scale with tokens (kernel latencies)."
    )
    moe_layer_latency_us: float = Field(
        0.0, ge=0.0, description="Extra fixed time per MoE layer (routing, token permutation, expert dispatch)."
    )
    moe_token_latency_us: float = Field(
        0.0,
        ge=0.0,
        description="Extra time per token per MoE layer (dispatch, permutation, combine and their communication): "
        "what makes verifying draft tokens cost more as the batch grows.",
    )


class MemoryRules(_Strict):
    gpu_memory_utilization: float = Field(0.9, gt=0.1, le=1.0, description="Share of GPU memory the stack may use.")
    activation_gb: float = Field(1.5, ge=0.0, description="Activations, CUDA graphs and workspace per GPU.")
    activation_frac: float = Field(0.03, ge=0.0, le=0.5, description="Plus this share of GPU memory.")
    min_context: int = Field(
        16384, ge=0,
        description="With the GPU count left open and a stack that reserves max_model_len at start, the count chosen "
        "holds one request this long (the model's whole context when shorter); the plan serves what fits.",
    )


class KnownIssue(_Strict):
    """A drafter that is known not to work in a stack (optionally until a fixed version): ruled out there."""

    drafter: str = Field(description="The drafter's HF id (case-insensitive).")
    stack: str
    fixed_in: str | None = Field(None, description="First stack version without the problem (None: still open).")
    reason: str

    def applies(self, drafter: str | None, stack: str, version: str | None) -> bool:
        if not drafter or drafter.lower() != self.drafter.lower() or stack != self.stack:
            return False
        return self.fixed_in is None or version is None or _vtuple(version) < _vtuple(self.fixed_in)


def _vtuple(v: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


class Rules(_Strict):
    min_speedup: float = Field(1.05, ge=1.0, description="Speculate only where the predicted speedup beats this.")
    k_range: tuple[int, int] = (1, 8)
    batch_curve: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256])
    high_temperature: float = Field(0.7, ge=0.0)
    shape_error: float = Field(
        0.05, ge=0.0, description="|ln| of the speedup ratio of two shapes (k, trees) under which the model cannot order "
        "them: its median error on that ratio in published shape sweeps (benchmarks/shape_ranking.py)."
    )
    gpu_counts: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    tp_max: int = Field(8, ge=1, description="Largest tensor-parallel group (one node).")
    nvlink_gbs: float = Field(300.0, gt=0.0, description="All-reduce bandwidth per GPU over NVLink/xGMI.")
    pcie_gbs: float = Field(20.0, gt=0.0, description="All-reduce bandwidth per GPU over PCIe.")
    internode_gbs: float = Field(40.0, gt=0.0, description="Bandwidth per GPU between nodes (pipeline stages).")
    memory: MemoryRules = Field(default_factory=MemoryRules)
    unknown_drafter_params_b: float = Field(
        0.5, gt=0.0, description="Size assumed for a draft model that is not in the catalog."
    )
    workload_aliases: dict[str, str] = Field(default_factory=dict)
    known_issues: list[KnownIssue] = Field(
        default_factory=list, description="Drafter x stack pairs known to fail; candidates using them are ruled out."
    )

    def known_issue(self, drafter: str | None, stack: str, version: str | None = None) -> KnownIssue | None:
        return next((k for k in self.known_issues if k.applies(drafter, stack, version)), None)

    @model_validator(mode="after")
    def _check(self) -> Rules:
        lo, hi = self.k_range
        if not 1 <= lo <= hi <= 64:
            raise ValueError("k_range must be [lo, hi] with 1 <= lo <= hi <= 64")
        return self


class Policy(_Strict):
    version: int = 1
    acceptance: AcceptancePriors
    stacks: dict[str, StackFactors]
    stack_default: StackFactors = Field(
        default_factory=StackFactors, description="Cost factors for a stack without its own row (third-party adapters)."
    )
    rules: Rules = Field(default_factory=Rules)
    sources: dict[str, Any] = Field(default_factory=dict, description="Where the fitted numbers came from.")

    def stack(self, name: str) -> StackFactors:
        """The stack's cost factors; a stack the policy has no row for (a plugin) gets the named default."""
        return self.stacks.get(name) or self.stack_default

    def prior(self, method: str) -> MethodPrior:
        from specplug.errors import SpecplugError

        if method not in self.acceptance.methods:
            raise SpecplugError(
                f"The policy has no acceptance prior for method '{method}'.",
                f"Known: {', '.join(self.acceptance.methods)}.",
            )
        return self.acceptance.methods[method]
