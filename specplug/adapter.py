"""The adapter protocol and registry: one plugin per serving stack, found through entry points.

An adapter turns a :class:`~specplug.plan.Plan` into a :class:`LaunchSpec` (argv, environment, files) for
one stack at one version. Adapters register under the entry-point group ``specplug.adapters``; a
third-party package adds a stack by shipping a module and an entry point. A plugin that fails to load is
reported by ``specplug stacks``, never fatal. An adapter may also declare ``image`` (a :class:`StackImage`): the
container ``specplug deploy`` runs it in; without one, deploy asks the user to name an image.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from specplug.capabilities import (
    ACCEPTANCE_GATE,
    BLOCK_VERIFICATION,
    FLY_VERIFICATION,
    PROBABILISTIC_DRAFTING,
)
from specplug.compat import EMPTY, CompatTable, parse_table
from specplug.errors import StackError
from specplug.versions import version_key  # re-exported: adapters import it from here

if TYPE_CHECKING:
    from specplug.plan import Plan

ENTRY_POINT_GROUP = "specplug.adapters"
# When nothing is installed, recommend and render for the most widely deployed stack.
DEFAULT_STACK = "vllm"
# Preference order among installed stacks for the default.
STACK_PREFERENCE = ("vllm", "sglang", "trtllm", "llamacpp", "tgi", "embedded")


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


@dataclass(frozen=True)
class Counters:
    """Counters that only grow: drafts, draft tokens, accepted tokens and accepted tokens per draft position."""

    source: str  # how a bench report names these figures
    drafts: str | None
    draft_tokens: str
    accepted: str
    per_position: str | None = None
    position_label: str = "position"
    without_drafts: str = "no draft count"  # said when the draft counter is absent (no acceptance length then)


def spec_decode_counters(prefix: str, source: str, **kw: str) -> Counters:
    """vLLM's speculative-decoding counter names under ``prefix`` (llama-server publishes the same set as llamacpp:)."""
    return Counters(
        source=source,
        drafts=f"{prefix}:spec_decode_num_drafts_total",
        draft_tokens=f"{prefix}:spec_decode_num_draft_tokens_total",
        accepted=f"{prefix}:spec_decode_num_accepted_tokens_total",
        per_position=f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total",
        **kw,
    )


@dataclass(frozen=True)
class Gauges:
    """Gauges holding the latest batch's acceptance: sampled while a run goes on, then averaged."""

    source: str
    length: str | None = None  # mean tokens per verification step
    rate: str | None = None  # accepted per drafted token


@dataclass(frozen=True)
class SkippedTokens:
    """Sums of two histograms: tokens speculation let a request skip, and tokens generated."""

    source: str
    skipped: str
    generated: str


@dataclass(frozen=True)
class IterationStats:
    """``/metrics`` answers JSON: a list of iteration records, each with a block of speculative-decoding stats."""

    source: str
    blocks: tuple[str, ...]  # the block's key, in the spellings the stack has used
    draft_tokens: str
    accepted: str
    requests: str  # requests that drafted in the iteration
    length: str  # the iteration's mean acceptance length


@dataclass(frozen=True)
class ResponseTimings:
    """Fields of a per-response acceptance block (llama.cpp's ``timings``): tokens drafted and accepted, summed
    over a run; ``block`` is where the block sits in a response (or its last streamed chunk)."""

    source: str
    drafted: str
    accepted: str
    block: tuple[str, ...] = ("timings",)


AcceptanceReader = Counters | Gauges | SkippedTokens | IterationStats


@dataclass(frozen=True)
class StackMetrics:
    """Where a stack shows speculative-decoding acceptance, for ``specplug bench`` and ``calibrate``.

    ``markers`` are metric-name prefixes that together identify the stack's ``/metrics`` (a stack speaking
    another's names adds one of its own, and the most specific match wins).
    """

    markers: tuple[str, ...] = ()
    acceptance: AcceptanceReader | None = None
    timings: ResponseTimings | None = None


