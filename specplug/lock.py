"""specplug.lock.yaml: the resolved plan committed next to specplug.yaml, and the drift check against it.

``specplug plan`` resolves every ``auto`` (technique, drafter, k, schedule, stack version, hardware) once and
writes the lock; ``render``, ``launch``, ``deploy`` and ``check`` then read the locked plan instead of
re-planning, so what a pull request reviews is what runs. The lock is deterministic: no timestamps, mapping
keys sorted, so the same inputs give byte-identical files and a re-plan that changes nothing shows no diff.

What counts as an input (each digested separately, so drift can say which one moved):

- ``config``: specplug.yaml as validated data (defaults filled in), so comments and key order are not drift;
- ``policy``: the merged, validated policy (shipped priors + ``policy:`` overrides);
- ``calibration``: the bytes of the calibration file, when one is named;
- ``catalog``: the bytes of the shipped model, drafter and GPU catalogs;
- ``hardware``: the hardware planned for (probed when ``hardware: auto``), as a fingerprint;
- ``traffic``: the bytes of the traffic file (``workload.traffic`` or ``specplug plan --traffic``), when one is
  named; its path is kept in ``traffic_file`` (relative to the lock's folder) so ``check`` can re-read it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specplug.catalog.hub import named_revision
from specplug.config import Config, load_config
from specplug.errors import ConfigError, SpecplugError, invalid
from specplug.fileio import user_path, write_atomic
from specplug.plan import Plan
from specplug.probe import Hardware

LOCK_NAME = "specplug.lock.yaml"
# The newest this specplug reads; a lock is written at the oldest that holds what it says. Version 2: the plan
# serves its model or drafter at a Hub revision, which a version-1 reader drops or misrenders.
LOCK_VERSION = 2
_CATALOG_FILES = ("models.csv", "drafters.csv", "gpus.csv")
_HEADER = (
    "# specplug.lock.yaml: the plan resolved from {config}. Written by 'specplug plan'; do not edit by hand.\n"
    "# Commit it with {config}. 'specplug check' fails when the two disagree; re-plan with 'specplug plan -c {config}'.\n"
)


class _LockModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LockInputs(_LockModel):
    hash: str = Field(description="Digest over every input below; equal hashes mean the plan would not change.")
    config: str
    policy: str
    calibration: str | None = None
    catalog: str
    hardware: str
    traffic: str | None = None
    traffic_file: str | None = Field(None, description="The traffic file planned from, relative to the lock's folder.")


class HardwareFingerprint(_LockModel):
    fingerprint: str
    gpu: str
    num_gpus: int
    memory_gb: float
    source: str


class Lock(_LockModel):
    lock_version: int = 1
    specplug_version: str
    config_file: str = Field(description="The specplug.yaml this lock was planned from, relative to the lock.")
    inputs: LockInputs
    hardware: HardwareFingerprint
    summary: dict[str, Any] = Field(description="The decision and predicted figures, for reviewers.")
    spec: dict[str, Any] = Field(description="specplug.yaml as validated data; drift is reported against it.")
    plan: Plan
    tune: dict[str, Any] | None = Field(
        None, description="The 'specplug tune' this lock was made from (specplug.tune.lockref.TuneRef): its evidence."
    )


class Drift(_LockModel):
    """One way the lock and its inputs disagree."""

    file: str
    key: str
    line: int | None = None
    locked: Any = None
    current: Any = None
    message: str

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


# ---------------------------------------------------------------------------------------------- digests


def _digest(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def lock_path_for(config_path: str | Path) -> Path:
    return Path(config_path).parent / LOCK_NAME


def spec_data(cfg: Config) -> dict[str, Any]:
    return cfg.model_dump(mode="json")


def resolve_calibration(cfg: Config, config_path: str | Path | None) -> Path | None:
    """The calibration file, relative to the config's folder first (where the lock lives), then the cwd."""
    if not cfg.calibration:
        return None
    p = user_path(cfg.calibration)
    if not p.is_absolute() and config_path is not None:
        beside = Path(config_path).parent / p
        if beside.is_file():
            return beside
    if not p.is_file():
        raise ConfigError(
            f"calibration: file '{cfg.calibration}' does not exist.",
            "Write one with 'specplug calibrate', or remove 'calibration:' from specplug.yaml.",
        )
    return p


def catalog_digest() -> str:
    from importlib import resources

    root = resources.files("specplug.catalog").joinpath("data")
    return _digest(b"".join(root.joinpath(n).read_bytes() for n in _CATALOG_FILES))


