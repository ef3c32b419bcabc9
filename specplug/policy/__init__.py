"""The policy engine and performance model behind ``specplug recommend`` and ``specplug estimate``: pure
functions of a config, the stack's capabilities (plain data) and the policy; it never imports the adapters.
``recommend``, ``estimate`` and ``plan_from_config`` live in specplug.planning, which resolves the stack and
runs its checks.

    load_policy(policy=None, overrides=None) -> Policy

Names load lazily so that `specplug recommend` does not pay for estimate's models (start-up time).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Estimate": "specplug.policy.estimator",
    "load_policy": "specplug.policy.data",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specplug.policy' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
