"""Where each stack shows its speculative-decoding counters, as data an adapter declares (specplug.bench.metrics
reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


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
