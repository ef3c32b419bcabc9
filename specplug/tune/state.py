"""The state file in the output folder: every finished trial, written atomically after each one, so an
interrupted tune resumes from what finished (a trial cut short is run again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from specplug.bench.record import RunStats
from specplug.errors import SpecplugError
from specplug.tune.settings import NOT_MEASURED, TuneSettings

STATE_NAME = "tune-state.json"
STATE_KIND = "specplug-tune-state"
STATE_VERSION = 1


class Output(BaseModel):
    """One greedy completion kept for the comparison with the control."""

    prompt_id: str
    text: str = ""
    tokens: list[str] | None = None
    top: list[dict[str, float]] | None = None
    error: str | None = None


class TrialResult(BaseModel):
    id: str
    method: str
    drafter: str | None = None
    k: int = 0
    status: Literal["done", "failed"]
    error: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    log_file: str | None = None
    launch_s: float | None = None
    wall_s: float | None = None
    stack_version: str | None = None
    runs: list[RunStats] = Field(default_factory=list, description="One per concurrency per repeat, in run order.")
    outputs: list[Output] = Field(default_factory=list)
    finished: str = ""


class TuneState(BaseModel):
    kind: str = STATE_KIND
    version: int = STATE_VERSION
    fingerprint: str
    settings: TuneSettings
    results: dict[str, TrialResult] = Field(default_factory=dict)


def path_in(out_dir: str | Path) -> Path:
    return Path(out_dir) / STATE_NAME


def load(out_dir: str | Path, settings: TuneSettings, restart: bool = False) -> TuneState:
    """The folder's state when it was measured with the same settings; a fresh one with --restart or none there."""
    p = path_in(out_dir)
    fresh = TuneState(fingerprint=settings.fingerprint(), settings=settings)
    if restart or not p.is_file():
        return fresh
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        old = TuneState.model_validate(data)
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise SpecplugError(
            f"{p} is not a readable tune state ({type(exc).__name__}).",
            "Pass --restart to measure from scratch, or another -o folder.",
        ) from None
    if old.kind != STATE_KIND:
        raise SpecplugError(f"{p} is not a specplug tune state.", "Pass another -o folder.")
    if old.fingerprint != fresh.fingerprint:
        changed = sorted(
            k for k, v in settings.model_dump(mode="json").items()
            if k not in NOT_MEASURED and old.settings.model_dump(mode="json").get(k) != v
        )
        raise SpecplugError(
            f"{Path(out_dir)} holds a tune measured with other settings ({', '.join(changed) or 'the fingerprint'} "
            "differ), so it cannot be resumed.",
            "Pass --restart to discard it, or another -o folder.",
        )
    # Budget and candidate count may change between runs: they only choose which trials run.
    old.settings = settings
    return old


def save(out_dir: str | Path, state: TuneState) -> Path:
    from specplug.fileio import write_atomic

    return write_atomic(path_in(out_dir), state.model_dump_json(indent=1) + "\n")
