"""The adapter protocol and registry: one plugin per serving stack, found through entry points.

An adapter turns a :class:`~specplug.plan.Plan` into a :class:`LaunchSpec` (argv, environment, files) for
one stack at one version. Adapters register under the entry-point group ``specplug.adapters``; a
third-party package adds a stack by shipping a module and an entry point. A plugin that fails to load is
reported by ``specplug stacks``, never fatal.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from specplug.errors import StackError

if TYPE_CHECKING:
    from specplug.plan import Plan

ENTRY_POINT_GROUP = "specplug.adapters"
# When nothing is installed, recommend and render for the most widely deployed stack.
DEFAULT_STACK = "vllm"
# Preference order among installed stacks for the default.
STACK_PREFERENCE = ("vllm", "sglang", "trtllm", "llamacpp", "tgi", "embedded")


class LaunchSpec(BaseModel):
    """Everything needed to start a server: argv (never a shell string), environment, files to write."""

    stack: str
    stack_version: str | None = None
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="Non-secret variables to set.")
    env_passthrough: list[str] = Field(
        default_factory=list, description="Secret variables read from the caller's environment at launch."
    )
    files: dict[str, str] = Field(default_factory=dict, description="Relative path -> content, written first.")
    health_url: str | None = None
    metrics_url: str | None = None
    base_url: str | None = None
    notes: list[str] = Field(default_factory=list)


@runtime_checkable
class Adapter(Protocol):
    name: str  # canonical stack name: vllm, sglang, ...
    display_name: str
    install_hint: str  # the command that installs the stack

    def installed_version(self) -> str | None:
        """The version installed here, or None (must be cheap and never import the stack itself)."""

    def methods(self, version: str | None) -> dict[str, str | None]:
        """Canonical methods -> None if supported at ``version``, else the reason it is not."""

    def render(self, plan: Plan) -> LaunchSpec:
        """The launch spec for ``plan``; StackError when the plan asks what this stack/version can't do."""


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
                raise TypeError("does not implement the Adapter protocol (name, install_hint, installed_version, methods, render)")
            found.setdefault(ep.name, obj)
        except Exception as exc:  # a broken third-party plugin must not take specplug down
            broken.append(BrokenPlugin(name=ep.name, target=ep.value, error=f"{type(exc).__name__}: {exc}"))
    return found, tuple(broken)


def adapters() -> dict[str, Adapter]:
    return dict(_load()[0])


def broken_plugins() -> list[BrokenPlugin]:
    return list(_load()[1])


def get_adapter(name: str) -> Adapter:
    found = adapters()
    if name not in found:
        broken = {b.name: b for b in broken_plugins()}
        if name in broken:
            raise StackError(f"The '{name}' adapter failed to load: {broken[name].error}.", "Reinstall specplug or that plugin.")
        raise StackError(f"Unknown stack '{name}'.", f"Known stacks: {', '.join(sorted(found))}.")
    return found[name]


def default_stack() -> str:
    """The best installed stack, else vLLM."""
    found = adapters()
    for name in STACK_PREFERENCE:
        a = found.get(name)
        if a is not None and name != "embedded" and a.installed_version():
            return name
    return DEFAULT_STACK


# ---------------------------------------------------------------------------------------------- versions


def version_key(version: str) -> tuple[int, ...]:
    """Comparable key for release strings: '0.10.1.post1' -> (0, 10, 1), 'b4600' -> (4600,)."""
    nums = re.findall(r"\d+", version.split("+")[0].split(".dev")[0].split("rc")[0])
    return tuple(int(n) for n in nums[:4]) or (0,)


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
