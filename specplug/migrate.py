"""Schema migrations for specplug.yaml: rewrite an old file to the current schema, keeping its comments.

PyYAML drops comments on a round trip and ruamel.yaml is not a dependency, so each migration is a set of
line-preserving text edits located through PyYAML's node marks (the exact line and column of every key).
Each migration also states the same change on parsed data; after editing, the new text is parsed and must
equal the data migration, so an edit that went wrong is an error, never a silently different file.

Schema history:

- **v0** (pre-release, before 0.1): hardware keys at the top level (``gpu:``, ``num_gpus:``,
  ``gpus_per_node:``) and the draft length spelled ``speculation.draft_tokens``. Such files say
  ``version: 0``, or say no version and use one of those keys.
- **v1** (current): hardware under ``hardware:``; ``speculation.num_speculative_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplug.config import SCHEMA_VERSION, parse_config
from specplug.errors import ConfigError
from specplug.fileio import write_atomic

_V0_TOP_HARDWARE = ("gpu", "num_gpus", "gpus_per_node")


@dataclass
class MigrationResult:
    path: str
    from_version: int
    to_version: int
    text: str
    changes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.from_version != self.to_version


@dataclass(frozen=True)
class Migration:
    from_version: int
    summary: str
    apply_data: Callable[[dict[str, Any]], dict[str, Any]]
    apply_text: Callable[[str, str], tuple[str, list[str]]]


# ---------------------------------------------------------------------------------------------- helpers


def _load(text: str, filename: str) -> tuple[Any, Any]:
    import yaml

    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark else filename
        raise ConfigError(f"{where}: invalid YAML; cannot migrate.", "Fix the syntax first.") from None


def _entry(node: Any, key: str) -> tuple[Any, Any] | None:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    return next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def detect_version(data: Any) -> int:
    """The schema version a parsed file is written in."""
    if not isinstance(data, dict):
        return SCHEMA_VERSION
    v = data.get("version")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    spec = data.get("speculation")
    if any(k in data for k in _V0_TOP_HARDWARE) or (isinstance(spec, dict) and "draft_tokens" in spec):
        return 0
    return SCHEMA_VERSION


def _set_version_text(lines: list[str], root: Any, new: int) -> str:
    entry = _entry(root, "version")
    if entry is not None:
        k, v = entry
        ln = lines[v.start_mark.line]
        lines[v.start_mark.line] = ln[: v.start_mark.column] + str(new) + ln[v.end_mark.column :]
        return f"version: {v.value} -> {new}"
    # No version line: add one after the leading comment block so the file says what it is.
    at = 0
    while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
        at += 1
    lines.insert(at, f"version: {new}\n")
    return f"added 'version: {new}'"


# ---------------------------------------------------------------------------------------------- v0 -> v1


def _v0_data(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    hw = {k: out.pop(k) for k in _V0_TOP_HARDWARE if k in out}
    if hw:
        out["hardware"] = hw
    spec = out.get("speculation")
    if isinstance(spec, dict) and "draft_tokens" in spec:
        spec = {("num_speculative_tokens" if k == "draft_tokens" else k): v for k, v in spec.items()}
        out["speculation"] = spec
    out["version"] = 1
    return out


def _v0_text(text: str, filename: str) -> tuple[str, list[str]]:
    import yaml

    data, root = _load(text, filename)
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise ConfigError(f"{filename}: the top level is not a block mapping; migrate this file by hand.")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    changes: list[str] = []

    # Rename speculation.draft_tokens in place (block or flow style): only the key text changes.
    spec = _entry(root, "speculation")
    if spec is not None:
        dt = _entry(spec[1], "draft_tokens")
        if dt is not None:
            k = dt[0]
            ln = lines[k.start_mark.line]
            lines[k.start_mark.line] = ln[: k.start_mark.column] + "num_speculative_tokens" + ln[k.end_mark.column :]
            changes.append(
                f"line {k.start_mark.line + 1}: speculation.draft_tokens renamed speculation.num_speculative_tokens"
            )

    # Move top-level gpu / num_gpus / gpus_per_node under hardware:, each line with its own comment.
    moved = [(key, _entry(root, key)) for key in _V0_TOP_HARDWARE]
    moved = [(key, e) for key, e in moved if e is not None]
    if moved:
        hw = _entry(root, "hardware")
        if hw is not None and not (isinstance(hw[1], yaml.ScalarNode) and hw[1].value == "auto"):
            raise ConfigError(
                f"{filename}:{hw[0].start_mark.line + 1}: the file has both 'hardware:' and top-level "
                f"{', '.join(k + ':' for k, _ in moved)}; merge them under 'hardware:' by hand."
            )
        block: list[str] = []
        drop: set[int] = set()
        for key, (k, v) in moved:
            if k.start_mark.line != v.end_mark.line or k.start_mark.column != 0:
                raise ConfigError(f"{filename}:{k.start_mark.line + 1}: '{key}:' spans several lines; migrate it by hand.")
            block.append("  " + lines[k.start_mark.line].lstrip())
            drop.add(k.start_mark.line)
            changes.append(f"line {k.start_mark.line + 1}: top-level {key}: moved to hardware.{key}")
        first = min(drop)
        if hw is not None:  # 'hardware: auto' gives way to the named hardware, keeping its comment
            hl = hw[0].start_mark.line
            rest = lines[hl][hw[1].end_mark.column :]
            comment = rest.strip()
            lines[hl] = "hardware:" + (f"  {comment}" if comment else "") + "\n"
            drop_first = hl
            changes.append(f"line {hl + 1}: hardware: auto replaced by the named GPUs")
            insert_at = hl + 1
        else:
            drop_first = None
            insert_at = first
        new_lines: list[str] = []
        for i, ln in enumerate(lines):
            if i == insert_at:
                if drop_first is None:
                    new_lines.append("hardware:\n")
                new_lines.extend(block)
            if i not in drop:
                new_lines.append(ln)
        if insert_at >= len(lines):
            if drop_first is None:
                new_lines.append("hardware:\n")
            new_lines.extend(block)
        lines = new_lines
        # Positions moved; re-read the nodes for the version edit.
        root = yaml.compose("".join(lines))

    changes.append(_set_version_text(lines, root, 1))
    return "".join(lines), changes


MIGRATIONS: dict[int, Migration] = {
    0: Migration(
        from_version=0,
        summary="v0 -> v1: hardware keys moved under 'hardware:'; speculation.draft_tokens renamed num_speculative_tokens",
        apply_data=_v0_data,
        apply_text=_v0_text,
    ),
}


# ---------------------------------------------------------------------------------------------- API


def migrate_text(text: str, filename: str = "specplug.yaml") -> MigrationResult:
    """Bring ``text`` to the current schema. Already-current text comes back unchanged."""
    data, _ = _load(text, filename)
    start = detect_version(data)
    if start > SCHEMA_VERSION:
        raise ConfigError(
            f"{filename}: schema version {start} is newer than this specplug understands ({SCHEMA_VERSION}).",
            "Upgrade specplug.",
        )
    if start == SCHEMA_VERSION:
        return MigrationResult(filename, start, start, text)
    version, changes = start, []
    expected = data if isinstance(data, dict) else {}
    while version < SCHEMA_VERSION:
        mig = MIGRATIONS.get(version)
        if mig is None:
            raise ConfigError(f"{filename}: no migration from schema version {version}.", "Rewrite the file with 'specplug init'.")
        text, steps = mig.apply_text(text, filename)
        expected = mig.apply_data(expected)
        changes.append(mig.summary)
        changes.extend(f"  {s}" for s in steps)
        version += 1
    got, _ = _load(text, filename)
    if json.dumps(got, sort_keys=True, default=str) != json.dumps(expected, sort_keys=True, default=str):
        raise ConfigError(
            f"{filename}: the comment-preserving rewrite did not produce the migrated data (an unusual layout).",
            "Migrate this file by hand; the changes needed are: " + "; ".join(c.strip() for c in changes),
        )
    parse_config(text, filename)  # the result must load under the current schema
    return MigrationResult(filename, start, version, text, changes)


def migrate_file(path: str | Path, *, write: bool = True) -> MigrationResult:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read {p}: {exc.strerror}.") from None
    result = migrate_text(text, str(p))
    if write and result.changed:
        write_atomic(p, result.text)
    return result


def needs_migration(text: str) -> int | None:
    """The old schema version of ``text`` when a migration applies, else None (never raises)."""
    try:
        import yaml

        v = detect_version(yaml.safe_load(text))
    except Exception:
        return None
    return v if v < SCHEMA_VERSION else None
