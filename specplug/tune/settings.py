"""What a tune was asked to do. The fingerprint decides whether an output folder's state can be resumed."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from specplug.errors import SpecplugError

# Each level is run this many times (interleaved) so run-to-run noise can be measured.
DEFAULT_REPEATS = 2
# Speculation is kept only where it beats the control by this much beyond the measured spread.
DEFAULT_MARGIN = 0.05


class TuneSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: list[int] = Field(description="Concurrent streams per level (closed loop).")
    request_rates: list[float] = Field(default_factory=list,
                                       description="Poisson request rates per level, requests/s (open loop).")
    slo_tpot_ms: float | None = Field(None, gt=0, description="Time per output token target: decide by goodput.")
    slo_ttft_ms: float | None = Field(None, gt=0, description="Time to first token target: decide by goodput.")
    load_concurrency: int | None = Field(None, ge=1, description="The production load the decision serves "
                                                                   "(workload.concurrency), when stated as streams.")
    load_request_rate: float | None = Field(None, gt=0, description="The production load, when stated as a rate.")
    repeats: int = Field(DEFAULT_REPEATS, ge=1, le=20)
    max_tokens: int = Field(128, ge=1)
    num_prompts: int | None = Field(None, ge=1, description="Requests per level (default: the set, 4 per stream).")
    level_seconds: float | None = Field(None, gt=0, description="Stop sending new requests after this long per level.")
    workload: str | None = Field(None, description="Built-in prompt set replayed, when no traffic file is.")
    traffic: str | None = Field(None, description="Traffic file whose prompts are replayed.")
    traffic_digest: str | None = None
    temperature: float = 0.0
    margin: float = Field(DEFAULT_MARGIN, ge=0.0)
    candidates: int = Field(3, ge=1)
    methods: list[str] = Field(default_factory=list, description="Only these methods (empty: the recommendation's).")
    drafter: str | None = None
    ks: list[int] = Field(default_factory=list, description="k values to try (empty: 1 .. predicted k + 1).")
    check_prompts: int = Field(4, ge=0, description="Greedy outputs compared with the control's.")
    budget_s: float | None = Field(None, gt=0)
    launch_timeout_s: float = Field(900.0, gt=0)
    config_digest: str = Field("", description="specplug.yaml as validated data, less what tune writes.")

    def fingerprint(self) -> str:
        """What the measurements depend on: two runs with equal fingerprints measured the same thing.
        The budget, the candidate count and the production load only choose which trials run and how they are
        weighed, so they are left out; so are open-loop levels and targets when not asked for (a state written
        before they existed resumes)."""
        data = self.model_dump(mode="json", exclude=set(NOT_MEASURED))
        for key in ("request_rates", "slo_tpot_ms", "slo_ttft_ms"):
            if not data[key]:
                del data[key]
        return "sha256:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    @property
    def slo(self) -> bool:
        return self.slo_tpot_ms is not None or self.slo_ttft_ms is not None


# Settings that do not change what a trial measures (a state measured under others resumes).
NOT_MEASURED = ("budget_s", "candidates", "launch_timeout_s", "load_concurrency", "load_request_rate")


def parse_budget(text: str | None) -> float | None:
    """'30m', '1h30m', '90s' or plain seconds -> seconds; None when not given."""
    if text is None or not text.strip():
        return None
    import re

    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        total = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", t)
        if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", t):
            raise SpecplugError(f"--budget '{text}' is not a duration.", "Write it like 30m, 1h30m, 90s or 600.")
        total = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if total <= 0:
        raise SpecplugError(f"--budget '{text}' must be more than zero.")
    return total


def parse_rates(text: str | None) -> list[float]:
    """'1,2,4.5' -> sorted distinct request rates (requests/s, above zero)."""
    if not text or not text.strip():
        return []
    out: set[float] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise SpecplugError(f"--request-rate '{text}': '{part}' is not a number.",
                                "Write requests per second like 1,2,4,8.") from None
        if not 0 < v <= 10000 or v != v:
            raise SpecplugError(f"--request-rate '{text}': {part} is not a rate above 0 (requests per second).",
                                "Write requests per second like 1,2,4,8.")
        out.add(v)
    return sorted(out)


def parse_ints(text: str | None, what: str, lo: int, hi: int) -> list[int]:
    """'1,2,3' or '1-5' -> sorted distinct ints within [lo, hi]."""
    if not text:
        return []
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, sep, b = part.partition("-")
        try:
            rng = range(int(a), int(b) + 1) if sep else range(int(a), int(a) + 1)
        except ValueError:
            raise SpecplugError(f"{what} '{text}': '{part}' is not a number or a range.", "Write it like 1,2,4 or 1-5.") from None
        if not rng or rng.start < lo or rng.stop - 1 > hi:
            raise SpecplugError(f"{what} '{text}': values must lie in {lo}..{hi}.")
        out.update(rng)
    return sorted(out)


def fmt_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s" if s else f"{m}m"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"
