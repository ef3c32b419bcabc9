"""Reading speculative-decoding acceptance from what a serving stack exposes.

Every stack counts differently, so each adapter declares where its figures are (``metrics``, a
:class:`~specplug.stacks.metrics.StackMetrics`), and this module has one reader per shape of report. A before/after pair
of ``/metrics`` scrapes (plus, for gauges, samples taken during the run, and per-response ``timings``) becomes
one :class:`Acceptance`:

- :class:`~specplug.stacks.metrics.Counters` that only grow (vLLM V1, llama.cpp, the embedded server), differenced;
- :class:`~specplug.stacks.metrics.Gauges` of the latest batch (SGLang), averaged over samples;
- :class:`~specplug.stacks.metrics.SkippedTokens` against generated tokens (TGI's histograms);
- :class:`~specplug.stacks.metrics.IterationStats`, JSON records of new iterations (TensorRT-LLM);
- :class:`~specplug.stacks.metrics.ResponseTimings`, fields of each response summed (llama.cpp without ``--metrics``).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from specplug.stacks.metrics import (
    AcceptanceReader,
    Counters,
    Gauges,
    IterationStats,
    ResponseTimings,
    SkippedTokens,
    StackMetrics,
)

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Snapshot:
    """One scrape of ``/metrics``: Prometheus samples, or the JSON a TensorRT-LLM server returns."""

    samples: list[Sample] = field(default_factory=list)
    json_stats: list | dict | None = None

    def total(self, name: str, **match: str) -> float | None:
        """Sum of every series of ``name`` whose labels include ``match`` (engines, ranks, models add up)."""
        vals = [s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in match.items())]
        return sum(vals) if vals else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for s in self.samples:
            if s.name == name and label in s.labels:
                out[s.labels[label]] += s.value
        return dict(out)

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def mean(self, name: str) -> float | None:
        vals = [s.value for s in self.samples if s.name == name]
        return sum(vals) / len(vals) if vals else None


def parse_exposition(text: str) -> Snapshot:
    """Parse Prometheus text exposition (0.0.4 / OpenMetrics); a JSON body is kept as TensorRT-LLM stats."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            return Snapshot(json_stats=json.loads(stripped))
        except json.JSONDecodeError:
            pass
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group("labels") or "")}
        samples.append(Sample(m.group("name"), labels, value))
    return Snapshot(samples=samples)


def _unescape(v: str) -> str:
    return v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


class Acceptance(BaseModel):
    """Acceptance measured over one run. Fields a stack does not expose stay None."""

    source: str
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position: list[float] = []
    samples: int | None = None

    def summary(self) -> str:
        parts = []
        if self.mean_acceptance_length is not None:
            parts.append(f"length {self.mean_acceptance_length:.2f}")
        if self.acceptance_rate is not None:
            parts.append(f"rate {self.acceptance_rate:.0%}")
        return ", ".join(parts) or "n/a"


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    a = after.total(name)
    if a is None:
        return None
    b = before.total(name) or 0.0
    # A counter that went down means the server restarted between scrapes; the after value is the run.
    return a - b if a >= b else a


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _counters(c: Counters, before: Snapshot, after: Snapshot) -> Acceptance | None:
    drafts = _delta(before, after, c.drafts) if c.drafts else None
    tokens = _delta(before, after, c.draft_tokens)
    accepted = _delta(before, after, c.accepted)
    if tokens is None or accepted is None:
        return None
    per_pos: list[float] = []
    if drafts and c.per_position:
        b = before.by_label(c.per_position, c.position_label)
        a = after.by_label(c.per_position, c.position_label)
        for pos in sorted(a, key=lambda s: int(s) if s.isdigit() else 0):
            d = a[pos] - b.get(pos, 0.0)
            per_pos.append(max(d if d >= 0 else a[pos], 0.0) / drafts)
        # Servers pre-create positions up to a maximum (the embedded one: 16); drop idle ones past the draft length.
        k = math.ceil((tokens or 0) / drafts - 1e-9)
        while len(per_pos) > max(k, 1) and per_pos[-1] == 0.0:
            per_pos.pop()
    length = 1.0 + accepted / drafts if drafts else None
    return Acceptance(
        source=c.source if drafts is not None else f"{c.source} ({c.without_drafts})",
        drafts=drafts,
        draft_tokens=tokens,
        accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, tokens),
        mean_acceptance_length=length,
        per_position=per_pos,
    )


def _gauges(g: Gauges, during: Sequence[Snapshot]) -> Acceptance | None:
    """A gauge holds the most recent batch's value: average the samples taken while the run went on."""
    lengths = [v for s in during if g.length and (v := s.mean(g.length)) is not None and v > 0]
    rates = [v for s in during if g.rate and (v := s.mean(g.rate)) is not None]
    if not lengths and not rates:
        return None
    return Acceptance(
        source=g.source,
        acceptance_rate=sum(rates) / len(rates) if rates else None,
        mean_acceptance_length=sum(lengths) / len(lengths) if lengths else None,
        samples=max(len(lengths), len(rates)),
    )


def _skipped(t: SkippedTokens, before: Snapshot, after: Snapshot) -> Acceptance | None:
    """Tokens skipped (accepted from speculation) per request; each forward yields one more."""
    skipped = _delta(before, after, t.skipped)
    if skipped is None:
        return None
    generated = _delta(before, after, t.generated)
    forwards = generated - skipped if generated is not None else None
    return Acceptance(
        source=t.source,
        accepted_tokens=skipped,
        mean_acceptance_length=(generated / forwards) if generated and forwards and forwards > 0 else None,
    )