def policy_digest(cfg: Config) -> str:
    from specplug.policy.data import load_policy

    return _digest(load_policy(overrides=cfg.policy or None).model_dump(mode="json"))


def hardware_fingerprint(hw: Hardware) -> HardwareFingerprint:
    # 'note' and 'source' describe how the hardware was found, not what it is: not part of the fingerprint.
    ident = {"gpu": hw.gpu, "num_gpus": hw.num_gpus, "memory_gb": round(hw.memory_gb, 1)}
    return HardwareFingerprint(
        fingerprint=_digest(ident), gpu=hw.gpu, num_gpus=hw.num_gpus, memory_gb=round(hw.memory_gb, 1), source=hw.source
    )


def resolve_traffic(name: str | None, config_path: str | Path | None) -> Path | None:
    """The traffic file ``name``, relative to the config's folder first (where the lock lives), then the cwd."""
    if not name:
        return None
    p = user_path(name)
    if not p.is_absolute() and config_path is not None:
        beside = Path(config_path).parent / p
        if beside.is_file():
            return beside
    if not p.is_file():
        raise ConfigError(
            f"workload.traffic: file '{name}' does not exist.",
            "Point it at a JSONL log of requests and completions, or remove 'traffic:' from the workload.",
        )
    return p


def _traffic_name(path: Path, config_path: str | Path | None) -> str:
    # Kept relative to the lock's folder where it can be, so the lock reads the same on every checkout.
    import os

    if config_path is None or path.is_absolute() and not Path(config_path).is_absolute():
        return str(path)
    try:
        return Path(os.path.relpath(path.resolve(), Path(config_path).resolve().parent)).as_posix()
    except ValueError:  # another drive (Windows)
        return str(path)


def compute_inputs(
    cfg: Config, config_path: str | Path | None, hardware: Hardware, traffic: str | Path | None = None
) -> LockInputs:
    from specplug.traffic import file_digest

    cal = resolve_calibration(cfg, config_path)
    parts = {
        "config": _digest(spec_data(cfg)),
        "policy": policy_digest(cfg),
        "calibration": _digest(cal.read_bytes()) if cal else None,
        "catalog": catalog_digest(),
        "hardware": hardware_fingerprint(hardware).fingerprint,
    }
    tpath = resolve_traffic(str(traffic) if traffic else cfg.workload.traffic, config_path)
    extra = {}
    if tpath is not None:
        # Only present when a traffic file is named, so locks planned without one keep their hash.
        parts["traffic"] = file_digest(tpath)
        extra["traffic_file"] = _traffic_name(tpath, config_path)
    return LockInputs(hash=_digest(parts), **parts, **extra)


# ---------------------------------------------------------------------------------------------- building


def _sorted(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _sorted(data[k]) for k in sorted(data)}
    if isinstance(data, list):
        return [_sorted(v) for v in data]
    return data


def summarize(plan: Plan) -> dict[str, Any]:
    s = plan.speculation
    p = plan.prediction
    out: dict[str, Any] = {
        "model": plan.model.ref,
        "stack": f"{plan.stack.name} {plan.stack.version or '(unpinned)'}",
        "hardware": f"{plan.hardware.num_gpus} x {plan.hardware.gpu}",
        "nodes": plan.parallelism.num_nodes,
        "method": s.method,
        "drafter": s.drafter,
        "num_speculative_tokens": s.num_speculative_tokens,
        "predicted_speedup": round(p.speedup, 3),
        "predicted_acceptance_length": round(p.acceptance_length, 3),
        "predicted_acceptance_rate": None if p.acceptance_rate is None else round(p.acceptance_rate, 3),
        "breakeven_batch_size": p.breakeven_batch_size,
        "memory_fits": None if plan.memory is None else plan.memory.fits,
    }
    if s.lossy:  # only then, so locks of lossless plans stay as they were
        out["lossy"] = f"verification {s.verification}: outputs differ from the target model's own"
    return out


def build_lock(cfg: Config, config_path: str | Path, plan: Plan, traffic: str | Path | None = None) -> Lock:
    from specplug import __version__

    return Lock(
        lock_version=LOCK_VERSION if plan.model.revision or named_revision(plan.speculation.drafter or "") else 1,
        specplug_version=__version__,
        config_file=Path(config_path).name,
        inputs=compute_inputs(cfg, config_path, plan.hardware, traffic),
        hardware=hardware_fingerprint(plan.hardware),
        summary=summarize(plan),
        spec=spec_data(cfg),
        plan=plan,
        tune=_previous_tune(lock_path_for(config_path)),
    )


