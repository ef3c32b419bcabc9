"""What an adapter is: the protocol every stack's adapter implements, what it returns (a launch spec, an
image), the problems it reports, and the defaults a stack states only where it differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from specplug.capabilities import (
    ACCEPTANCE_GATE,
    BLOCK_VERIFICATION,
    FLY_VERIFICATION,
    PROBABILISTIC_DRAFTING,
)
from specplug.errors import StackError
from specplug.stacks.metrics import StackMetrics

if TYPE_CHECKING:
    from specplug.plan import Plan


class LaunchSpec(BaseModel):
    """Everything needed to start a server: argv (never a shell string), environment, files to write."""

    stack: str
    stack_version: str | None = None
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="Non-secret variables to set.")
    env_passthrough: list[str] = Field(
        default_factory=list, description="Secret variables read from the caller's environment at launch."
    )
    env_from: dict[str, str] = Field(
        default_factory=dict,
        description="Variable the stack reads -> caller's variable it is copied from at launch (API keys): a "
        "reference, never the value.",
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Relative path -> content, written first; an argv element equal to a key means that file.",
    )
    health_url: str | None = None
    metrics_url: str | None = None
    base_url: str | None = None
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class StackImage:
    """The container image a stack is deployed from (``specplug deploy``); each adapter declares its own."""

    repository: str
    tag: str  # format string over {version}; stack versions are pinned in specplug.yaml for reproducibility
    cache_path: str  # where the stack keeps downloaded weights; a volume is mounted here
    cache_env: tuple[str, ...] = ("HF_HOME",)  # variables that point the stack at cache_path
    executable: tuple[tuple[str, str], ...] = ()  # argv[0] as the adapter writes it -> its path in the image
    needs_gpu: bool = True
    version_prefix: str = ""  # dropped from the plan's version before it fills the tag ('b4600' -> '4600')
    # No published image: compose builds this Dockerfile instead (a format string over {version} and {workdir},
    # the folder deploy mounts the rendered files in).
    dockerfile: str | None = None

    def reference(self, version: str) -> str:
        return f"{self.repository}:{self.tag.format(version=version.removeprefix(self.version_prefix))}"


# -- how a stack reports acceptance: data that specplug.bench.metrics reads, one reader per shape of report


# The policy's cost factors for a stack with no row of its own ('stack_default' in 'specplug policy show').
DEFAULT_COST_PROFILE = "stack_default"
# What a stack does with a separate draft model whose vocabulary differs from the target's, as messages say it.
DEFAULT_VOCAB_MISMATCH = "the stack needs the draft and target models to share token ids"
# Seconds from start to healthy that ``specplug tune`` budgets before it has measured a launch of the stack.
DEFAULT_LAUNCH_PRIOR_S = 180.0
# control_table entries for speculation fields that change how drafts are proposed or verified; the base adapter
# refuses such a value wherever the stack's table has no window for it.
SET = "*"  # in SPEC_CONTROLS: the field set to any value
# field, value -> (control, what a stack without it does instead)
SPEC_CONTROLS: dict[tuple[str, str], tuple[str, str]] = {
    ("acceptance_floor", SET): (ACCEPTANCE_GATE, "has no acceptance gate that turns speculation off"),
    ("verification", "block"): (BLOCK_VERIFICATION, "verifies drafts token by token only"),
    ("draft_sampling", "probabilistic"): (PROBABILISTIC_DRAFTING, "scores drafts as the drafter's argmax only"),
    ("verification", "fly"): (FLY_VERIFICATION, "has no FLy verifier"),
}


@runtime_checkable
class Adapter(Protocol):
    name: str  # canonical stack name: vllm, sglang, ...
    display_name: str
    install_hint: str  # the command that installs the stack

    def installed_version(self) -> str | None:
        """The version installed here, or None (must be cheap and never import the stack itself)."""

    def methods(self, version: str | None) -> dict[str, str | None]:
        """Canonical methods -> None if supported at ``version``, else the reason it is not."""

    def render(self, plan: Plan) -> LaunchSpec:
        """The launch spec for ``plan``; StackError when the plan asks what this stack/version can't do."""

    def render_valid(self, plan: Plan) -> LaunchSpec:
        """The launch spec for a plan :func:`specplug.validate.validate_plan` passed (render, without checking it
        again)."""

    def problems(self, plan: Plan, version: str | None) -> list[Problem]:
        """Every reason render would refuse ``plan`` at ``version``, without rendering (specplug.validate)."""

    def known_version(self, version: str | None) -> None:
        """StackError when this adapter cannot render for ``version``."""

    def supports_schedule(self, version: str | None) -> bool:
        """Whether the stack switches the draft length per running batch size."""

    def schedule_cutoff(self, version: str | None) -> bool:
        """Whether, lacking a schedule, it can stop speculating above a running-batch threshold (a schedule's k=0 top)."""

    def parallel_draft_formats(self, version: str | None) -> frozenset[str]:
        """Drafter checkpoint formats (catalog ``format``) whose k draft tokens come from ONE forward at ``version``."""

    def mixes_prefill(self, version: str | None) -> bool:
        """Whether its default scheduler runs a joining request's prefill inside the running batch's decode step."""

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        """Methods whose draft length the stack switches per running batch size at ``version`` (all offered ones
        when ``supports_schedule``; some only, e.g. SGLang's adaptive steps for the EAGLE family)."""

    def runs_without_gpu(self, version: str | None) -> bool:
        """Whether this build serves on a CPU."""

    def accepts_mismatched_vocab(self, version: str | None) -> bool:
        """Whether a separate draft model may have another vocabulary than the target."""

    def vocab_bridge(self, version: str | None) -> str | None:
        """How the stack drafts with a separate draft model of another vocabulary at ``version`` when told to (a
        sentence for the plan; None: it cannot). A bridge drafts over the token-level intersection of the two
        vocabularies, which is lossless with greedy draft sampling only (speculation.draft_sampling unset or
        greedy); the adapter renders it when the plan's drafter needs it."""

    def template_name(self, version: str | None, ext: str | None = None) -> str | None:
        """The template that wraps a rendered file of kind ``ext`` (None: the generic one)."""

    def launch_argv(self, argv: list[str]) -> list[str]:
        """The argv to start here (a chance to point a generic program at the stack's own)."""

    def fallback_plan(self, plan: Plan, reason: str) -> Plan:
        """``plan`` as this stack runs it when it stands in for one that cannot start (``reason``)."""

    def node_scripts(self, argv: list[str], nodes: int, gpus_per_node: int, leader: str, rank: str) -> tuple[str, str]:
        """(leader, worker) shell scripts serving ``argv`` across nodes, for a stack with ``multi_node``."""

    image: StackImage | None  # what ``specplug deploy`` runs (None: the user names one)
    multi_node: str | None  # how the stack spans nodes, named in messages (None: one node only)
    trees: bool  # drafts token trees
    spec_running_cap: int | None  # running requests allowed by default when speculating
    max_batch: int | None  # requests decoded together by default
    max_batch_rules: tuple[tuple[float, tuple[str, ...], int], ...]  # GPU-dependent defaults (StackCapabilities)
    shards_heads: bool  # tensor parallelism splits attention heads
    reserves_full_context: bool  # refuses to start unless its KV cache holds one request of max_model_len
    runs_on_cpu: bool  # serves on the host's CPU when the machine has no GPU
    fallback_only: bool  # never the default stack
    draft_tp: str | None  # how a separate draft model is sharded: "own", "target" or None
    metrics: StackMetrics  # where its /metrics (or responses) show acceptance
    cost_profile: str  # the policy's stack row it is costed with when the policy has none under its name
    vocab_mismatch: str  # what it does with a separate draft model of another vocabulary (said in messages)
    vocab_slack: int | None  # largest draft/target vocab-size difference it takes for one tokenizer (None: any)
    launch_prior_s: float  # seconds from start to healthy, before tune has measured a launch
    fixed_k_args: tuple[str, ...]  # serve arguments that make it draft exactly the configured k every step


# Every member above has a named default in BaseAdapter: a plugin subclasses it and states its differences.


@dataclass(frozen=True)
class Problem:
    """One reason a plan cannot be served as asked: what is wrong, what would work, and the key it is about."""

    message: str
    hint: str | None = None
    key: str | None = None  # the specplug.yaml key to change (speculation.drafter, serve.quantization ...)
    # A known-broken combination from the stack's compatibility table: 'launch --force' may start it anyway.
    overridable: bool = False

    def text(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


def raise_problems(problems: list[Problem]) -> None:
    """StackError carrying every problem (one a line) when there are any."""
    if not problems:
        return
    if len(problems) == 1:
        raise StackError(problems[0].message, problems[0].hint)
    lines = [f"- {p.message}" + (f" Fix: {p.hint}" if p.hint else "") for p in problems]
    raise StackError(f"The plan has {len(problems)} problems:\n" + "\n".join(lines))
