"""What breaks speculation on each stack and version: the compatibility table, as data, and how a plan is read
against it.

Each built-in adapter ships one file, ``adapters/data/compat_<stack>.yaml``; every row there names the features it
is about (all of them on at once), the methods, a version window, a status (works / partial / broken), its source
(an issue, PR, doc page or source file that was read) and a one-line note. The file's ``defaults`` list the
speculative defaults a stack changed between releases, with the value specplug's plans assume (so renders state
it explicitly instead of inheriting whatever the installed build defaults to). Its ``flags`` map a feature to that
stack's own spellings of the flag that turns it on in ``serve.extra_args``: a stack that declares no flag for a
feature never has it read off its arguments.

How a row's window reads (``from``, ``to``, ``fixed_in``, any of them may be unknown):

- ``from``: the first release known to be affected (unset: every release before the others);
- ``to``: the last release confirmed affected (unset: no release is known to be past it);
- ``fixed_in``: the first release known to carry the fix (unset: none known).

A version in ``[from, to]`` (or in ``[from, fixed_in)`` when ``to`` is unset) gets the row's status; a version
after ``to`` and before ``fixed_in`` (or after ``to`` with no fix known) is *unconfirmed*: worth a warning, never
a refusal. Broken rows are refused by :mod:`specplug.validate` (every command) and ruled out by the planner;
partial and unconfirmed rows become warnings.

Data only: the policy reads rows through :class:`~specplug.capabilities.StackCapabilities`, never the adapters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specplug.argv import has_flag
from specplug.errors import SpecplugError

if TYPE_CHECKING:
    from specplug.catalog import Model
    from specplug.config import ServeOptions, WorkloadSpec

Status = Literal["works", "partial", "broken"]
# What a row can be about. The serve/workload ones come from specplug.yaml; the others from the plan itself.
FEATURES: dict[str, str] = {
    "lora": "LoRA adapters (serve.lora)",
    "structured_output": "structured output (serve.structured_output)",
    "reasoning_parser": "a reasoning parser (serve.reasoning_parser)",
    "prefix_caching": "prefix caching (serve.prefix_caching)",
    "multimodal": "multimodal input (workload.multimodal)",
    "pipeline_parallel": "pipeline parallelism (pipeline_parallel_size > 1)",
    "lm_format_enforcer": "structured output through lm-format-enforcer (serve.structured_output)",
    # Read off serve.extra_args through the flags the stack's own table declares (CompatTable.flags); a row's
    # about() names them.
    "async_scheduling": "async scheduling",
    "dp_attention": "DP attention",
    "mixed_chunked_prefill": "mixed chunked prefill",
    "eager_mode": "eager mode (no CUDA graphs)",
    # An EAGLE-3 head (catalog method or format eagle3) run as method 'eagle'.
    "eagle3_head_as_eagle": "an EAGLE-3 head launched as EAGLE",
    # A separate draft model whose vocabulary differs from the target's (specplug.validate's rule 1 decides it).
    "draft_vocab_mismatch": "a draft model with another vocabulary",
    "fp8_kv_cache": "an FP8 KV cache (serve.kv_cache_dtype fp8, fp8_e4m3 or fp8_e5m2)",
    # The target's own layers (its catalog row or config.json layer_types): see model_features.
    "hybrid_target": "a hybrid target (linear-attention or Mamba layers beside attention)",
    "sliding_window_target": "a target with sliding-window attention layers",
}
# The features specplug.yaml turns on (the others follow from the plan): what a fix can say to turn off.
CONFIG_FEATURES = ("lora", "structured_output", "reasoning_parser", "prefix_caching", "multimodal", "pipeline_parallel",
                   "lm_format_enforcer", "async_scheduling", "dp_attention", "mixed_chunked_prefill", "eager_mode",
                   "fp8_kv_cache")
# The features the target model brings (read from its facts, so only where a stack's table has a row about them).
MODEL_FEATURES = ("hybrid_target", "sliding_window_target")
# Layer kinds (specplug.catalog.archs) that keep a KV cache or no state at all; any other is a recurrent mixer.
_NOT_RECURRENT = ("full_attention", "sliding_attention", "none")
# The features specplug plans around but never renders (a render's note says so; the others are flags the user wrote
# or values specplug renders itself).
PLANNED_ONLY = ("lora", "structured_output", "reasoning_parser", "prefix_caching", "multimodal")
# The features only a stack's flag turns on (its table's ``flags`` spell them; specplug.yaml has no field for them).
# The flag feature that makes a stack mix joining prefills into decode steps where its default does not (the load
# model reads it as well as the table's rows).
MIXED_PREFILL = "mixed_chunked_prefill"
FLAG_FEATURES = ("async_scheduling", "dp_attention", MIXED_PREFILL, "eager_mode")
Flags = tuple[tuple[str, tuple[str, ...]], ...]  # feature -> the stack's spellings, as a hashable mapping
ALL_METHODS = "*"  # in a row's methods: every speculating method


class _Row(BaseModel):
    """One row as the YAML file states it (checked on load: a typo is an error, not a silent non-match)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    features: list[str] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    status: Status
    source: str = Field(min_length=1)
    note: str = Field(min_length=1)
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    fixed_in: str | None = None
    models: list[str] = Field(default_factory=list)  # fragments of the target's HF id (lower case); empty: any
    confirmed: bool = True  # false: the version bounds are inferred, not read in a source

    @field_validator("features")
    @classmethod
    def _known_features(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(FEATURES)}")
        return v

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        from specplug.methods import SPECULATING

        unknown = [m for m in v if m != ALL_METHODS and m not in SPECULATING]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}")
        return v