def _previous_tune(path: Path) -> dict[str, Any] | None:
    """A re-plan keeps the tune the lock was made from: 'check' then says whether its evidence still stands."""
    if not path.is_file():
        return None
    try:
        return read_lock(path).tune
    except ConfigError:
        return None


def dump_lock(lock: Lock) -> str:
    import yaml

    data = lock.model_dump(mode="json")
    # Traffic fields are left out when unset: locks planned without a traffic file read as they always did.
    for key in ("traffic", "traffic_file"):
        if data["inputs"].get(key) is None:
            data["inputs"].pop(key, None)
    if data["plan"].get("traffic") is None:
        data["plan"].pop("traffic", None)
    if data.get("tune") is None:  # locks not made from a tune read as they always did
        data.pop("tune", None)
    # Top-level order is for reading (what and why first); everything below is sorted for stable diffs.
    ordered = {k: (_sorted(data[k]) if k != "summary" else data[k]) for k in Lock.model_fields if k in data}
    body = yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False)
    return _HEADER.format(config=lock.config_file) + body


def parse_lock(text: str, filename: str = LOCK_NAME) -> Lock:
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: invalid YAML ({exc}).", "Re-create it with 'specplug plan'.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{filename}: not a specplug lock file.", "Re-create it with 'specplug plan'.")
    version = data.get("lock_version")
    if isinstance(version, int) and version > LOCK_VERSION:
        raise ConfigError(
            f"{filename}: lock_version {version} is newer than this specplug understands ({LOCK_VERSION}).",
            "Upgrade specplug to the version that wrote the lock.",
        )
    try:
        return Lock.model_validate(_without_unknown_keys(_split_in_parallelism(data)))
    except ValidationError as exc:
        raise invalid(exc, f"{filename} was written by another specplug version or edited",
                      "Re-create it with 'specplug plan'.") from None


def _split_in_parallelism(data: dict[str, Any]) -> dict[str, Any]:
    """Older locks kept the asked split in plan.serve beside plan.parallelism, and renders took serve's when set:
    fold it into parallelism, the plan's one source for it now."""
    from specplug.config import PARALLEL_KEYS

    plan = data.get("plan")
    serve = plan.get("serve") if isinstance(plan, dict) else None
    par = plan.get("parallelism", {}) if isinstance(plan, dict) else None
    if not isinstance(serve, dict) or not isinstance(par, dict) or not any(k in serve for k in PARALLEL_KEYS):
        return data
    data = copy.deepcopy(data)
    serve, par = data["plan"]["serve"], dict(data["plan"].get("parallelism", {}))
    tp, pp = serve.pop("tensor_parallel_size", None), serve.pop("pipeline_parallel_size", None)
    if tp:
        par["tensor_parallel_size"] = tp
    if isinstance(pp, int) and not isinstance(pp, bool) and pp >= 1:  # as the renders did: serve's when set
        par["pipeline_parallel_size"] = pp
    data["plan"]["parallelism"] = par
    return data


def _without_unknown_keys(data: dict[str, Any]) -> dict[str, Any]:
    """The lock minus keys this specplug does not know: a newer specplug of the same lock_version may add
    fields, and reading them must not fail (locks are written strictly, read leniently)."""
    from pydantic import ValidationError

    data = copy.deepcopy(data)
    for _ in range(64):
        try:
            Lock.model_validate(data)
            return data
        except ValidationError as exc:
            extra = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
            if not extra or not _drop(data, extra):
                return data  # what is left is a real error: the caller reports it
    return data


def _drop(data: Any, locs: list[tuple[Any, ...]]) -> bool:
    dropped = False
    for loc in locs:
        node = data
        for part in loc[:-1]:
            if isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            # union tags (e.g. 'SpeculationSpec') are not keys of the data: skip them
        if isinstance(node, dict) and loc[-1] in node:
            del node[loc[-1]]
            dropped = True
    return dropped


def read_lock(path: str | Path) -> Lock:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read {p}: {exc.strerror}.", "Write it with 'specplug plan'.") from None
    return parse_lock(text, str(p))


