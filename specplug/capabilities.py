"""What the chosen serving stack can do, resolved once per plan and handed to the policy as plain data.

Data only: the policy never asks an adapter. specplug.stackcaps reads a :class:`StackCapabilities` off the
adapter (methods it offers at the version planned for, whether it switches k per batch size, where the version
came from, what it does with a draft model of another vocabulary) and the planner receives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specplug.argv import last_of, sets
from specplug.compat import MIXED_PREFILL, CompatRow, Finding, Flags, findings

# Control names shared by adapters' control tables and the planner (which reads them from ``controls``).
BLOCK_VERIFICATION = "block_verification"  # speculation.verification: block
PROBABILISTIC_DRAFTING = "probabilistic_drafting"  # speculation.draft_sampling: probabilistic
FLY_VERIFICATION = "fly_verification"  # speculation.verification: fly (lossy)
ACCEPTANCE_GATE = "acceptance_gate"  # speculation.acceptance_floor: speculation off for good under it
# The gate averages the acceptance rate over speculating steps only, so a schedule's smaller or zero k is no trip.
ACCEPTANCE_RATE_GATE = "acceptance_rate_gate"


@dataclass(frozen=True)
class StackCapabilities:
    name: str
    version: str | None  # the version planned for
    version_source: str  # 'flag', 'pinned', 'installed' or 'unknown'
    methods: dict[str, str | None] = field(default_factory=dict)  # canonical method -> None (offered) or why not
    schedules: bool = False  # switches k per running batch size for every method (else see schedule_methods)
    trees: bool = False  # drafts token trees
    running_cap: int | None = None  # running requests the stack allows by default when speculating
    max_batch: int | None = None  # requests decoded together by default
    # Where the default depends on the GPU: (least GiB, name fragments excluded, requests), first match wins.
    max_batch_rules: tuple[tuple[float, tuple[str, ...], int], ...] = ()
    cost_profile: str = "stack_default"  # the policy's stack row it is costed with when it has none of its own
    # Drafter formats (catalog ``format``) whose k draft tokens the stack proposes in one forward at this version
    # (PARD's parallel drafting): costed as one forward of k tokens instead of k forwards.
    parallel_drafting: frozenset[str] = frozenset()
    # Methods whose k the stack switches per running batch size (SGLang: the EAGLE family, through adaptive steps).
    schedule_methods: frozenset[str] = frozenset()
    # What the stack does with a separate draft model of another vocabulary (the end of a mismatch message; empty:
    # nothing to add), and the largest vocab-size difference it takes for one tokenizer (None: any).
    vocab_mismatch: str = ""
    vocab_slack: int | None = None
    # Controls the stack renders at this version (the adapter's control table and its schedule/cutoff/trees).
    controls: frozenset[str] = frozenset()
    # How a separate draft model is sharded: "own" (a draft TP of 1 or the target's), "target" (the target's) or None.
    draft_tp: str | None = None
    reserves_full_context: bool = False  # the KV cache must hold one request of max_model_len at start
    runs_on_cpu: bool = False  # serves on the host's CPU when the machine has no GPU
    # The stack's compatibility rows (specplug.compat): what breaks speculation with which feature, per version.
    compat: tuple[CompatRow, ...] = ()
    # feature -> the stack's spellings of the serve.extra_args flag that turns it on (its table's ``flags``).
    compat_flags: Flags = ()
    # How it drafts with a draft model of another vocabulary at this version when the render asks it to (token-level
    # intersection, greedy draft sampling only; None: it cannot). From the adapter's vocab_bridge.
    vocab_bridge: str | None = None
    # Places a model that one GPU cannot hold layer by layer across its GPUs (transformers' device_map="auto", which
    # the research code of EAGLE, Medusa and Spec-Bench loads with): the GPUs run one after another, so a forward pass
    # costs one GPU's time over all the weights, with no all-reduce, instead of a tensor-parallel share.
    layer_split: bool = False
    # Runs a joining request's prefill inside the running batch's decode step at this version (its adapter's
    # prefill_mixing); else a prefill is a pass of its own that the running requests wait for.
    mixes_prefill: bool = False
    # serve.extra_args that turn that off: (flag, value), None for a flag alone (its adapter's prefill_unmixing).
    prefill_unmixing: tuple[tuple[str, str | None], ...] = ()
    # Flags alone that turn it back on (its adapter's prefill_remixing).
    prefill_remixing: tuple[str, ...] = ()

    def mixes_prefill_with(self, extra_args: Sequence[str]) -> bool:
        """Whether a deployment with ``extra_args`` mixes prefills into decode steps: the stack's default, turned on
        by its mixed-chunk flag (compat_flags) or a prefill_remixing flag, off by one of ``prefill_unmixing``. Of
        flags alone, the last one counts (the stacks' parsers read them in order); a valued one counts by its last
        value."""
        ons = (*dict(self.compat_flags).get(MIXED_PREFILL, ()), *self.prefill_remixing)
        offs = tuple(flag for flag, value in self.prefill_unmixing if value is None)
        last = last_of(extra_args, *ons, *offs)
        on = self.mixes_prefill if last is None else last in ons
        return on and not any(sets(extra_args, flag, value) for flag, value in self.prefill_unmixing
                              if value is not None)

    def max_batch_on(self, gpu: str, memory_gib: float) -> int | None:
        """Requests decoded together by default on ``gpu`` of ``memory_gib`` GiB (None: as many as memory holds)."""
        for least, excluded, requests in self.max_batch_rules:
            if memory_gib >= least and not any(x in gpu.lower() for x in excluded):
                return requests
        return self.max_batch

    def costed_as(self, rows: Iterable[str]) -> str:
        """The policy row that costs this stack: its own, else the one its adapter declares."""
        return self.name if self.name in rows else self.cost_profile

    def schedules_for(self, method: str) -> bool:
        """Whether a schedule (its k=0 ranges included) takes effect for ``method``; else it is advisory."""
        return self.schedules or method in self.schedule_methods

    def compat_findings(self, method: str, on: Iterable[str], model: str | None = None) -> list[Finding]:
        """The compatibility rows that apply to ``method`` with the features ``on`` at the version planned for."""
        return findings(self.compat, self.version, method, on, model)

    def why_not(self, method: str) -> str | None:
        return self.methods.get(method, f"{self.name} does not offer {method}")


# Research code (Hugging Face transformers / PyTorch, eager, batch 1): a pseudo-stack that only ``estimate``
# knows, for comparing with published papers' figures; it runs every method, with the papers' trees.
RESEARCH_CODE = "hf"


def research_code() -> StackCapabilities:
    """The research-code pseudo-stack (:data:`RESEARCH_CODE`): no adapter stands behind it."""
    from specplug.methods import SPECULATING

    return StackCapabilities(
        RESEARCH_CODE, None, "unknown", {m: None for m in SPECULATING}, trees=True, max_batch=1,
        cost_profile=RESEARCH_CODE, layer_split=True,
        parallel_drafting=frozenset({"pard"}),  # the PARD paper's own code drafts in parallel
        vocab_mismatch="transformers needs tokenizer= and assistant_tokenizer= (universal assisted generation) when "
        "vocabularies differ",
    )
