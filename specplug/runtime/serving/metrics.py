"""Prometheus metrics for the embedded server, with vLLM's metric names, written by ``prometheus_client``.

Names and labels follow vLLM's V1 engine (``vllm:spec_decode_*_total`` etc.), so a dashboard or scraper
written for vLLM reads the embedded server unchanged. Each :class:`ServerMetrics` owns its own
``CollectorRegistry`` (several apps in one process, as in the tests, never share counters). prometheus_client
is thread-safe: the engine thread updates while the event loop renders.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as _PromCounter
from prometheus_client import Gauge as _PromGauge
from prometheus_client import Histogram as _PromHistogram

# vLLM's own bucket boundaries (vllm/v1/metrics/loggers.py), so histograms line up across stacks.
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus text exposition 0.0.4


class _Bound:
    """A prometheus_client metric with the constant labels (``model_name``) bound, so callers pass only theirs."""

    def __init__(self, metric, name: str, own_labels: Sequence[str], registry: CollectorRegistry,
                 const: dict[str, str]) -> None:
        self._metric = metric
        self._registry = registry
        self._const = const
        self.name = name
        if not own_labels:
            metric.labels(**const)  # a series without own labels is exported (as 0) before its first update

    def _child(self, labels: dict[str, str]):
        return self._metric.labels(**self._const, **{k: str(v) for k, v in labels.items()})

    def _sample(self, suffix: str, labels: dict[str, str]) -> float:
        value = self._registry.get_sample_value(self.name + suffix, {**self._const, **labels})
        return value or 0.0


class Counter(_Bound):
    def __init__(self, name: str, help_text: str, labelnames: Sequence[str], registry: CollectorRegistry,
                 const: dict[str, str]) -> None:
        metric = _PromCounter(name, help_text, [*const, *labelnames], registry=registry)
        # prometheus_client keeps a counter's name without "_total" and adds it back on the sample.
        super().__init__(metric, name.removesuffix("_total"), labelnames, registry, const)

    def inc(self, amount: float = 1, **labels: str) -> None:
        self._child(labels).inc(amount)

    def value(self, **labels: str) -> float:
        return self._sample("_total", labels)


class Gauge(_Bound):
    def __init__(self, name: str, help_text: str, registry: CollectorRegistry, const: dict[str, str]) -> None:
        super().__init__(_PromGauge(name, help_text, [*const], registry=registry), name, (), registry, const)

    def set(self, value: float, **labels: str) -> None:
        self._child(labels).set(value)

    def value(self, **labels: str) -> float:
        return self._sample("", labels)


class Histogram(_Bound):
    def __init__(self, name: str, help_text: str, buckets: Sequence[float], registry: CollectorRegistry,
                 const: dict[str, str]) -> None:
        metric = _PromHistogram(name, help_text, [*const], buckets=buckets, registry=registry)
        super().__init__(metric, name, (), registry, const)

    def observe(self, value: float) -> None:
        self._child({}).observe(value)

    @property
    def count(self) -> int:
        return int(self._sample("_count", {}))


class ServerMetrics:
    """Every metric the embedded server exports, labelled with the served model name like vLLM does."""

    def __init__(self, model_name: str, max_positions: int = 16) -> None:
        self.registry = CollectorRegistry()
        reg, const = self.registry, {"model_name": model_name}

        def counter(name: str, help_text: str, *labelnames: str) -> Counter:
            return Counter(name, help_text, labelnames, reg, const)

        def histogram(name: str, help_text: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, help_text, buckets, reg, const)

        # Speculative decoding: the four V1 counters a vLLM scraper reads.
        self.num_drafts = counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.")
        self.num_draft_tokens = counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.")
        self.num_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.")
        self.accepted_per_pos = counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "position"
        )
        # Pre-create positions so a scraper sees zeros before the first draft, as vLLM does.
        for pos in range(max_positions):
            self.accepted_per_pos.inc(0, position=str(pos))
        self.prompt_tokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
        self.prefix_queries = counter("vllm:prefix_cache_queries_total",
                                      "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.")
        self.generation_tokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
        self.request_success = counter(
            "vllm:request_success_total", "Count of successfully processed requests.", "finished_reason"
        )
        self.requests_rejected = counter(
            "specplug:requests_rejected_total",
            "Requests refused before decoding (queue full, invalid input, auth, shutting down).",
            "reason",
        )
        self.requests_cancelled = counter(
            "specplug:requests_cancelled_total", "Requests abandoned by their client mid-decode."
        )
        self.engine_steps = counter("specplug:engine_steps_total", "Batched decode steps run.")
        self.spec_steps = counter(
            "specplug:spec_decode_steps_total",
            "Decode steps by what speculation did: on (drafted), or why it was off: no_draft (nothing found), "
            "not_paying (predicted not to pay at this batch), at_length (rows about to end).",
            "state",
        )
        for state in ("on", "no_draft", "not_paying", "at_length"):  # the engine's SPEC_STEPS (no torch import)
            self.spec_steps.inc(0, state=state)
        self.num_running = Gauge("vllm:num_requests_running", "Requests in the decode batch.", reg, const)
        self.num_waiting = Gauge("vllm:num_requests_waiting", "Requests queued for the batch.", reg, const)
        self.e2e_latency = histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", E2E_BUCKETS)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds", "Time per output token after the first.", TPOT_BUCKETS
        )
        self.prompt_len = histogram("vllm:request_prompt_tokens", "Prompt length per request.", TOKEN_BUCKETS)
        self.generation_len = histogram(
            "vllm:request_generation_tokens", "Generated tokens per request.", TOKEN_BUCKETS
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
        """The Prometheus text exposition (0.0.4) of every metric, as :data:`CONTENT_TYPE`."""
        return generate_latest(self.registry).decode()
