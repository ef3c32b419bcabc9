"""The policy engine and performance model behind ``specplug recommend`` and ``specplug estimate``.

Public API (same parameter names as the CLI flags)::

    plan_from_config(cfg, *, probed=None, stack_version=None) -> Plan
    recommend(model, *, gpu=None, num_gpus=None, batch_size=None, ...) -> Plan
    estimate(model, method, *, gpu, ...) -> Estimate
    load_policy(policy=None, overrides=None) -> Policy
"""

from __future__ import annotations

from specplug.policy.data import load_policy
from specplug.policy.estimator import Estimate, estimate
from specplug.policy.planner import plan_from_config, recommend

__all__ = ["Estimate", "estimate", "load_policy", "plan_from_config", "recommend"]
