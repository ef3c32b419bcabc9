"""The Plan: the one canonical decision that flows from the policy engine to adapters, locks and benches.

Everything upstream (config, probe, catalogs, policy) produces a Plan; everything downstream (render, launch,
lock, check, bench comparisons) consumes it. No stack-specific spelling appears here: adapters translate.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specplug.config import (
    LOSSY_VERIFICATION,
    AcceptanceFloor,
    AllowLossy,
    DraftSampling,
    Method,
    ScheduleEntry,
    ServeOptions,
    StackName,
    TreeSpec,
    Verification,
    WorkloadSpec,
)
from specplug.probe import Hardware
from specplug.safetext import OneLine

PLAN_VERSION = 1


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRef(PlanModel):
    name: OneLine = Field(description="What the user called it (alias, HF id or folder).")
    hf_id: OneLine = Field(description="Hugging Face id, or the absolute folder for local models.")
    local_path: OneLine | None = None
    # Absent unless named: plans, locks and render digests made before revisions were served stay identical.
    revision: OneLine | None = Field(
        None, exclude_if=lambda v: v is None, description="The Hub commit the model was read at, where it was named at a revision ('org/name@v1'): "
        "the render serves that revision, not the default branch.")
    weight_format: str = Field("bf16", description="The checkpoint's own weight format (bf16, fp8, mxfp4, int4-awq ...).")

    @property
    def ref(self) -> str:
        """How to name the model to read it again as planned: its folder, or its Hub id at the plan's revision."""
        return self.local_path or (f"{self.hf_id}@{self.revision}" if self.revision else self.hf_id)


class StackRef(PlanModel):
    name: StackName
    version: OneLine | None = Field(None, description="Version rendered for (installed, pinned or --stack-version).")
    version_source: str = Field("unknown", description="'installed', 'pinned', 'flag' or 'unknown'.")


class Parallelism(PlanModel):
    """How the target is split over GPUs: the Plan's one source for it (serve: in specplug.yaml only asks)."""

    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    num_nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1)


class Speculation(PlanModel):
    """The chosen technique in canonical (stack-neutral) terms."""

    method: Method = "none"
    drafter: OneLine | None = Field(None, description="HF id or local folder of the draft model / head.")
    num_speculative_tokens: int = Field(0, ge=0, le=64, description="Draft length k (0 when method is none).")
    tree: TreeSpec | None = Field(None, description="Tree shape for stacks that draft trees (SGLang, TRT-LLM).")
    prompt_lookup_min: int | None = Field(None, ge=1)
    prompt_lookup_max: int | None = Field(None, ge=1)
    schedule: list[ScheduleEntry] = Field(
        default_factory=list, description="k per range of running batch sizes; k=0 turns speculation off there."
    )
    draft_tensor_parallel_size: int | None = Field(None, ge=1)
    acceptance_floor: AcceptanceFloor = None
    draft_sampling: DraftSampling = None
    verification: Verification = None
    allow_lossy: AllowLossy = False

    @property
    def enabled(self) -> bool:
        return self.method != "none" and self.num_speculative_tokens > 0

    @property
    def lossy(self) -> bool:
        """Whether the verifier may change the output (so every speedup shown with it says 'lossy')."""
        return self.enabled and self.verification in LOSSY_VERIFICATION


class MemoryBudget(PlanModel):
    """Per-GPU memory, in GB."""

    gpu_memory_gb: float
    target_weights_gb: float
    drafter_weights_gb: float = 0.0
    kv_cache_gb: float = 0.0
    drafter_kv_cache_gb: float = 0.0
    activations_gb: float = 0.0
    headroom_gb: float = 0.0
    fits: bool = True
    hint: str | None = None


class CurvePoint(PlanModel):
    batch_size: int
    speedup: float
    acceptance_length: float
    num_speculative_tokens: int


class Prediction(PlanModel):
    speedup: float = Field(1.0, description="Predicted decode throughput ratio vs no speculation at this batch.")
    batch_size: int | None = Field(
        None, description="The running batch the prediction is for: the configured concurrency, or what the request "
        "rate keeps running, within capacity."
    )
    acceptance_length: float = Field(1.0, description="Mean tokens per verification step, bonus token included.")
    acceptance_rate: float | None = Field(None, description="Per-token acceptance alpha.")
    curve: list[CurvePoint] = Field(default_factory=list)
    breakeven_acceptance_rate: float | None = Field(
        None,
        description="Acceptance rate (accepted / drafted tokens) under which the plan's drafts lose at its batch size "
        "(None: not speculating, or a tree or copy method, where drafted tokens per step vary).",
    )
    breakeven_batch_size: int | None = Field(
        None, description="Largest batch size the schedule still speculates at, where the predicted gain reaches the "
        "policy's min_speedup (None: across the whole curve; 0: not even at batch 1)."
    )