def plan_fresh(
    cfg: Config,
    config_path: str | Path,
    *,
    probed: Any = None,
    stack_version: str | None = None,
    traffic: str | Path | None = None,
) -> Plan:
    from specplug.planning import plan_from_config

    cal = resolve_calibration(cfg, config_path)
    if cal is not None and str(cal) != cfg.calibration:
        # The policy reads the file relative to the cwd; hand it the path as the lock resolved it.
        cfg = cfg.model_copy(update={"calibration": str(cal)})
    named = str(traffic) if traffic else cfg.workload.traffic
    tpath = resolve_traffic(named, config_path)
    if tpath is not None:
        cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"traffic": str(tpath)})})
    plan = plan_from_config(cfg, probed=probed, stack_version=stack_version)
    if tpath is not None:
        # The plan names the file as the lock does (relative to its folder), not as this cwd reached it.
        rel = _traffic_name(tpath, config_path)
        update: dict[str, Any] = {
            "workload": plan.workload.model_copy(update={"traffic": rel}),
            "reasons": [r.replace(str(tpath), rel) for r in plan.reasons],
            "warnings": [w.replace(str(tpath), rel) for w in plan.warnings],
        }
        if plan.traffic is not None:
            update["traffic"] = {**plan.traffic, "file": rel}
        plan = plan.model_copy(update=update)
    return plan


def write_lock(
    config_path: str | Path,
    *,
    probed: Any = None,
    stack_version: str | None = None,
    output: str | Path | None = None,
    traffic: str | Path | None = None,
) -> tuple[Lock, Path, bool]:
    """Plan ``config_path`` and write its lock (atomically). Returns the lock, its path and whether it changed.

    ``traffic`` names a traffic file in place of the config's ``workload.traffic``.
    """
    cfg = load_config(config_path)
    plan = plan_fresh(cfg, config_path, probed=probed, stack_version=stack_version, traffic=traffic)
    lock = build_lock(cfg, config_path, plan, traffic)
    target = Path(output) if output else lock_path_for(config_path)
    text = dump_lock(lock)
    old = target.read_text(encoding="utf-8") if target.is_file() else None
    if old != text:
        write_atomic(target, text)
    return lock, target, old != text


# ---------------------------------------------------------------------------------------------- drift


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def _unset(value: Any) -> Any:
    """``value`` with null entries (and what is left empty by dropping them) removed: None when nothing is set.

    A key that is null in one spec and missing from the other (a new optional key, a default, a mapping given in
    place of ``auto``) says the same thing: nothing set there."""
    if isinstance(value, dict):
        kept = {k: v for k, v in ((k, _unset(v)) for k, v in value.items()) if v is not None}
        return kept or None
    if isinstance(value, list):
        return [_unset(v) for v in value] or None
    return value


