"""The tune a lock was made from: a ``tune:`` section in specplug.lock.yaml naming the evidence (tune.json,
by digest) and what the measurements depended on, so ``check`` can say when that evidence is older than the
inputs (the model, serving options, workload or traffic file changed, or the lock pins another stack version
than the one measured)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specplug.config import Config

# What tune writes into specplug.yaml: changing these afterwards does not make the measurements stale.
WRITTEN_KEYS = ("speculation", "calibration")
# Inputs that cannot change a measurement: tune serves on its own loopback port, with or without a key, and
# never falls back.
UNMEASURED_KEYS = (("serve", "host"), ("serve", "port"), ("serve", "api_key_env"), ("fallback",))


class TuneRef(BaseModel):
    evidence: str = Field(description="tune.json, relative to the lock's folder.")
    evidence_digest: str
    inputs: str = Field(description="Digest of what the measurements depended on (measured_inputs).")
    stack: str
    stack_version: str | None = None
    tuned_at: str
    speculation: dict[str, Any] = Field(description="The speculation: block tune wrote.")


class TuneFinding(BaseModel):
    severity: Literal["problem", "warning"]
    file: str
    key: str
    message: str
    fix: str


def _digest(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def measured_spec(cfg: Config) -> dict[str, Any]:
    """The config as validated data, less what tune itself writes and what cannot change a measurement. Fields
    at their default are left out, so a field a later specplug adds does not make older evidence stale."""
    data = cfg.model_dump(mode="json", exclude_defaults=True)
    for k in WRITTEN_KEYS:
        data.pop(k, None)
    for path in UNMEASURED_KEYS:
        node = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return data


def measured_inputs(cfg: Config, config_path: str | Path) -> dict[str, Any]:
    """What a tune's measurements depend on: the config (less what tune writes) and the traffic file's bytes."""
    from specplug.lock import resolve_traffic
    from specplug.traffic import file_digest

    t = resolve_traffic(cfg.workload.traffic, config_path) if cfg.workload.traffic else None
    return {"spec": measured_spec(cfg), "traffic": file_digest(t) if t else None}


def make_ref(evidence: Path, lock_path: Path, inputs: dict[str, Any], stack: str, stack_version: str | None,
             tuned_at: str, speculation: dict[str, Any]) -> TuneRef:
    try:
        rel = Path(os.path.relpath(evidence.resolve(), lock_path.resolve().parent)).as_posix()
    except ValueError:
        rel = str(evidence)
    return TuneRef(evidence=rel, evidence_digest=_digest(evidence.read_bytes()), inputs=_digest(inputs), stack=stack,
                   stack_version=stack_version, tuned_at=tuned_at, speculation=speculation)


def attach(lock_path: Path, ref: TuneRef) -> None:
    """Add (or replace) the lock's ``tune:`` section: through the lock model where it has the field (so a
    re-plan writes it the same way), else as a section after the rest, which is left byte for byte."""
    from specplug.fileio import write_atomic
    from specplug.lock import Lock, dump_lock, read_lock
    from specplug.tune.writeback import set_top_level

    if "tune" in Lock.model_fields:
        lock = read_lock(lock_path)
        write_atomic(lock_path, dump_lock(lock.model_copy(update={"tune": ref.model_dump(mode="json")})))
        return
    text = lock_path.read_text(encoding="utf-8")
    write_atomic(lock_path, set_top_level(text, "tune", ref.model_dump(mode="json")))


def read_ref(lock_path: Path) -> TuneRef | None:
    import yaml

    try:
        data = yaml.safe_load(lock_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    raw = data.get("tune") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        return None
    try:
        return TuneRef.model_validate(raw)
    except ValueError:
        return None


def tune_findings(cfg: Config, config_path: str | Path, lock_path: str | Path, locked_stack_version: str | None = None) -> list[TuneFinding]:
    """Why the tune evidence behind this lock no longer stands; empty when it does (or there is no tune)."""
    lp = Path(lock_path)
    ref = read_ref(lp)
    if ref is None:
        return []
    out: list[TuneFinding] = []
    fix = f"specplug tune -c {config_path} -o DIR (re-measure), then commit specplug.yaml and the lock"
    ev = (lp.parent / ref.evidence) if not Path(ref.evidence).is_absolute() else Path(ref.evidence)
    if not ev.is_file():
        out.append(TuneFinding(severity="problem", file=str(lp), key="tune.evidence",
                               message=f"the lock was made from a tune whose evidence {ref.evidence} is missing", fix=fix))
        return out
    if _digest(ev.read_bytes()) != ref.evidence_digest:
        out.append(TuneFinding(severity="problem", file=str(ev), key="tune.evidence",
                               message="tune.json changed since the lock was made from it", fix=fix))
        return out
    try:
        evidence = json.loads(ev.read_text(encoding="utf-8"))
        measured = evidence["inputs"]
    except (OSError, ValueError, KeyError, TypeError):
        out.append(TuneFinding(severity="problem", file=str(ev), key="tune.evidence",
                               message="tune.json is unreadable or has no 'inputs'", fix=fix))
        return out
    now = measured_inputs(cfg, config_path)
    if _digest(now) != ref.inputs:
        from specplug.lock import _flatten

        old, new = _flatten(measured.get("spec") or {}), _flatten(now["spec"])
        keys = sorted(k for k in set(old) | set(new) if old.get(k, "<unset>") != new.get(k, "<unset>"))
        if measured.get("traffic") != now["traffic"]:
            keys.append("the traffic file's contents")
        what = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "") or "the inputs"
        out.append(TuneFinding(severity="problem", file=str(config_path), key="tune",
                               message=f"the tune evidence ({ref.tuned_at}) is older than the inputs: {what} changed "
                                       "since it was measured", fix=fix))
    if locked_stack_version and ref.stack_version and _base_version(locked_stack_version) != _base_version(ref.stack_version):
        out.append(TuneFinding(severity="problem", file=str(lp), key="stack.version",
                               message=f"the lock pins {ref.stack} {locked_stack_version}, but the tune measured "
                                       f"{ref.stack_version}", fix=fix))
    spec = cfg.speculation.model_dump(mode="json", exclude_none=True) if not isinstance(cfg.speculation, str) else cfg.speculation
    if spec != ref.speculation:
        out.append(TuneFinding(severity="warning", file=str(config_path), key="speculation",
                               message="speculation: is no longer what the tune chose; the lock's plan is not the "
                                       "measured one", fix=fix))
    return out


def _base_version(v: str) -> str:
    return v.split("+", 1)[0]
