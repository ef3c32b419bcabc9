"""What the chosen serving stack can do, resolved once per plan and handed to the policy as plain data.

The policy never asks an adapter: this module does, and the planner receives a :class:`StackCapabilities`
(methods it offers at the version planned for, whether it switches k per batch size, where the version
came from).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specplug.errors import StackError


@dataclass(frozen=True)
class StackCapabilities:
    name: str
    version: str | None  # the version planned for
    version_source: str  # 'flag', 'pinned', 'installed' or 'unknown'
    methods: dict[str, str | None] = field(default_factory=dict)  # canonical method -> None (offered) or why not
    schedules: bool = False  # switches k per running batch size (else a schedule's k=0 ranges are advisory)

    def why_not(self, method: str) -> str | None:
        return self.methods.get(method, f"{self.name} does not offer {method}")


def default_stack() -> str:
    from specplug.adapter import default_stack as best_installed

    return best_installed()


def resolve(
    name: str, pinned: str | None = None, flag: str | None = None, offered: list[str] | None = None
) -> StackCapabilities:
    """Capabilities of stack ``name`` at ``flag`` (--stack-version), else ``pinned`` (specplug.yaml), else the
    installed version. ``offered`` stands in for an adapter that cannot be loaded (the policy's method list)."""
    from specplug.adapter import get_adapter

    installed: str | None = None
    try:
        adapter = get_adapter(name)
        installed = adapter.installed_version()
    except StackError:
        adapter = None
    version, source = (flag, "flag") if flag else (pinned, "pinned") if pinned else (installed, "installed") if installed else (None, "unknown")
    if adapter is not None:
        methods = dict(adapter.methods(version))
        schedules = adapter.supports_schedule(version)
    else:
        from specplug.config import METHODS

        methods = {m: (None if offered is None or m in offered else f"{name} does not offer {m}") for m in METHODS if m != "none"}
        schedules = False
    return StackCapabilities(name, version, source, methods, schedules)