def spec_changes(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(key, locked, current) for each key whose value differs, deepest key where both sides are mappings.

    Values equal once unset entries are dropped (see :func:`_unset`) never differ; where one side is a mapping and
    the other is not (``speculation: auto`` became a mapping), the key itself differs, with the values as set."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for k in sorted(set(old) | set(new), key=str):
            out += spec_changes(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    a, b = _unset(old), _unset(new)
    return [] if a == b else [(prefix, a, b)]


def _drift_message(locked: Any, current: Any) -> str:
    def show(v: Any) -> str:
        return json.dumps(v, sort_keys=True)

    if current is None:
        return f"is unset now but the lock was planned with {show(locked)}"
    if locked is None:
        return f"is {show(current)} but the lock was planned without it"
    return f"is {show(current)} but the lock was planned with {show(locked)}"


def _line_for(text: str | None, key: str) -> int | None:
    if text is None:
        return None
    import yaml

    from specplug.config import _line_of

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None
    return _line_of(root, key.split("."))


def drift(cfg: Config, config_path: str | Path, lock: Lock, config_text: str | None = None) -> list[Drift]:
    """How ``lock`` disagrees with the current inputs; empty when it is up to date.

    The hardware is taken from the lock (CI machines have no GPUs to probe); a named ``hardware:`` is part of
    the config, so changing it is reported as config drift.
    """
    cfg_file = str(config_path)
    lock_file = str(lock_path_for(config_path))
    if config_text is None:
        try:
            config_text = Path(config_path).read_text(encoding="utf-8")
        except OSError:
            config_text = None
    hw = Hardware(
        gpu=lock.hardware.gpu, num_gpus=lock.hardware.num_gpus, memory_gb=lock.hardware.memory_gb, source=lock.hardware.source
    )
    out: list[Drift] = []
    # The traffic file: the config's, else the one the lock was planned with (specplug plan --traffic).
    tname = cfg.workload.traffic or lock.inputs.traffic_file
    tpath: Path | None = None
    if tname:
        try:
            tpath = resolve_traffic(tname, config_path)
        except ConfigError:
            out.append(Drift(
                file=cfg_file if cfg.workload.traffic else lock_file,
                key="workload.traffic",
                line=_line_for(config_text, "workload.traffic") if cfg.workload.traffic else None,
                locked=lock.inputs.traffic,
                message=f"the traffic file '{tname}' the lock was planned with is missing",
            ))
    base = cfg
    if tname and tpath is None:  # reported above; digest the rest without it
        base = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"traffic": None})})
    now = compute_inputs(base, config_path, hw, tpath)
    if now.config != lock.inputs.config:
        now_spec = spec_data(cfg)
        changed = spec_changes(lock.spec, now_spec)
        for key, locked, current in changed:
            out.append(
                Drift(
                    file=cfg_file,
                    key=key,
                    line=_line_for(config_text, key),
                    locked=locked,
                    current=current,
                    message=_drift_message(locked, current),
                )
            )
        if not changed and lock.spec != now_spec:
            # Only unset keys differ: this specplug reads the config with keys (defaults) the lock's did not record.
            out.append(Drift(
                file=lock_file, key="spec",
                message=f"nothing set in the config changed, but the lock (written by specplug {lock.specplug_version}) "
                        "recorded other unset keys than this specplug reads",
            ))
        elif not changed:  # same data, different digest: the lock was edited by hand
            out.append(Drift(file=lock_file, key="inputs.config", message="the config digest in the lock does not match its spec"))
    if now.policy != lock.inputs.policy:
        out.append(
            Drift(
                file=cfg_file if cfg.policy else lock_file,
                key="policy",
                line=_line_for(config_text, "policy") if cfg.policy else None,
                message="the policy changed since the lock was planned (a 'policy:' override or specplug's shipped priors)",
            )
        )
    if now.calibration != lock.inputs.calibration:
        out.append(
            Drift(
                file=str(resolve_calibration(cfg, config_path) or cfg_file),
                key="calibration",
                line=None,
                message="the calibration file changed since the lock was planned",
            )
        )
    if tpath is not None and now.traffic != lock.inputs.traffic:
        out.append(
            Drift(
                file=str(tpath),
                key="workload.traffic",
                locked=lock.inputs.traffic,
                current=now.traffic,
                message=(
                    "the traffic file changed since the lock was planned" if lock.inputs.traffic
                    else "a traffic file is named now, but the lock was planned without one"
                )
                + f" ({(lock.inputs.traffic or 'none')[:19]} -> {(now.traffic or '')[:19]}): its measured acceptance may differ",
            )
        )
    elif tpath is None and not tname and lock.inputs.traffic:
        out.append(Drift(file=lock_file, key="workload.traffic", locked=lock.inputs.traffic,
                         message="the lock was planned with a traffic file, but none is named now"))
    if now.catalog != lock.inputs.catalog:
        out.append(
            Drift(
                file=lock_file,
                key="inputs.catalog",
                message=f"specplug's model/GPU catalog changed (lock written by specplug {lock.specplug_version})",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------- the hook


def locked_plan(config_path: str | Path) -> Plan | None:
    """The plan from the lock beside ``config_path`` when that lock exists and matches its inputs, else None.

    A lock that exists but has drifted raises: running something other than what was reviewed is worse than
    stopping, and the fix is one command.
    """
    lp = lock_path_for(config_path)
    if not lp.is_file():
        return None
    cfg = load_config(config_path)
    lock = read_lock(lp)
    problems = drift(cfg, config_path, lock)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecplugError(
            f"{lp} is out of date: {first.where()}: {first.key} {first.message}{more}.",
            f"Re-plan with 'specplug plan -c {config_path}' and review the lock diff, or delete {lp} to plan on the fly.",
        )
    return lock.plan


def plan_for(config_path: str | Path, *, probed: Any = None, stack_version: str | None = None) -> Plan:
    """What render and launch call: the locked plan when specplug.lock.yaml sits beside the config and
    matches it; a fresh plan when there is no lock. A stale lock is an error (see :func:`locked_plan`)."""
    plan = locked_plan(config_path)
    if plan is not None:
        if stack_version and plan.stack.version and stack_version != plan.stack.version:
            raise SpecplugError(
                f"The lock pins {plan.stack.name} {plan.stack.version}, but --stack-version {stack_version} was given.",
                "Drop --stack-version, or set stack.version in specplug.yaml and re-plan.",
            )
        return plan
    return plan_fresh(load_config(config_path), config_path, probed=probed, stack_version=stack_version)
