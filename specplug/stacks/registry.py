"""The one registry of stacks: the built-in adapters and plugins found through the ``specplug.adapters`` entry
points, the default stack and the preference order; a plugin that fails to load is reported, never fatal."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from pydantic import BaseModel

from specplug.errors import StackError
from specplug.stacks.protocol import Adapter

if TYPE_CHECKING:
    pass


ENTRY_POINT_GROUP = "specplug.adapters"
# When nothing is installed, recommend and render for the most widely deployed stack.
DEFAULT_STACK = "vllm"
# Preference order among installed stacks for the default.
STACK_PREFERENCE = ("vllm", "sglang", "trtllm", "llamacpp", "tgi", "embedded")


class BrokenPlugin(BaseModel):
    name: str
    target: str
    error: str


@cache
def _load() -> tuple[dict[str, Adapter], tuple[BrokenPlugin, ...]]:
    from importlib.metadata import entry_points

    found: dict[str, Adapter] = {}
    broken: list[BrokenPlugin] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if not isinstance(obj, Adapter):
                raise TypeError("does not implement the Adapter protocol (subclass specplug.stacks.base.BaseAdapter)")
            found.setdefault(ep.name, obj)
        except Exception as exc:  # a broken third-party plugin must not take specplug down
            broken.append(BrokenPlugin(name=ep.name, target=ep.value, error=f"{type(exc).__name__}: {exc}"))
    return found, tuple(broken)


def adapters() -> dict[str, Adapter]:
    return dict(_load()[0])


def broken_plugins() -> list[BrokenPlugin]:
    return list(_load()[1])


# The stacks that ship with specplug load directly: scanning every installed distribution's entry points
# costs start-up time and is only needed to find third-party stacks (and for 'specplug stacks').
BUILTIN = {name: f"specplug.adapters.{name}" for name in STACK_PREFERENCE}


@cache
def _builtin(name: str) -> Adapter | None:
    import importlib

    try:
        obj = importlib.import_module(BUILTIN[name]).adapter
    except Exception:
        return None  # the entry-point scan below reports why
    return obj if isinstance(obj, Adapter) else None


def stacks_with(control: str) -> str:
    """The stacks whose adapters render ``control`` at some version, for a message."""
    names = []
    for name in stack_names():
        try:
            a = get_adapter(name)
        except StackError:
            continue
        if control in getattr(a, "control_table", {}):
            names.append(a.display_name)
    return " or ".join(names) or "another stack"


def stack_names() -> tuple[str, ...]:
    """Every registered stack: the built-in ones in preference order, then installed plugins."""
    return (*STACK_PREFERENCE, *sorted(n for n in adapters() if n not in BUILTIN))


def is_stack(name: str) -> bool:
    """Whether ``name`` is a registered stack (built-ins answer without scanning entry points)."""
    return name in BUILTIN or name in adapters()


def get_adapter(name: str) -> Adapter:
    if name in BUILTIN and (builtin := _builtin(name)) is not None:
        return builtin
    found = adapters()
    if name not in found:
        broken = {b.name: b for b in broken_plugins()}
        if name in broken:
            raise StackError(f"The '{name}' adapter failed to load: {broken[name].error}.", "Reinstall specplug or that plugin.")
        raise StackError(f"Unknown stack '{name}'.", f"Known stacks: {', '.join(sorted(found))}.")
    return found[name]


def default_stack() -> str:
    """The best installed stack, else vLLM."""
    for name in STACK_PREFERENCE:
        a = _builtin(name)
        if a is not None and not a.fallback_only and not _legacy(a) and a.installed_version():
            return name
    return DEFAULT_STACK


def _legacy(adapter: Adapter) -> str | None:
    """What a stack no longer maintained says about itself (its compatibility table's ``legacy``), else None."""
    table = getattr(adapter, "compatibility", None)
    return table().legacy if callable(table) else None