# The default: the stack shows no acceptance specplug can read, so bench reports speed alone.
NO_METRICS = StackMetrics()
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

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        """Methods whose draft length the stack switches per running batch size at ``version`` (all offered ones
        when ``supports_schedule``; some only, e.g. SGLang's adaptive steps for the EAGLE family)."""

    def runs_without_gpu(self, version: str | None) -> bool:
        """Whether this build serves on a CPU."""

    def accepts_mismatched_vocab(self, version: str | None) -> bool:
        """Whether a separate draft model may have another vocabulary than the target."""

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


class BrokenPlugin(BaseModel):
    name: str
    target: str
    error: str


@cache
def _load() -> tuple[dict[str, Adapter], tuple[BrokenPlugin, ...]]:
    from importlib.metadata import entry_points

    found: dict[str, Adapter] = {}
    broken: list[BrokenPlugin] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if not isinstance(obj, Adapter):
                raise TypeError("does not implement the Adapter protocol (subclass specplug.adapter.BaseAdapter)")
            found.setdefault(ep.name, obj)
        except Exception as exc:  # a broken third-party plugin must not take specplug down
            broken.append(BrokenPlugin(name=ep.name, target=ep.value, error=f"{type(exc).__name__}: {exc}"))
    return found, tuple(broken)


def adapters() -> dict[str, Adapter]:
    return dict(_load()[0])


def broken_plugins() -> list[BrokenPlugin]:
    return list(_load()[1])


# The stacks that ship with specplug load directly: scanning every installed distribution's entry points
# costs start-up time and is only needed to find third-party stacks (and for 'specplug stacks').
BUILTIN = {name: f"specplug.adapters.{name}" for name in STACK_PREFERENCE}


@cache
def _builtin(name: str) -> Adapter | None:
    import importlib

    try:
        obj = importlib.import_module(BUILTIN[name]).adapter
    except Exception:
        return None  # the entry-point scan below reports why
    return obj if isinstance(obj, Adapter) else None


def _stacks_with(control: str) -> str:
    """The stacks whose adapters render ``control`` at some version, for a message."""
    names = []
    for name in stack_names():
        try:
            a = get_adapter(name)
        except StackError:
            continue
        if control in getattr(a, "control_table", {}):
            names.append(a.display_name)
    return " or ".join(names) or "another stack"


def stack_names() -> tuple[str, ...]:
    """Every registered stack: the built-in ones in preference order, then installed plugins."""
    return (*STACK_PREFERENCE, *sorted(n for n in adapters() if n not in BUILTIN))


def is_stack(name: str) -> bool:
    """Whether ``name`` is a registered stack (built-ins answer without scanning entry points)."""
    return name in BUILTIN or name in adapters()


def get_adapter(name: str) -> Adapter:
    if name in BUILTIN and (builtin := _builtin(name)) is not None:
        return builtin
    found = adapters()
    if name not in found:
        broken = {b.name: b for b in broken_plugins()}
        if name in broken:
            raise StackError(f"The '{name}' adapter failed to load: {broken[name].error}.", "Reinstall specplug or that plugin.")
        raise StackError(f"Unknown stack '{name}'.", f"Known stacks: {', '.join(sorted(found))}.")
    return found[name]


def default_stack() -> str:
    """The best installed stack, else vLLM."""
    for name in STACK_PREFERENCE:
        a = _builtin(name)
        if a is not None and not a.fallback_only and not _legacy(a) and a.installed_version():
            return name
    return DEFAULT_STACK


def _legacy(adapter: Adapter) -> str | None:
    """What a stack no longer maintained says about itself (its compatibility table's ``legacy``), else None."""
    table = getattr(adapter, "compatibility", None)
    return table().legacy if callable(table) else None


@cache
def load_compat(filename: str) -> CompatTable:
    """A built-in compatibility table, ``adapters/data/<filename>`` (package data of specplug.adapters)."""
    from importlib import resources

    text = resources.files("specplug.adapters").joinpath(f"data/{filename}").read_text(encoding="utf-8")
    return parse_table(text, filename)


