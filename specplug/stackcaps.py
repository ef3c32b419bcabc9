"""What a registered stack can do at a version, read off its adapter once: the only bridge from the adapter
registry to the plain :class:`~specplug.capabilities.StackCapabilities` the policy receives."""

from __future__ import annotations

from specplug.capabilities import RESEARCH_CODE, StackCapabilities, research_code
from specplug.compat import EMPTY, CompatTable
from specplug.stacks.registry import default_stack, get_adapter

__all__ = ["compat_table", "declared", "default_stack", "resolve"]


def resolve(name: str, pinned: str | None = None, flag: str | None = None) -> StackCapabilities:
    """Capabilities of stack ``name`` at ``flag`` (--stack-version), else ``pinned`` (specplug.yaml), else the
    installed version."""
    if name == RESEARCH_CODE:
        return research_code()
    installed = None if flag or pinned else get_adapter(name).installed_version()
    version, source = (flag, "flag") if flag else (pinned, "pinned") if pinned else (installed, "installed") if installed else (None, "unknown")
    return declared(name, version, source)


def declared(name: str, version: str | None = None, source: str = "unknown") -> StackCapabilities:
    """What stack ``name``'s adapter declares at ``version``, without asking what is installed (the validator
    checks a plan whose version is already settled)."""
    if name == RESEARCH_CODE:
        return research_code()
    adapter = get_adapter(name)
    return StackCapabilities(
        name,
        version,
        source,
        dict(adapter.methods(version)),
        adapter.supports_schedule(version),
        adapter.trees,
        adapter.spec_running_cap,
        adapter.max_batch,
        getattr(adapter, "max_batch_rules", ()),  # a plugin written before the attribute: max_batch alone
        adapter.cost_profile,
        adapter.parallel_draft_formats(version),
        adapter.schedule_methods(version),
        adapter.vocab_mismatch,
        adapter.vocab_slack,
        frozenset(name for name, why in adapter.controls(version).items() if why is None),
        adapter.draft_tp,
        adapter.reserves_full_context,
        getattr(adapter, "runs_on_cpu", False),  # a plugin written before the attribute: GPU only
        compat_table(adapter).rows,
        compat_table(adapter).flags,
        vocab_bridge(adapter, version),
        mixes_prefill=mixes_prefill(adapter, version),
        prefill_unmixing=tuple(getattr(adapter, "prefill_unmixing", ())),  # a plugin written before: none
        prefill_remixing=tuple(getattr(adapter, "prefill_remixing", ())),
    )


def vocab_bridge(adapter: object, version: str | None) -> str | None:
    """An adapter's way to draft across vocabularies at ``version`` (a plugin written before the method: none)."""
    bridge = getattr(adapter, "vocab_bridge", None)
    return bridge(version) if callable(bridge) else None


def mixes_prefill(adapter: object, version: str | None) -> bool:
    """Whether an adapter's stack mixes prefills into decode steps at ``version`` (a plugin written before the
    method: no)."""
    mixes = getattr(adapter, "mixes_prefill", None)
    return bool(mixes(version)) if callable(mixes) else False


def compat_table(adapter: object) -> CompatTable:
    """An adapter's compatibility table (a plugin without one: empty)."""
    table = getattr(adapter, "compatibility", None)
    return table() if callable(table) else EMPTY