def _iterations(st: IterationStats, after: Snapshot, before: Snapshot) -> Acceptance | None:
    """A list of iteration stats; new iterations are the ones not seen before."""

    def iters(s: Snapshot) -> list[dict]:
        data = s.json_stats
        if isinstance(data, dict):
            data = [data]
        return [d for d in data or [] if isinstance(d, dict)]

    seen = {json.dumps(d, sort_keys=True) for d in iters(before)}
    tokens = accepted = reqs = 0.0
    lengths: list[float] = []
    for it in iters(after):
        if json.dumps(it, sort_keys=True) in seen:
            continue
        sd = next((it[b] for b in st.blocks if it.get(b)), None)
        if not isinstance(sd, dict):
            continue
        tokens += float(sd.get(st.draft_tokens, 0) or 0)
        accepted += float(sd.get(st.accepted, 0) or 0)
        reqs += float(sd.get(st.requests, 0) or 0)
        if sd.get(st.length):
            lengths.append(float(sd[st.length]))
    if not tokens and not lengths:
        return None
    return Acceptance(
        source=st.source,
        drafts=reqs or None,
        draft_tokens=tokens or None,
        accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, tokens),
        mean_acceptance_length=(1.0 + accepted / reqs) if reqs else (sum(lengths) / len(lengths) if lengths else None),
        samples=len(lengths) or None,
    )


def _timings(rt: ResponseTimings, timings: Iterable[dict]) -> Acceptance | None:
    n = acc = 0.0
    seen = False
    for t in timings:
        if not isinstance(t, dict) or rt.drafted not in t:
            continue
        seen = True
        n += float(t.get(rt.drafted) or 0)
        acc += float(t.get(rt.accepted) or 0)
    if not seen:
        return None
    return Acceptance(source=rt.source, draft_tokens=n, accepted_tokens=acc, acceptance_rate=_ratio(acc, n))


def declared() -> dict[str, StackMetrics]:
    """Each registered stack's metric declaration, in registry order (stacks that fail to load are left out)."""
    from specplug.errors import StackError
    from specplug.stacks.registry import get_adapter, stack_names

    out: dict[str, StackMetrics] = {}
    for name in stack_names():
        try:
            out[name] = get_adapter(name).metrics
        except StackError:
            continue
    return out


def _read(a: AcceptanceReader | None, before: Snapshot, after: Snapshot, during: Sequence[Snapshot]) -> Acceptance | None:
    if isinstance(a, Counters):
        return _counters(a, before, after)
    if isinstance(a, Gauges):
        return _gauges(a, [*during, after])
    if isinstance(a, SkippedTokens):
        return _skipped(a, before, after)
    if isinstance(a, IterationStats):
        return _iterations(a, after, before) if after.json_stats is not None else None
    return None


def from_timings(timings: Iterable[dict], stack: str | None = None) -> Acceptance | None:
    """Per-response timings summed over the run, read as ``stack`` (default: any stack that declares them)."""
    timings = list(timings)
    decls = declared()
    for name, m in decls.items():
        if m.timings is not None and (stack is None or name == stack):
            got = _timings(m.timings, timings)
            if got is not None:
                return got
    return None


def read_acceptance(
    before: Snapshot | None,
    after: Snapshot | None,
    during: Sequence[Snapshot] = (),
    timings: Iterable[dict] = (),
    stack: str | None = None,
) -> Acceptance | None:
    """The acceptance of one run from whatever the server exposed; None when it exposed nothing usable.

    The stack's own declaration is read first (``stack``, else the one the scrape looks like), then every
    other registered stack's, so a server speaking another stack's names is still read."""
    if after is not None:
        b = before or Snapshot()
        decls = declared()
        first = stack if stack in decls else detect_stack(after)
        readers = [decls[first].acceptance] if first in decls else []
        for m in decls.values():  # a reader several stacks share (vLLM's counters) is read once
            if m.acceptance is not None and m.acceptance not in readers:
                readers.append(m.acceptance)
        for reader in readers:
            got = _read(reader, b, after, during)
            if got is not None:
                return got
    return from_timings(timings, stack)


def detect_stack(snapshot: Snapshot | None) -> str | None:
    """Which registered stack's metrics these look like: the one whose markers all appear, the most specific
    (most markers) first; a JSON body is the stack that declares iteration stats."""
    if snapshot is None:
        return None
    names = snapshot.names()
    best: tuple[int, str] | None = None
    for stack, m in declared().items():
        if snapshot.json_stats is not None:
            score = 1 if isinstance(m.acceptance, IterationStats) else 0
        elif m.markers and all(any(n.startswith(p) for n in names) for p in m.markers):
            score = len(m.markers)
        else:
            score = 0
        if score and (best is None or score > best[0]):
            best = (score, stack)
    return best[1] if best else None


def needs_sampling(snapshot: Snapshot | None) -> bool:
    """Gauges only show the latest batch, so they must be sampled during the run."""
    if snapshot is None:
        return False
    names = snapshot.names()
    return any(
        isinstance(g := m.acceptance, Gauges) and ({g.length, g.rate} & names) for m in declared().values()
    )