# ---------------------------------------------------------------------------------------------- versions


def version_at_least(version: str | None, floor: str) -> bool:
    return version is not None and version_key(version) >= version_key(floor)


def pick_floor(version: str | None, floors: list[str]) -> str:
    """The highest floor not above ``version`` (None: the newest floor). StackError if below all floors."""
    ordered = sorted(floors, key=version_key)
    if version is None:
        return ordered[-1]
    eligible = [f for f in ordered if version_key(f) <= version_key(version)]
    if not eligible:
        raise StackError(
            f"Version {version} is older than any this adapter knows (oldest: {ordered[0]}).",
            f"Upgrade the stack, or render for a known version with --stack-version {ordered[0]} or newer.",
        )
    return eligible[-1]


def version_in(version: str | None, since: str | None, until: str | None) -> bool:
    """``since <= version < until`` (open ends allowed); an unknown version counts as the newest."""
    if version is None:
        return until is None
    if since is not None and version_key(version) < version_key(since):
        return False
    return not (until is not None and version_key(version) >= version_key(until))


# ---------------------------------------------------------------------------------------------- support data


@dataclass(frozen=True)
class Window:
    """One version range where a stack spells a canonical method one way.

    ``value`` is the stack's own name for it (e.g. vLLM's ``"mtp"``, SGLang's ``"NGRAM"``); ``until`` is the
    first version without this spelling; ``source`` says where the boundary comes from.
    """

    value: str
    since: str | None = None
    until: str | None = None
    source: str = ""


def spelling(table: dict[str, tuple[Window, ...]], key: str, version: str | None) -> Window | None:
    """The window of ``table[key]`` that covers ``version`` (None: not available at that version)."""
    for w in table.get(key, ()):
        if version_in(version, w.since, w.until):
            return w
    return None


def describe_windows(windows: tuple[Window, ...]) -> str:
    parts = []
    for w in windows:
        lo = w.since or "the oldest known release"
        parts.append(f"{lo} to before {w.until}" if w.until else f"{lo} and newer")
    return ", ".join(parts) if parts else "no version"


# ---------------------------------------------------------------------------------------------- base adapter


