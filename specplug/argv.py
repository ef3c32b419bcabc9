"""Reading a stack's command line: the one rule for whether an argument list sets a flag. The adapters use it so
a value the user wrote is not repeated; :mod:`specplug.compat` uses it to read features off ``serve.extra_args``
(so it sits below both, where the policy's data may reach it)."""

from __future__ import annotations

from collections.abc import Iterable


def has_flag(args: Iterable[str], *names: str) -> bool:
    """Whether ``args`` set one of ``names``: written alone or as ``--flag=value`` (``--no-flag``, which turns it
    off, and a longer flag that merely starts with the name do not count)."""
    return last_of(args, *names) is not None


def last_of(args: Iterable[str], *names: str) -> str | None:
    """The one of ``names`` that ``args`` set last (as has_flag reads a setting), or None: of a flag and the flag
    that undoes it, the later one counts."""
    last = None
    for a in args:
        for n in names:
            if a == n or a.startswith(n + "="):
                last = n
    return last


def sets(args: Iterable[str], name: str, value: str | None) -> bool:
    """Whether ``args`` set flag ``name`` (``value`` None) or set it to ``value`` (``--flag value`` or
    ``--flag=value``; the last setting counts, as argparse reads it; whole numbers compare as numbers)."""
    args = list(args)
    if value is None:
        return has_flag(args, name)
    last = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            last = args[i + 1]
        elif a.startswith(name + "="):
            last = a[len(name) + 1 :]
    return last == value or (last is not None and _as_int(last) is not None and _as_int(last) == _as_int(value))


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
