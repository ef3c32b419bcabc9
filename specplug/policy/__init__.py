"""The policy engine and performance model behind ``specplug recommend`` and ``specplug estimate``
(``recommend`` and ``plan_from_config`` live in specplug.planning, which resolves the stack first).

Public API (same parameter names as the CLI flags)::

    estimate(model, method, *, gpu, ...) -> Estimate
    load_policy(policy=None, overrides=None) -> Policy

Names load lazily so that `specplug recommend` does not pay for estimate's models (start-up time).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "estimate": "specplug.planning",  # resolves the stack's capabilities, then specplug.policy.estimator
    "Estimate": "specplug.policy.estimator",
    "load_policy": "specplug.policy.data",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specplug.policy' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
