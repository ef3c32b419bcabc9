"""Calibration files: measured acceptance that replaces the policy's prior for a matching setup.

``specplug calibrate`` writes them; ``--calibration FILE`` or ``calibration:`` in specplug.yaml reads them.
Schema (YAML)::

    version: 1
    entries:
      - model: meta-llama/Llama-3.1-8B-Instruct   # HF id (or local folder) of the target; aliases also match
        method: eagle3                            # canonical method name
        workload: chat                            # workload type the traffic was
        drafter: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B   # optional: only matches this drafter
        stack: vllm                               # optional: only matches this stack
        temperature: 0.0                          # optional: matches within +-0.15
        num_speculative_tokens: 3                 # draft length measured with (needed to use acceptance_length)
        acceptance_rate: 0.71                     # per-token acceptance (accepted / drafted), and/or
        acceptance_length: 2.9                    # mean tokens per verification step incl. the bonus token
        measured_speedup: 1.8                     # optional, informational
        batch_size: 1                             # optional, informational
        measured_at: "2026-01-01"                 # optional, informational
        position_rates: [0.71, 0.9, 0.93]         # optional: measured P(position i accepted | earlier ones were)
        source: bench                             # optional: 'bench' or 'traffic <file> <digest>'

``specplug calibrate --from/--endpoint`` writes entries from a bench; ``specplug calibrate --traffic FILE``
writes ngram and suffix entries from replaying a traffic log (no stack: they match any; temperature 0, since
replay measures greedy acceptance). Both merge into one file: an entry replaces only one of the same setup.

A matching entry's acceptance becomes the first-position alpha (acceptance_length, with its k, is inverted
through the method's decay; acceptance_rate, the mean over drafted positions, is inverted likewise). When
several entries match, the most specific one (drafter, stack, temperature given) wins, then the last.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specplug.config import Method, Workload
from specplug.errors import ConfigError, invalid


class CalibrationEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    method: Method
    workload: Workload = "chat"
    drafter: str | None = None
    stack: str | None = None
    temperature: float | None = Field(None, ge=0.0)
    num_speculative_tokens: int | None = Field(None, ge=1, le=64)
    tree_topk: int | None = Field(None, ge=2, description="The tree the measurement drafted (topk per node), if not a chain.")
    num_draft_tokens: int | None = Field(None, ge=2, description="That tree's verified tokens, the root included.")
    acceptance_rate: float | None = Field(None, gt=0.0, lt=1.0)
    acceptance_length: float | None = Field(None, ge=1.0)
    measured_speedup: float | None = Field(None, gt=0.0)
    batch_size: int | None = Field(None, ge=1)
    measured_at: str | None = None
    position_rates: list[float] | None = Field(None, description="Measured conditional acceptance per draft position.")
    source: str | None = None

    @model_validator(mode="after")
    def _has_measurement(self) -> CalibrationEntry:
        if self.acceptance_rate is None and self.acceptance_length is None:
            raise ValueError("an entry needs acceptance_rate or acceptance_length")
        if self.acceptance_rate is None and self.num_speculative_tokens is None:
            raise ValueError("acceptance_length needs num_speculative_tokens (the k it was measured with)")
        return self


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    entries: list[CalibrationEntry] = Field(default_factory=list)

    def match(
        self,
        model_ids: set[str],
        method: str,
        workload: str,
        drafter: str | None = None,
        stack: str | None = None,
        temperature: float = 0.0,
    ) -> CalibrationEntry | None:
        ids = {m.lower() for m in model_ids}
        best: tuple[int, int, CalibrationEntry] | None = None
        for i, e in enumerate(self.entries):
            if e.model.lower() not in ids or e.method != method or e.workload != workload:
                continue
            if e.drafter and (drafter or "").lower() != e.drafter.lower():
                continue
            if e.stack and stack and e.stack != stack:
                continue
            if e.temperature is not None and abs(e.temperature - temperature) > 0.15:
                continue
            score = sum(x is not None for x in (e.drafter, e.stack, e.temperature))
            if best is None or (score, i) >= (best[0], best[1]):
                best = (score, i, e)
        return best[2] if best else None


def first_alpha_from(
    entry: CalibrationEntry, decay: float, match_accept: float | None = None, tree_gain: float = 0.0, tree_confidence: float = 1.0
) -> float:
    """Turn a measurement into the first-position alpha the model uses (``match_accept``: see perf.solve_alpha). A
    length measured on a tree is read back through that tree, so the plan's own tree does not count its gain twice."""
    from specplug.policy.perf import solve_alpha

    k = entry.num_speculative_tokens
    if entry.acceptance_length is not None and k:
        tree = ((entry.tree_topk, entry.num_draft_tokens - 1, tree_gain, tree_confidence)
                if entry.tree_topk and entry.num_draft_tokens else None)
        return solve_alpha(entry.acceptance_length, k, decay, match_accept, tree)
    rate = float(entry.acceptance_rate or 0.0)
    if not k or decay >= 1.0:
        return rate
    # acceptance_rate is accepted/drafted = (tau - 1) / k over the chain; invert that. Stacks count the drafts of the
    # steps that drafted, so a copy method's rate is already conditional on a match: no match_accept share here.
    return solve_alpha(1.0 + rate * k, k, decay)


def same_setup(a: CalibrationEntry, b: CalibrationEntry) -> bool:
    """Entries that describe one setup: a new measurement of it replaces the old."""
    keys = ("model", "method", "workload", "drafter", "stack", "temperature")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def merge_into(path: str | Path, entries: list[CalibrationEntry]) -> Calibration:
    """Merge ``entries`` into the calibration file at ``path`` (created if missing) and write it atomically."""
    from specplug.fileio import write_atomic
    from specplug.serialize import dump_yaml

    p = Path(path)
    merged = load_calibration(p) if p.exists() else Calibration()
    for e in entries:
        merged = Calibration(entries=[x for x in merged.entries if not same_setup(x, e)] + [e])
    text = "# Written by 'specplug calibrate': measured acceptance replaces the policy's prior for this setup.\n"
    text += dump_yaml(merged.model_dump(mode="json", exclude_none=True))
    write_atomic(p, text)
    return merged


def entries_from_traffic(prof, model_id: str, workload: str, k: int, methods: tuple[str, ...] = ("ngram", "suffix")) -> list[CalibrationEntry]:
    """Calibration entries from a TrafficProfile: replayed acceptance at draft length ``k`` per method."""
    import datetime

    out = []
    for method in methods:
        tau = prof.acceptance_length(method, k)
        rates = prof.position_rates(method)
        if tau is None or rates is None:
            continue
        rate = min(max((tau - 1.0) / k, 1e-3), 0.999)  # the schema's open interval
        out.append(CalibrationEntry(
            model=model_id, method=method, workload=workload, temperature=0.0, num_speculative_tokens=k,
            acceptance_rate=round(rate, 4), acceptance_length=round(max(tau, 1.0), 4),
            position_rates=[round(r, 4) for r in rates], measured_at=datetime.date.today().isoformat(),
            source=f"traffic {Path(prof.path).name} {prof.digest[:19]} ({prof.replayed} requests replayed)",
        ))
    return out


def load_calibration(path: str | Path) -> Calibration:
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"Cannot read calibration file {p}: {exc.strerror}.", "Run 'specplug calibrate' to write one.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}.") from None
    if data is None:
        data = {}
    if isinstance(data, list):
        data = {"entries": data}
    try:
        return Calibration.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, f"Invalid calibration file {p}", "Re-create it with 'specplug calibrate'.") from None