class BaseAdapter:
    """Shared behaviour for the built-in adapters: version lookup, method support from a table, checks.

    A subclass sets the class attributes and implements :meth:`build` (plan -> LaunchSpec for a version). The
    method table maps each canonical method to the stack's spelling per version range; a method absent from
    the table is unsupported, with the reason in ``unsupported``.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    install_hint: ClassVar[str]
    distributions: ClassVar[tuple[str, ...]] = ()  # pip distributions whose version is the stack's version
    executables: ClassVar[tuple[str, ...]] = ()  # programs that start the server, looked up on PATH
    method_table: ClassVar[dict[str, tuple[Window, ...]]] = {}
    # Stack-specific controls specplug renders (name -> the stack's spelling per version range), listed by
    # 'specplug stacks' beside the schedule/cutoff/tree capabilities every adapter declares; the base adapter checks
    # the SPEC_CONTROLS ones for every stack.
    control_table: ClassVar[dict[str, tuple[Window, ...]]] = {}
    unsupported: ClassVar[dict[str, str]] = {}  # method -> why this stack can never do it
    oldest: ClassVar[str]  # oldest version this adapter renders for
    template_ext: ClassVar[str] = "sh"
    image: ClassVar[StackImage | None] = None  # what ``specplug deploy`` runs; None: the user names one
    trees: ClassVar[bool] = False  # drafts token trees (steps x topk, num_draft_tokens) for the methods that can
    spec_running_cap: ClassVar[int | None] = None  # running requests the stack allows by default when speculating
    max_batch: ClassVar[int | None] = None  # requests decoded together by default (None: as many as memory holds)
    # Where that default depends on the GPU: (least GiB, name fragments excluded, requests), first match wins.
    max_batch_rules: ClassVar[tuple[tuple[float, tuple[str, ...], int], ...]] = ()
    shards_heads: ClassVar[bool] = False  # tensor parallelism splits attention heads (so it must divide them)
    # Refuses to start unless the KV cache left beside the weights holds one request of max_model_len (unset: the
    # model's own maximum), instead of capping requests at what fits.
    reserves_full_context: ClassVar[bool] = False
    runs_on_cpu: ClassVar[bool] = False  # serves on the host's CPU when the machine has no GPU
    fallback_only: ClassVar[bool] = False  # never chosen as the default stack, only named (or as launch's fallback)
    # How a separate draft model is sharded: "own" (speculation.draft_tensor_parallel_size, unset = the target's),
    # "target" (always the target's size), None (not sharded, or no draft models).
    draft_tp: ClassVar[str | None] = None
    metrics: ClassVar[StackMetrics] = NO_METRICS  # where /metrics (or responses) show acceptance; see StackMetrics
    # The policy's stack row that costs it when the policy has none under its name (a vLLM fork: "vllm").
    cost_profile: ClassVar[str] = DEFAULT_COST_PROFILE
    # Drafter checkpoint formats (catalog ``format``, e.g. "pard") the stack drafts all k tokens of in ONE forward,
    # per version range: the cost model charges such a drafter one forward of k tokens instead of k forwards.
    parallel_drafting: ClassVar[dict[str, tuple[Window, ...]]] = {}
    # What the stack does with a separate draft model whose vocabulary differs (the end of a mismatch message), and
    # the largest vocab-size difference it takes between a draft and a target of one tokenizer (padded embeddings;
    # None: any). The validator and the policy read both through specplug.capabilities.
    vocab_mismatch: ClassVar[str] = DEFAULT_VOCAB_MISMATCH
    vocab_slack: ClassVar[int | None] = None
    launch_prior_s: ClassVar[float] = DEFAULT_LAUNCH_PRIOR_S  # tune's start-to-healthy prior, until it measures one
    # Serve arguments that make the stack draft exactly the configured k every step (tune measures step cost per
    # k); a stack that never changes k on its own needs none.
    fixed_k_args: ClassVar[tuple[str, ...]] = ()
    # Its compatibility table (specplug.compat): what breaks speculation with LoRA, structured output ... per
    # release, and the defaults it changed. A built-in names its file in adapters/data; a plugin overrides
    # compatibility() to read its own.
    compat_file: ClassVar[str | None] = None

    def compatibility(self) -> CompatTable:
        return load_compat(self.compat_file) if self.compat_file else EMPTY

    # -- versions --------------------------------------------------------------------------------------
    def installed_version(self) -> str | None:
        return distribution_version(self.distributions, self.executables)

    def runs_without_gpu(self, version: str | None) -> bool:
        """True when the installed build serves on a CPU (a CPU build of the stack, or a CPU-first stack)."""
        return False

    def known_version(self, version: str | None) -> None:
        pick_floor(version, [self.oldest])

    # How the stack spans several nodes (named in messages); None: it serves from one node.
    multi_node: ClassVar[str | None] = None

    def node_scripts(self, argv: list[str], nodes: int, gpus_per_node: int, leader: str, rank: str) -> tuple[str, str]:
        """(leader, worker) shell scripts that serve ``argv`` across ``nodes`` nodes, for a stack with ``multi_node``.

        ``leader`` and ``rank`` are shell expressions for the leader's address and this node's index.
        """
        raise StackError(f"{self.display_name} serves from one node.", "Pick GPUs with more memory so one node fits.")

    def supports_schedule(self, version: str | None) -> bool:
        """Whether the stack can switch draft length per running batch size (vLLM's per-batch schedule)."""
        return False

    def schedule_cutoff(self, version: str | None) -> bool:
        """Whether the stack, without a schedule, renders a schedule's k=0 top as an on/off threshold (TensorRT-LLM's
        max_concurrency): k stays fixed below it."""
        return False

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        """Methods whose draft length switches per running batch size at ``version``: every offered method where the
        stack's schedule is method-blind (``supports_schedule``), none otherwise; adapters override for a subset."""
        return frozenset(self.supported_methods(version)) if self.supports_schedule(version) else frozenset()

    def parallel_draft_formats(self, version: str | None) -> frozenset[str]:
        """Drafter formats drafted all k tokens at once at ``version`` (read from ``parallel_drafting``)."""
        return frozenset(f for f in self.parallel_drafting if spelling(self.parallel_drafting, f, version) is not None)

    # -- methods ---------------------------------------------------------------------------------------
    def methods(self, version: str | None) -> dict[str, str | None]:
        from specplug.config import METHODS

        out: dict[str, str | None] = {}
        for m in METHODS:
            if m == "none":
                continue
            out[m] = self.method_reason(m, version)
        return out

    def method_reason(self, method: str, version: str | None) -> str | None:
        """None when ``method`` works at ``version``, else why not (with the versions that have it)."""
        if method == "none":
            return None
        if method in self.unsupported:
            return self.unsupported[method]
        windows = self.method_table.get(method)
        if not windows:
            return f"{self.display_name} has no '{method}' speculation."
        if spelling(self.method_table, method, version) is None:
            return f"'{method}' needs {self.display_name} {describe_windows(windows)} (rendering for {version or 'the newest known'})."
        return None

    def controls(self, version: str | None) -> dict[str, str | None]:
        """Controls specplug renders for this stack -> None when available at ``version``, else why not."""
        out: dict[str, str | None] = {
            "schedule": None if self.supports_schedule(version) or self.schedule_methods(version)
            else "no per-batch-size draft length",
            "cutoff": None if self.schedule_cutoff(version) or self.supports_schedule(version)
            else "no batch-size threshold that stops speculation",
            "trees": None if self.trees else "drafts chains only",
        }
        for name, windows in self.control_table.items():
            out[name] = None if spelling(self.control_table, name, version) else f"needs {describe_windows(windows)}"
        return out

    def versions(self) -> list[str]:
        """The releases where what this adapter renders changes (window boundaries), oldest first."""
        found = {self.oldest}
        for table in (self.method_table, self.control_table):
            for windows in table.values():
                found.update(v for w in windows for v in (w.since, w.until) if v)
        return sorted((v for v in found if version_key(v) >= version_key(self.oldest)), key=version_key)

    def supported_methods(self, version: str | None) -> list[str]:
        return [m for m, why in self.methods(version).items() if why is None]

    def method_problems(self, method: str, version: str | None) -> list[Problem]:
        if method == "none":
            return []
        why = self.method_reason(method, version)
        if why is None:
            return []
        ok = self.supported_methods(version)
        return [
            Problem(
                f"{self.display_name} {version or '(newest)'} cannot run '{method}': {why}",
                f"Supported there: {', '.join(ok) if ok else 'none'}. Pick one with --method, or another stack.",
                key="speculation.method",
            )
        ]

    def require_method(self, method: str, version: str | None) -> Window | None:
        """The stack spelling for ``method`` at ``version``; StackError listing what works when unsupported."""
        if method == "none":
            return None
        why = self.method_reason(method, version)
        if why is not None:
            ok = self.supported_methods(version)
            raise StackError(
                f"{self.display_name} {version or '(newest)'} cannot run '{method}': {why}",
                f"Supported there: {', '.join(ok) if ok else 'none'}. Pick one with --method, or another stack.",
            )
        return spelling(self.method_table, method, version)

    # -- rendering -------------------------------------------------------------------------------------
    def render(self, plan: Plan) -> LaunchSpec:
        version = plan.stack.version
        self.known_version(version)
        # The same checks specplug.validate reports: build() may then assume a plan it can serve.
        raise_problems(self.problems(plan, version))
        spec = self.build(plan, version)
        spec.stack = self.name
        spec.stack_version = version
        return spec

    def problems(self, plan: Plan, version: str | None) -> list[Problem]:
        """Every reason :meth:`render` would refuse ``plan`` at ``version`` (empty: it renders).

        The base checks what every built-in stack needs (a known version, the method, the canonical fields);
        an adapter adds its own in :meth:`stack_problems`."""
        from specplug.adapters._common import canon_problems

        try:
            self.known_version(version)
        except StackError as exc:
            return [Problem(exc.message, exc.hint, key="stack.version")]
        method = self.method_problems(plan.speculation.method, version)
        if method:
            return method  # the stack's own checks assume a method it runs
        out = canon_problems(plan, self.display_name)
        for (name, value), (control, instead) in SPEC_CONTROLS.items():
            given = getattr(plan.speculation, name)
            if (given is None if value == SET else given != value) or spelling(self.control_table, control, version):
                continue
            ws = self.control_table.get(control)
            out.append(Problem(
                f"{self.display_name} {version or '(newest)'} {instead}"
                + (f" ({name}: {given} needs {describe_windows(ws)})." if ws else f" (no {name}: {given})."),
                f"Leave speculation.{name} unset"
                + (", or render for a version that has it." if ws else f", or use {_stacks_with(control)}."),
                key=f"speculation.{name}",
            ))
        try:
            out += self.stack_problems(plan, version)
        except StackError as exc:  # a stack check that needs the canonical fields sane: they are reported above
            if not out:
                out.append(Problem(exc.message, exc.hint))
        return out

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        """This stack's own reasons to refuse ``plan`` (default: none)."""
        return []

    def accepts_mismatched_vocab(self, version: str | None) -> bool:
        """Whether a separate draft model may have another vocabulary than the target (default: no)."""
        return False

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:  # pragma: no cover - abstract
        raise NotImplementedError

    def template_name(self, version: str | None, ext: str | None = None) -> str | None:
        """``<stack>/<floor>.<ext>.j2`` for the highest template floor not above ``version`` (None: no
        template of that kind for this stack)."""
        from specplug.templating import list_templates

        suffix = f".{ext or self.template_ext}.j2"
        floors = {}
        for n in list_templates(f"{self.name}/"):
            base = n.rsplit("/", 1)[-1]
            if base.endswith(suffix):
                floors[base[: -len(suffix)]] = n
        if not floors:
            return None
        return floors[pick_floor(version, list(floors))]

    def launch_argv(self, argv: list[str]) -> list[str]:
        """The argv to start here: a chance to point a generic program (``python3``) at the stack's own."""
        return argv

    def fallback_plan(self, plan: Plan, reason: str) -> Plan:
        """``plan`` as this stack runs it when it stands in for one that cannot start (default: unchanged)."""
        return plan


# ---------------------------------------------------------------------------------------------- lookups


def _site_packages(executable: str) -> list[Path]:
    """site-packages of the virtual environment (or prefix) an executable on PATH belongs to."""
    prefix = Path(executable).parent.parent  # no resolve(): venv bin/ entries are often symlinks out
    return sorted(prefix.glob("lib/python3*/site-packages")) + sorted(prefix.glob("lib64/python3*/site-packages"))


def distribution_version(names: tuple[str, ...], executables: tuple[str, ...] = ()) -> str | None:
    """Installed version of the first of ``names``: in this environment, else in the environment of one of
    ``executables`` found on PATH (a stack kept in its own venv). Reads metadata only, never imports."""
    from importlib import metadata

    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    for exe in executables:
        path = shutil.which(exe)
        if not path:
            continue
        sps = [str(p) for p in _site_packages(path)]
        if not sps:
            continue
        for n in names:
            for dist in metadata.distributions(path=sps):
                if _norm(dist.metadata.get("Name") or "") == _norm(n):
                    return dist.version
    return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def program_output(argv: list[str], timeout: float = 20.0) -> str | None:
    """stdout+stderr of a short-lived program (``--version``/``--help``), or None when it cannot run."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout or "") + (proc.stderr or "")