class _Default(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    assumed: float | int | str = Field(description="The value specplug's plans assume and renders state explicitly.")
    before: float | int | str | None = None  # the stack's default before changed_in
    after: float | int | str | None = None  # its default from changed_in
    changed_in: str | None = None
    since: str | None = None  # the first release where specplug renders the value
    source: str = Field(min_length=1)
    note: str = ""


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stack: str
    legacy: str | None = None  # a stack no longer maintained: what renders and `stacks` say about it
    # feature -> the stack's own spellings of the serve.extra_args flag that turns it on
    flags: dict[str, list[str]] = Field(default_factory=dict)
    rows: list[_Row] = Field(default_factory=list)
    defaults: list[_Default] = Field(default_factory=list)

    @field_validator("flags")
    @classmethod
    def _flag_spellings(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        unknown = [f for f in v if f not in FLAG_FEATURES]
        if unknown:
            raise ValueError(f"flags for unknown or config-only feature(s) {unknown}; flag features: "
                             f"{', '.join(FLAG_FEATURES)}")
        bad = [s for spellings in v.values() for s in spellings if not s.startswith("-") or "=" in s or " " in s]
        if bad or not all(v.values()):
            raise ValueError(f"a flag is spelled as the stack's parser takes it ('--name', no value): {bad or v}")
        return v

    @model_validator(mode="after")
    def _rows_have_their_flags(self) -> _Table:
        for r in self.rows:
            missing = [f for f in r.features if f in FLAG_FEATURES and f not in self.flags]
            if missing:
                raise ValueError(f"a row is about {missing}, which this table declares no flag for (add it to flags:)")
        return self


@dataclass(frozen=True)
class CompatRow:
    """One known combination of features and methods on a stack, with its version window and source."""

    stack: str
    features: tuple[str, ...]
    methods: tuple[str, ...]
    status: str
    source: str
    note: str
    since: str | None = None
    to: str | None = None
    fixed_in: str | None = None
    models: tuple[str, ...] = ()
    confirmed: bool = True
    flags: Flags = ()  # the table's spellings of this row's flag features (for messages)

    def covers(self, method: str, on: Iterable[str], model: str | None = None) -> bool:
        """Whether the row is about ``method`` with the features ``on`` (all of the row's present) and ``model``."""
        if ALL_METHODS not in self.methods and method not in self.methods:
            return False
        if not set(self.features) <= set(on):
            return False
        low = (model or "").lower()
        return not self.models or any(m in low for m in self.models)

    def verdict(self, version: str | None) -> str | None:
        """The row's status at ``version`` ('unconfirmed' between its last confirmed and first fixed release; None
        outside its window). An unknown version counts as the newest."""
        from specplug.versions import version_key

        if version is None:
            return self.status if self.to is None and self.fixed_in is None else "unconfirmed" if self.fixed_in is None else None
        v = version_key(version)
        if self.since is not None and v < version_key(self.since):
            return None
        if self.fixed_in is not None and v >= version_key(self.fixed_in):
            return None
        if self.to is not None and v > version_key(self.to):
            return "unconfirmed"
        return self.status

    def window(self) -> str:
        """The affected releases in words, for messages."""
        if self.to:
            span = (self.to if self.since == self.to else f"{self.since} to {self.to}" if self.since
                    else f"releases up to {self.to}")
        elif self.fixed_in:
            span = f"{self.since} up to {self.fixed_in}" if self.since else f"releases before {self.fixed_in}"
        else:
            span = f"{self.since} and newer" if self.since else "every release"
        if self.fixed_in:
            return f"{span} (fixed in {self.fixed_in})"
        return f"{span} (no fixed release known)"

    def describe(self, feature: str) -> str:
        """A feature in words; a flag feature with the stack's spelling of its flag."""
        spellings = dict(self.flags).get(feature)
        return f"{FEATURES[feature]} ({' or '.join(spellings)} in serve.extra_args)" if spellings else FEATURES[feature]

    def about(self) -> str:
        return " with ".join(self.describe(f) for f in self.features)


@dataclass(frozen=True)
class PinnedDefault:
    """A speculative default a stack changed between releases, and the value specplug renders explicitly."""

    name: str
    assumed: float | int | str
    source: str
    before: float | int | str | None = None
    after: float | int | str | None = None
    changed_in: str | None = None
    since: str | None = None
    note: str = ""


@dataclass(frozen=True)
class CompatTable:
    stack: str
    rows: tuple[CompatRow, ...] = ()
    defaults: tuple[PinnedDefault, ...] = ()
    legacy: str | None = None
    flags: Flags = ()  # feature -> this stack's spellings of the flag that turns it on

    def default(self, name: str) -> PinnedDefault | None:
        return next((d for d in self.defaults if d.name == name), None)


EMPTY = CompatTable("")


def parse_table(text: str, filename: str) -> CompatTable:
    """A compat_<stack>.yaml file's table; SpecplugError naming the file and row when it does not validate."""
    import yaml

    from specplug.fileio import load_yaml

    try:
        t = _Table.model_validate(load_yaml(text) or {})
    except (ValidationError, yaml.YAMLError) as exc:
        raise SpecplugError(f"{filename} is not a valid compatibility table: {exc}") from None
    flags: Flags = tuple((f, tuple(spellings)) for f, spellings in t.flags.items())
    rows = tuple(
        CompatRow(t.stack, tuple(r.features), tuple(r.methods), r.status, r.source, r.note, r.from_, r.to, r.fixed_in,
                  tuple(m.lower() for m in r.models), r.confirmed, tuple((f, s) for f, s in flags if f in r.features))
        for r in t.rows
    )
    defaults = tuple(PinnedDefault(**d.model_dump()) for d in t.defaults)
    return CompatTable(t.stack, rows, defaults, t.legacy, flags)


# ---------------------------------------------------------------------------------------------- reading a plan


def serve_features(serve: ServeOptions, workload: WorkloadSpec, pipeline_parallel_size: int,
                   flags: Flags = ()) -> frozenset[str]:
    """The features a deployment turns on, from its serve options, workload and pipeline split, and the flags of
    ``flags`` (the stack's table's, :attr:`CompatTable.flags`) found in serve.extra_args."""
    on = {
        "lora": bool(serve.lora and serve.lora.adapters),
        "structured_output": bool(serve.structured_output),
        "reasoning_parser": bool(serve.reasoning_parser),
        "prefix_caching": bool(serve.prefix_caching),
        "multimodal": workload.multimodal,
        "pipeline_parallel": pipeline_parallel_size > 1,
        "lm_format_enforcer": serve.structured_output == "lm-format-enforcer",
        "fp8_kv_cache": (serve.kv_cache_dtype or "").startswith("fp8"),
    }
    for f, spellings in flags:
        on[f] = on.get(f, False) or has_flag(serve.extra_args, *spellings)
    return frozenset(f for f, yes in on.items() if yes)


def model_features(model: Model | None) -> frozenset[str]:
    """Features the target's own layers bring (its catalog row or config.json): linear attention (Gated DeltaNet,
    lightning) or Mamba mixers beside attention make it a hybrid target; layers that attend to a sliding window
    only (``sliding_layers`` or layer_types) a sliding-window one."""
    if model is None:
        return frozenset()
    kinds = model.layer_kinds or {}
    on = {
        "hybrid_target": any(n and kind not in _NOT_RECURRENT for kind, n in kinds.items()),
        "sliding_window_target": bool(model.sliding_layers or kinds.get("sliding_attention")),
    }
    return frozenset(f for f, yes in on.items() if yes)


def needs_model(rows: Iterable[CompatRow]) -> bool:
    """Whether any of ``rows`` is about a feature read from the target's facts (else they need not be read)."""
    return any(f in MODEL_FEATURES for r in rows for f in r.features)


def drafter_features(method: str, drafter: str | None) -> frozenset[str]:
    """Features a method and drafter pair brings: an EAGLE-3 head (by the drafters catalog) run as 'eagle'."""
    if method != "eagle" or not drafter:
        return frozenset()
    from specplug.catalog.drafters import find_drafter

    d = find_drafter(drafter)
    return frozenset({"eagle3_head_as_eagle"}) if d is not None and "eagle3" in (d.method, d.format) else frozenset()


@dataclass(frozen=True)
class Finding:
    """A row that applies to a plan, with its verdict at the plan's version."""

    row: CompatRow
    verdict: str  # broken | partial | unconfirmed

    @property
    def refuses(self) -> bool:
        return self.verdict == "broken"

    def message(self, display: str, version: str | None, method: str) -> str:
        head = {"broken": "is known broken", "partial": "works only in part",
                "unconfirmed": "was reported broken (this release is not confirmed either way)"}[self.verdict]
        return (f"'{method}' {head} on {display} {version or '(newest)'} with {self.row.about()}: {self.row.note} "
                f"(source: {self.row.source}; affected: {self.row.window()}).")


def findings(rows: Iterable[CompatRow], version: str | None, method: str, on: Iterable[str],
             model: str | None = None) -> list[Finding]:
    """The rows (other than 'works') that apply to ``method`` with the features ``on`` at ``version``."""
    on = frozenset(on)
    out = []
    for r in rows:
        if r.status == "works" or not r.covers(method, on, model):
            continue
        verdict = r.verdict(version)
        if verdict is not None:
            out.append(Finding(r, verdict))
    return out


def blocked(rows: Iterable[CompatRow], version: str | None, method: str, on: Iterable[str],
            model: str | None = None) -> Finding | None:
    """The first broken row for ``method`` here, or None."""
    return next((f for f in findings(rows, version, method, on, model) if f.refuses), None)