class ArmLoad(PlanModel):
    """One arm (no speculation, or the plan's) at the workload's request rate."""

    running_batch: float = Field(description="Requests decoding at once in the steady state.")
    tpot_ms_p50: float = Field(description="Median time per output token (ms).")
    tpot_ms_p90: float = Field(description="90th-percentile time per output token (ms).")
    ttft_ms_p50: float | None = Field(description="Median time to first token (ms); None: saturated, requests queue without bound.")
    ttft_ms_p90: float | None = Field(description="90th-percentile time to first token (ms); None when saturated.")
    output_tokens_per_s: float = Field(description="Output tokens per second served (capped at saturation).")
    saturated: bool = Field(description="The rate is at or above what the arm sustains: requests queue.")


class RateByArm(PlanModel):
    baseline: float
    speculative: float


class LoadSweepPoint(PlanModel):
    """Both arms at one request rate of the sweep a plot draws (None: the arm is saturated there)."""

    request_rate: float
    baseline_tpot_ms_p50: float | None
    speculative_tpot_ms_p50: float | None
    baseline_ttft_ms_p50: float | None
    speculative_ttft_ms_p50: float | None
    baseline_output_tokens_per_s: float
    speculative_output_tokens_per_s: float


class LoadPrediction(PlanModel):
    """The deployment under open-loop load: both arms at the workload's request rate (a continuous-batching model
    over the cost model's step times; see 'basis')."""

    request_rate: float = Field(description="Requests per second (Poisson arrivals).")
    capacity_requests: int = Field(description="Requests the plan's KV cache (with its drafter) holds at once.")
    baseline: ArmLoad
    speculative: ArmLoad
    crossover_request_rate: float | None = Field(
        description="Request rate above which speculation no longer lowers median TPOT (None: it does up to the "
        "baseline's saturation; 0: at no rate)."
    )
    saturation_request_rate: RateByArm = Field(description="Request rate at which each arm's running batch fills its capacity.")
    max_request_rate_within_slo: RateByArm | None = Field(
        None, description="Highest rate each arm sustains within workload.slo_tpot_ms / slo_ttft_ms (p90); None without targets."
    )
    sweep: list[LoadSweepPoint] = Field(
        default_factory=list, description="Both arms from a trickle to past the later saturation (what --plot draws)."
    )
    basis: str = Field(description="What the figures rest on.")


class Candidate(PlanModel):
    method: Method
    drafter: str | None = None
    num_speculative_tokens: int = 0
    speedup: float | None = None
    acceptance_length: float | None = None
    ruled_out: str | None = Field(None, description="Why it was not eligible; None if it was scored.")
    chosen: bool = False


class ShapeAlternative(PlanModel):
    """A speculation shape the plan weighed for its technique at its batch size, fastest first."""

    num_speculative_tokens: int = Field(ge=0, description="Draft length k (a tree's depth).")
    tree: TreeSpec | None = Field(None, description="The tree (steps x topk, draft tokens verified); None for a chain.")
    speedup: float = Field(description="Predicted decode throughput ratio vs no speculation at the plan's batch size.")
    acceptance_length: float = Field(description="Predicted mean tokens per verification step, bonus token included.")
    basis: OneLine = Field(description="What the prediction rests on: the acceptance's source and the shape model's data.")
    chosen: bool = False
    within_error: bool = Field(
        False, description="Predicted within the model's own error of the chosen shape: the data cannot tell them apart "
        "(measure both, e.g. with specplug tune)."
    )


class Plan(PlanModel):
    plan_version: int = PLAN_VERSION
    model: ModelRef
    hardware: Hardware
    stack: StackRef
    workload: WorkloadSpec
    parallelism: Parallelism = Field(default_factory=Parallelism)
    speculation: Speculation = Field(default_factory=Speculation)
    serve: ServeOptions = Field(default_factory=ServeOptions)
    memory: MemoryBudget | None = None
    prediction: Prediction = Field(default_factory=Prediction)
    candidates: list[Candidate] = Field(default_factory=list)
    alternatives: list[ShapeAlternative] = Field(
        default_factory=list, description="The best shapes (k, tree) for the chosen technique, the chosen one among them."
    )
    reasons: list[str] = Field(default_factory=list, description="Why this choice, in plain sentences.")
    warnings: list[str] = Field(default_factory=list)
    capacity_requests: int | None = Field(
        None, description="Requests the KV cache holds at once at the workload's lengths, with the plan's drafter, "
        "within the stack's request cap: a larger batch queues."
    )
    capacity_requests_without_drafter: int | None = Field(
        None, description="The same without speculation: the drafter's price in requests."
    )
    load: LoadPrediction | None = Field(None, description="Both arms at workload.request_rate (set with --request-rate).")
    traffic: dict | None = Field(
        None, description="The traffic file planned from (workload.traffic / --traffic): its path, digest and measured figures."
    )
