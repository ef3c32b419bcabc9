"""Prometheus text exposition for the embedded server, with vLLM's metric names.

Hand-written rather than prometheus_client so the server needs nothing beyond the ``[runtime]`` extra.
Names and labels follow vLLM's V1 engine (``vllm:spec_decode_*_total`` etc.), so a dashboard or scraper
written for vLLM reads the embedded server unchanged. Thread-safe: the engine thread updates counters while
the event loop renders them.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence

# vLLM's own bucket boundaries (vllm/v1/metrics/loggers.py), so histograms line up across stacks.
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _num(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return str(int(v))
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str], const: dict[str, str]) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        self.const = dict(const)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def _pairs(self, key: tuple[str, ...]) -> list[tuple[str, str]]:
        return list(self.const.items()) + list(zip(self.labelnames, key, strict=True))

    def header(self) -> list[str]:
        base = self.name[: -len("_total")] if self.kind == "counter" and self.name.endswith("_total") else self.name
        return [f"# HELP {base} {self.help}", f"# TYPE {base} {self.kind}"]


class _Scalar(_Metric):
    """One number per label set: what counters and gauges share."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._values: dict[tuple[str, ...], float] = {}
        if not self.labelnames:
            self._values[()] = 0

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return self.header() + [f"{self.name}{_labels(self._pairs(k))} {_num(v)}" for k, v in items]


class Counter(_Scalar):
    kind = "counter"

    def inc(self, amount: float = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount


class Gauge(_Scalar):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self._values[self._key(labels)] = value


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float], const: dict[str, str]) -> None:
        super().__init__(name, help_text, (), const)
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * (len(self.buckets) + 1)  # last slot: above every bound (+Inf)
        self._sum = 0.0
        self._count = 0

    def observe(self, value: float) -> None:
        i = bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value
            self._count += 1

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def render(self) -> list[str]:
        with self._lock:
            counts, total, n = list(self._counts), self._sum, self._count
        out = self.header()
        running = 0
        for bound, c in zip(self.buckets, counts, strict=False):
            running += c
            out.append(f"{self.name}_bucket{_labels([*self.const.items(), ('le', _num(bound))])} {running}")
        out.append(f"{self.name}_bucket{_labels([*self.const.items(), ('le', '+Inf')])} {n}")
        out.append(f"{self.name}_sum{_labels(self.const.items())} {_num(total)}")
        out.append(f"{self.name}_count{_labels(self.const.items())} {n}")
        return out


class ServerMetrics:
    """Every metric the embedded server exports, labelled with the served model name like vLLM does."""

    def __init__(self, model_name: str, max_positions: int = 16) -> None:
        const = {"model_name": model_name}
        self._metrics: list[_Metric] = []

        def add(m: _Metric) -> _Metric:
            self._metrics.append(m)
            return m

        # Speculative decoding: the four V1 counters a vLLM scraper reads.
        self.num_drafts = add(Counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", (), const))
        self.num_draft_tokens = add(
            Counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", (), const)
        )
        self.num_accepted_tokens = add(
            Counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", (), const)
        )
        self.accepted_per_pos = add(
            Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "Accepted tokens per draft position.",
                ("position",),
                const,
            )
        )
        # Pre-create positions so a scraper sees zeros before the first draft, as vLLM does.
        for pos in range(max_positions):
            self.accepted_per_pos.inc(0, position=str(pos))
        self.prompt_tokens = add(Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", (), const))
        self.generation_tokens = add(
            Counter("vllm:generation_tokens_total", "Number of generation tokens processed.", (), const)
        )
        self.request_success = add(
            Counter("vllm:request_success_total", "Count of successfully processed requests.", ("finished_reason",), const)
        )
        self.requests_rejected = add(
            Counter(
                "specplug:requests_rejected_total",
                "Requests refused before decoding (queue full, invalid input, auth).",
                ("reason",),
                const,
            )
        )
        self.requests_cancelled = add(
            Counter("specplug:requests_cancelled_total", "Requests abandoned by their client mid-decode.", (), const)
        )
        self.engine_steps = add(Counter("specplug:engine_steps_total", "Batched decode steps run.", (), const))
        self.num_running = add(Gauge("vllm:num_requests_running", "Requests in the decode batch.", (), const))
        self.num_waiting = add(Gauge("vllm:num_requests_waiting", "Requests queued for the batch.", (), const))
        self.e2e_latency = add(
            Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", E2E_BUCKETS, const)
        )
        self.ttft = add(Histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS, const))
        self.tpot = add(
            Histogram("vllm:time_per_output_token_seconds", "Time per output token after the first.", TPOT_BUCKETS, const)
        )
        self.prompt_len = add(
            Histogram("vllm:request_prompt_tokens", "Prompt length per request.", TOKEN_BUCKETS, const)
        )
        self.generation_len = add(
            Histogram("vllm:request_generation_tokens", "Generated tokens per request.", TOKEN_BUCKETS, const)
        )

    def record_draft(self, drafted: int, accepted: int) -> None:
        """One draft of ``drafted`` tokens of which the first ``accepted`` were accepted."""
        if drafted <= 0:
            return
        self.num_drafts.inc()
        self.num_draft_tokens.inc(drafted)
        self.num_accepted_tokens.inc(accepted)
        for pos in range(accepted):
            self.accepted_per_pos.inc(1, position=str(pos))

    def record_spec_totals(self, drafts: int, draft_tokens: int, accepted: int, per_pos: Sequence[int]) -> None:
        """Add aggregated speculative counts (deltas), for engines that report totals rather than drafts."""
        if drafts:
            self.num_drafts.inc(drafts)
        if draft_tokens:
            self.num_draft_tokens.inc(draft_tokens)
        if accepted:
            self.num_accepted_tokens.inc(accepted)
        for pos, n in enumerate(per_pos):
            if n:
                self.accepted_per_pos.inc(n, position=str(pos))

    def render(self) -> str:
        lines: list[str] = []
        for m in self._metrics:
            lines.extend(m.render())
        return "\n".join(lines) + "\n"
