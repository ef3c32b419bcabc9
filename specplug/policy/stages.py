"""What the planning stages hand each other: the request, and one frozen result per stage
(specplug.policy.planner runs them in order)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specplug.catalog import Model
from specplug.config import Config, ServeSpec, SpeculationSpec, WorkloadSpec
from specplug.plan import (
    Candidate,
    LoadPrediction,
    MemoryBudget,
    Parallelism,
    Prediction,
    ShapeAlternative,
    Speculation,
)
from specplug.policy import engine as E
from specplug.policy.perf import Arch, Outcome
from specplug.policy.schema import Policy

if TYPE_CHECKING:
    from collections.abc import Callable

    from specplug.capabilities import StackCapabilities
    from specplug.catalog.drafters import Drafter
    from specplug.plan import Plan
    from specplug.probe import Hardware


@dataclass(frozen=True)
class Request:
    """What :func:`plan` was asked: the configuration as given (never rewritten), the hardware and the stack's
    capabilities as the caller resolved them, the policy, and the caller's inputs."""

    cfg: Config
    hardware: Hardware
    caps: StackCapabilities
    policy: Policy
    calibration: str | None
    # The stack's checks (the caller's: the policy never asks an adapter), run on every fix offered.
    validate: Callable[[Plan], None] | None
    # Drafters for the target found outside the catalog (specplug.catalog.discovery).
    found: tuple[Drafter, ...]
    fixing: bool
    # False scores a deployment that ran (a published row): no refusal for memory, no batch lowered to what fits.
    require_fit: bool = True
    # Requests the KV cache holds with each drafter: a cache of a pure function of the stages before the fit.
    capacities: dict[int, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Inputs:
    """The model, the policy (and which of its stack rows costs this stack), the calibration."""

    model: Model
    pol: Policy
    calib: Any
    costed_as: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Work:
    """The traffic, its lengths and the context the stack reserves; the served weight format and KV-cache bytes."""

    prof: Any
    wl: WorkloadSpec
    seqs: int
    tokens: int
    # One request of this many tokens must fit at start (a stack that reserves max_model_len); context_auto: it is
    # the model's own maximum, which the plan may lower to what fits instead of failing.
    context: int
    context_auto: bool
    # With context_auto: the context the GPU count and a drafter must leave room for (min_context).
    useful_context: int
    fmt: Any
    kvb: float
    target: Arch
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hard:
    """The GPUs, their split, and the weights as served on them (FP8 where nothing holds the checkpoint)."""

    hw: Any
    gpu: Any
    par: Parallelism
    fmt: Any
    target: Arch
    serve: ServeSpec
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Costed:
    """The cost model's view of this deployment."""

    device: E.Device
    c: E.Context


@dataclass(frozen=True)
class Fit:
    """The target fits with one request; how many run at once, and the batch the plan is scored at."""

    capacity: int
    seqs: int
    useful_context: int
    c: E.Context
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scores:
    """Every method ruled out with its reason or scored at the plan's batch, and the best."""

    explicit: SpeculationSpec | None
    cands: tuple[E.DraftChoice, ...]
    scored: tuple[tuple[E.DraftChoice, float, Outcome], ...]
    candidates: tuple[Candidate, ...]
    best: tuple[E.DraftChoice, float, Outcome] | None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The technique the plan runs (None: no speculation)."""

    chosen: tuple[E.DraftChoice, float, Outcome] | None
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Speculated:
    """The chosen technique at the shape its schedule drafts at the plan's batch, the Plan's speculation section and
    prediction, the shapes beside it, and the candidates with the chosen one marked."""

    chosen: tuple[E.DraftChoice, float, Outcome] | None
    spec: Speculation
    pred: Prediction
    alternatives: tuple[ShapeAlternative, ...]
    candidates: tuple[Candidate, ...]
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Budgeted:
    """The memory budget with the chosen drafter, and the serve section at the context served."""

    budget: MemoryBudget
    serve: ServeSpec
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Loaded:
    """Both arms at the workload's request rate (None without one)."""

    load: LoadPrediction | None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackNotes:
    """What the stack's caps, the temperature and an unknown version mean for this plan."""

    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Planning:
    """The request and the frozen result of every stage run so far (:data:`STAGES`, in order). Each stage reads the
    results before it and returns its own; the properties read the latest result that holds a value."""

    req: Request
    inputs: Inputs | None = None
    work: Work | None = None
    hard: Hard | None = None
    costed: Costed | None = None
    fit: Fit | None = None
    scores: Scores | None = None
    decision: Decision | None = None
    speculated: Speculated | None = None
    budgeted: Budgeted | None = None
    loaded: Loaded | None = None
    stack_notes: StackNotes | None = None

    def results(self) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)[1:] if getattr(self, f.name) is not None]

    def reasons(self) -> list[str]:
        return [r for x in self.results() for r in getattr(x, "reasons", ())]

    def warnings(self) -> list[str]:
        return [w for x in self.results() for w in getattr(x, "warnings", ())]

    @property
    def caps(self) -> StackCapabilities:
        return self.req.caps

    @property
    def stack(self) -> str:
        return self.req.caps.name

    @property
    def fixing(self) -> bool:
        return self.req.fixing

    @property
    def cfg(self) -> Config:
        """The configuration with the serve section as planned so far (the input itself is never rewritten)."""
        serve = self.budgeted.serve if self.budgeted else self.hard.serve if self.hard else None
        return self.req.cfg if serve is None else self.req.cfg.model_copy(update={"serve": serve})

    @property
    def model(self) -> Model:
        return self.result("inputs").model

    @property
    def pol(self) -> Policy:
        return self.result("inputs").pol

    @property
    def wl(self) -> WorkloadSpec:
        return self.result("work").wl

    @property
    def prof(self) -> Any:
        return self.result("work").prof

    @property
    def tokens(self) -> int:
        return self.result("work").tokens

    @property
    def context(self) -> int:
        return self.result("work").context

    @property
    def context_auto(self) -> bool:
        return self.result("work").context_auto

    @property
    def kvb(self) -> float:
        return self.result("work").kvb

    @property
    def seqs(self) -> int:
        return self.fit.seqs if self.fit else self.result("work").seqs

    @property
    def useful_context(self) -> int:
        return self.fit.useful_context if self.fit else self.result("work").useful_context

    @property
    def fmt(self) -> Any:
        return self.hard.fmt if self.hard else self.result("work").fmt

    @property
    def target(self) -> Arch:
        return self.hard.target if self.hard else self.result("work").target

    @property
    def hw(self) -> Any:
        return self.result("hard").hw

    @property
    def gpu(self) -> Any:
        return self.result("hard").gpu

    @property
    def n(self) -> int:
        return self.result("hard").hw.num_gpus

    @property
    def par(self) -> Parallelism:
        return self.result("hard").par

    @property
    def device(self) -> E.Device:
        return self.result("costed").device

    @property
    def c(self) -> E.Context:
        return self.fit.c if self.fit else self.result("costed").c

    @property
    def factors(self) -> Any:
        return self.c.factors

    @property
    def capacity(self) -> int:
        return self.result("fit").capacity

    @property
    def explicit(self) -> SpeculationSpec | None:
        return self.result("scores").explicit

    @property
    def scored(self) -> list[tuple[E.DraftChoice, float, Outcome]]:
        return list(self.result("scores").scored)

    @property
    def candidates(self) -> list[Candidate]:
        return list(self.speculated.candidates if self.speculated else self.result("scores").candidates)

    @property
    def chosen(self) -> tuple[E.DraftChoice, float, Outcome] | None:
        return self.speculated.chosen if self.speculated else self.result("decision").chosen

    @property
    def spec(self) -> Speculation:
        return self.speculated.spec if self.speculated else Speculation()

    def result(self, name: str) -> Any:
        """The frozen result of stage ``name``; RuntimeError when it has not run (a stage reading ahead)."""
        got = getattr(self, name)
        if got is None:
            raise RuntimeError(f"planning stage '{name}' has not run")  # a stage read ahead of the order
        return got

    def factors_label(self) -> str:
        """The stack as the policy names it (its cost row's label), else its name."""
        row = self.pol.stacks.get(self.caps.costed_as(self.pol.stacks))
        return (row.label if row is not None else None) or self.stack
