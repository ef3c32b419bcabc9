"""Atomic file writes (a reader sees the old file or the new one, never half of one) and JSON reads that fail
with a clear error."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML by a safe loader: libyaml's C one where PyYAML has it (about 10x faster than pure
    Python on the shipped tables, which every command reads at start), else PyYAML's own. Raises yaml.YAMLError."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def user_path(text: str) -> Path:
    """A path as the user typed it, with ~ expanded where it names a home (``~nobody'`` stays as typed)."""
    return Path(os.path.expanduser(text))


def write_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder and an atomic rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def write_atomic_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Binary counterpart of :func:`write_atomic` (plots, caches)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def read_json_object(path: str | os.PathLike[str], default_name: str, missing_hint: str | None = None) -> tuple[Path, dict[str, Any]]:
    """``path`` (or ``path/default_name`` for a folder) read as a JSON object: (the file read, its data). A missing,
    unreadable or non-object file is a SpecplugError naming it."""
    from specplug.errors import SpecplugError

    p = Path(path)
    if p.is_dir():
        p = p / default_name
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecplugError(f"{p} does not exist.", missing_hint) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecplugError(f"Cannot read {p}: {exc}.") from None
    if not isinstance(data, dict):
        raise SpecplugError(f"{p} holds no JSON object.", missing_hint)
    return p, data
