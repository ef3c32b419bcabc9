"""Version windows: which spelling of a field or method a stack takes at which release."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specplug.errors import StackError
from specplug.versions import version_key

if TYPE_CHECKING:
    pass


def version_at_least(version: str | None, floor: str) -> bool:
    return version is not None and version_key(version) >= version_key(floor)


def pick_floor(version: str | None, floors: list[str]) -> str:
    """The highest floor not above ``version`` (None: the newest floor). StackError if below all floors."""
    ordered = sorted(floors, key=version_key)
    if version is None:
        return ordered[-1]
    eligible = [f for f in ordered if version_key(f) <= version_key(version)]
    if not eligible:
        raise StackError(
            f"Version {version} is older than any this adapter knows (oldest: {ordered[0]}).",
            f"Upgrade the stack, or render for a known version with --stack-version {ordered[0]} or newer.",
        )
    return eligible[-1]


def version_in(version: str | None, since: str | None, until: str | None) -> bool:
    """``since <= version < until`` (open ends allowed); an unknown version counts as the newest."""
    if version is None:
        return until is None
    if since is not None and version_key(version) < version_key(since):
        return False
    return not (until is not None and version_key(version) >= version_key(until))


# ---------------------------------------------------------------------------------------------- support data


@dataclass(frozen=True)
class Window:
    """One version range where a stack spells a canonical method one way.

    ``value`` is the stack's own name for it (e.g. vLLM's ``"mtp"``, SGLang's ``"NGRAM"``); ``until`` is the
    first version without this spelling; ``source`` says where the boundary comes from.
    """

    value: str
    since: str | None = None
    until: str | None = None
    source: str = ""


def spelling(table: dict[str, tuple[Window, ...]], key: str, version: str | None) -> Window | None:
    """The window of ``table[key]`` that covers ``version`` (None: not available at that version)."""
    for w in table.get(key, ()):
        if version_in(version, w.since, w.until):
            return w
    return None


def describe_windows(windows: tuple[Window, ...]) -> str:
    parts = []
    for w in windows:
        lo = w.since or "the oldest known release"
        parts.append(f"{lo} to before {w.until}" if w.until else f"{lo} and newer")
    return ", ".join(parts) if parts else "no version"
