"""Reading speculative-decoding acceptance from what each serving stack exposes.

Every stack counts differently (shared/reference/stacks.md 1.6, 2.5, 3.4, 4.5, 5), so each has a reader that
turns a before/after pair of ``/metrics`` scrapes (plus, for gauges, samples taken during the run, and for
llama.cpp, per-response ``timings``) into one :class:`Acceptance`:

- vLLM V1 and specplug's embedded server: counters ``vllm:spec_decode_num_drafts_total``,
  ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total``;
- vLLM V0: counters for accepted and draft tokens only (no draft count, so no acceptance length);
- llama.cpp ``--metrics``: the same counters under ``llamacpp:``; without them, ``timings.draft_n`` and
  ``timings.draft_n_accepted`` summed over the responses;
- SGLang: per-batch gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``, averaged over samples;
- TGI: the ``tgi_request_skipped_tokens`` histogram (tokens gained by speculation) against generated tokens;
- TensorRT-LLM: JSON iteration statistics with ``specDecodingStats`` (field names unconfirmed upstream).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

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


def _counter_family(prefix: str, before: Snapshot, after: Snapshot) -> Acceptance | None:
    p = f"{prefix}:spec_decode_"
    drafts = _delta(before, after, p + "num_drafts_total")
    tokens = _delta(before, after, p + "num_draft_tokens_total")
    accepted = _delta(before, after, p + "num_accepted_tokens_total")
    if tokens is None or accepted is None:
        return None
    per_pos: list[float] = []
    if drafts:
        b = before.by_label(p + "num_accepted_tokens_per_pos_total", "position")
        a = after.by_label(p + "num_accepted_tokens_per_pos_total", "position")
        for pos in sorted(a, key=lambda s: int(s) if s.isdigit() else 0):
            d = a[pos] - b.get(pos, 0.0)
            per_pos.append(max(d if d >= 0 else a[pos], 0.0) / drafts)
        # Servers pre-create positions up to a maximum (the embedded one: 16); drop idle ones past the draft length.
        k = math.ceil((tokens or 0) / drafts - 1e-9)
        while len(per_pos) > max(k, 1) and per_pos[-1] == 0.0:
            per_pos.pop()
    length = 1.0 + accepted / drafts if drafts else None
    source = {"vllm": "vllm counters", "llamacpp": "llama.cpp counters"}.get(prefix, prefix)
    if drafts is None:
        source += " (V0: no draft count)"
    return Acceptance(
        source=source,
        drafts=drafts,
        draft_tokens=tokens,
        accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, tokens),
        mean_acceptance_length=length,
        per_position=per_pos,
    )


def _sglang(during: Sequence[Snapshot]) -> Acceptance | None:
    """SGLang's gauges hold the most recent batch's value: average the samples taken while the run went on."""
    lengths = [v for s in during if (v := s.mean("sglang:spec_accept_length")) is not None and v > 0]
    rates = [v for s in during if (v := s.mean("sglang:spec_accept_rate")) is not None]
    if not lengths and not rates:
        return None
    return Acceptance(
        source="sglang gauges (mean of samples)",
        acceptance_rate=sum(rates) / len(rates) if rates else None,
        mean_acceptance_length=sum(lengths) / len(lengths) if lengths else None,
        samples=max(len(lengths), len(rates)),
    )


def _tgi(before: Snapshot, after: Snapshot) -> Acceptance | None:
    """TGI counts tokens skipped (accepted from speculation) per request; each forward yields one more."""
    skipped = _delta(before, after, "tgi_request_skipped_tokens_sum")
    if skipped is None:
        return None
    generated = _delta(before, after, "tgi_request_generated_tokens_sum")
    forwards = generated - skipped if generated is not None else None
    return Acceptance(
        source="tgi skipped-tokens histogram",
        accepted_tokens=skipped,
        mean_acceptance_length=(generated / forwards) if generated and forwards and forwards > 0 else None,
    )


def _trtllm(after: Snapshot, before: Snapshot) -> Acceptance | None:
    """TensorRT-LLM returns a list of iteration stats; new iterations are the ones not seen before."""

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
        sd = it.get("specDecodingStats") or it.get("spec_decoding_stats")
        if not isinstance(sd, dict):
            continue
        tokens += float(sd.get("numDraftTokens", 0) or 0)
        accepted += float(sd.get("numAcceptedTokens", 0) or 0)
        reqs += float(sd.get("numRequestsWithDraftTokens", 0) or 0)
        if sd.get("acceptanceLength"):
            lengths.append(float(sd["acceptanceLength"]))
    if not tokens and not lengths:
        return None
    return Acceptance(
        source="trtllm iteration stats (unconfirmed field names)",
        drafts=reqs or None,
        draft_tokens=tokens or None,
        accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, tokens),
        mean_acceptance_length=(1.0 + accepted / reqs) if reqs else (sum(lengths) / len(lengths) if lengths else None),
        samples=len(lengths) or None,
    )


def from_timings(timings: Iterable[dict]) -> Acceptance | None:
    """llama.cpp: each response's ``timings.draft_n`` / ``draft_n_accepted`` summed over the run."""
    n = acc = 0.0
    seen = False
    for t in timings:
        if not isinstance(t, dict) or "draft_n" not in t:
            continue
        seen = True
        n += float(t.get("draft_n") or 0)
        acc += float(t.get("draft_n_accepted") or 0)
    if not seen:
        return None
    return Acceptance(source="llama.cpp response timings", draft_tokens=n, accepted_tokens=acc, acceptance_rate=_ratio(acc, n))


def read_acceptance(
    before: Snapshot | None,
    after: Snapshot | None,
    during: Sequence[Snapshot] = (),
    timings: Iterable[dict] = (),
) -> Acceptance | None:
    """The acceptance of one run from whatever the server exposed; None when it exposed nothing usable."""
    if after is not None:
        b = before or Snapshot()
        if after.json_stats is not None:
            got = _trtllm(after, b)
            if got:
                return got
        for prefix in ("vllm", "llamacpp"):
            got = _counter_family(prefix, b, after)
            if got is not None:
                return got
        got = _sglang([*during, after])
        if got is not None:
            return got
        got = _tgi(b, after)
        if got is not None:
            return got
    return from_timings(timings)


def detect_stack(snapshot: Snapshot | None) -> str | None:
    """Which stack's metrics these look like (for the report), from metric name prefixes."""
    if snapshot is None:
        return None
    if snapshot.json_stats is not None:
        return "trtllm"
    names = snapshot.names()
    if any(n.startswith("specplug:") for n in names):
        return "embedded"  # speaks vLLM's metric names, plus its own specplug: ones
    for prefix, stack in (("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llamacpp"), ("tgi_", "tgi")):
        if any(n.startswith(prefix) for n in names):
            return stack
    return None


def needs_sampling(snapshot: Snapshot | None) -> bool:
    """Gauges (SGLang) only show the latest batch, so they must be sampled during the run."""
    return snapshot is not None and any(n.startswith("sglang:spec_accept") for n in snapshot.names())
