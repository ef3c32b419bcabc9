"""The bench record: what a run measured, as pydantic models so ``bench.json`` reloads exactly."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from specplug.bench.metrics import Acceptance
from specplug.errors import SpecplugError, invalid
from specplug.fileio import read_json_object

RECORD_KIND = "specplug-bench"
RECORD_VERSION = 1


class Percentiles(BaseModel):
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        if not values:
            return cls()
        xs = sorted(values)
        return cls(p50=_pct(xs, 50), p90=_pct(xs, 90), p99=_pct(xs, 99), mean=sum(xs) / len(xs))


def _pct(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without importing numpy."""
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class RunStats(BaseModel):
    """One endpoint at one concurrency."""

    role: str = Field(description="'speculative' or 'baseline'.")
    concurrency: int = Field(description="Concurrent streams (closed loop); 0 for an open-loop level.")
    request_rate: float | None = Field(None, description="Poisson arrivals per second (open loop); None in a closed loop.")
    requests: int = 0
    failed: int = 0
    errors: list[str] = []
    wall_s: float = 0.0
    output_tokens: int = 0
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    goodput_tokens_per_s: float | None = Field(
        None, description="Output tokens/s of the requests within the latency targets; None when none were given.")
    ttft_s: Percentiles = Percentiles()
    tpot_s: Percentiles = Percentiles()
    latency_s: Percentiles = Percentiles()
    acceptance: Acceptance | None = None
    interrupted: bool = False


class Level(BaseModel):
    concurrency: int = Field(description="Concurrent streams; 0 for an open-loop level (request_rate).")
    request_rate: float | None = None
    speculative: RunStats | None = None
    baseline: RunStats | None = None
    speedup: float | None = Field(None, description="Output tokens/s with speculation over without.")
    tpot_speedup: float | None = Field(None, description="Baseline p50 time per output token over speculative.")

    def compute(self) -> None:
        s, b = self.speculative, self.baseline
        if s and b and s.output_tokens_per_s and b.output_tokens_per_s:
            self.speedup = s.output_tokens_per_s / b.output_tokens_per_s
        if s and b and s.tpot_s.p50 and b.tpot_s.p50:
            self.tpot_speedup = b.tpot_s.p50 / s.tpot_s.p50


class BenchRecord(BaseModel):
    kind: str = RECORD_KIND
    version: int = RECORD_VERSION
    specplug_version: str = ""
    created: str = ""
    endpoint: str
    baseline: str | None = None
    model: str | None = None
    baseline_model: str | None = None
    stack: str | None = Field(None, description="Stack recognised from the endpoint's metric names.")
    workload: str | None = None
    prompts_file: str | None = None
    api: str = "auto"
    num_prompts: int | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    duration_s: float | None = None
    api_key_env: str | None = Field(None, description="Name of the variable the key came from (never the key).")
    concurrency: list[int] = []
    levels: list[Level] = []
    pays_up_to: int | None = None
    stops_paying_at: int | None = None
    verdict: str = ""
    complete: bool = False
    notes: list[str] = []

    def finish(self, min_speedup: float = 1.0) -> None:
        """Speedups per level and the concurrency above which speculation stops paying."""
        for lv in self.levels:
            lv.compute()
        measured = sorted((lv for lv in self.levels if lv.speedup is not None), key=lambda lv: lv.concurrency)
        self.pays_up_to = self.stops_paying_at = None
        if not measured:
            self.verdict = (
                "no speedup measured: stopped before the baseline ran" if self.baseline
                else "no speedup measured (needs --baseline or --launch-baseline)"
            )
            return
        for lv in measured:
            if lv.speedup is not None and lv.speedup < min_speedup:
                self.stops_paying_at = lv.concurrency
                break
            self.pays_up_to = lv.concurrency
        if self.stops_paying_at is None:
            self.verdict = f"speculation pays at every measured concurrency (up to {measured[-1].concurrency})"
        elif self.pays_up_to is None:
            self.verdict = f"speculation does not pay at any measured concurrency (from {measured[0].concurrency})"
        else:
            self.verdict = (
                f"speculation pays up to concurrency {self.pays_up_to} and stops paying at {self.stops_paying_at}"
            )


def load_record(path: str | Path) -> BenchRecord:
    p, data = read_json_object(path, "bench.json", "Pass the bench.json written by 'specplug bench -o DIR'.")
    if data.get("kind") != RECORD_KIND:
        raise SpecplugError(f"{p} is not a specplug bench record.", "Pass the bench.json written by 'specplug bench'.")
    try:
        return BenchRecord.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, f"{p} is damaged", "Re-create it with 'specplug bench -o DIR'.", SpecplugError) from None
