"""Loading and merging policy files: shipped default -> fitted priors -> user overrides."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from specplug.errors import ConfigError, invalid
from specplug.policy.schema import Policy

SHIPPED = ("default.yaml", "fitted.yaml")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; any other value (lists included) replaces the base value."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(text: str, where: str) -> dict[str, Any]:
    import yaml

    from specplug.fileio import load_yaml

    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: invalid YAML: {exc}.", "Fix the syntax of the policy file.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a policy file must be a mapping (acceptance:, stacks:, rules:).")
    return data


@cache
def shipped_data() -> dict[str, Any]:
    from importlib import resources

    merged: dict[str, Any] = {}
    root = resources.files("specplug.policies")
    for name in SHIPPED:
        f = root.joinpath(name)
        if f.is_file():
            merged = deep_merge(merged, _read_yaml(f.read_text(encoding="utf-8"), f"policies/{name}"))
    return merged


def read_policy_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read policy file {p}: {exc.strerror}.", "Check the --policy path.") from None
    return _read_yaml(text, str(p))


def validate(data: dict[str, Any], where: str) -> Policy:
    from pydantic import ValidationError

    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, f"Invalid policy ({where})",
                      "See 'specplug policy show' for the merged policy and its keys.") from None


_CACHE: dict[str, Policy] = {}


def load_policy(policy: str | Path | dict[str, Any] | Policy | None = None, overrides: dict[str, Any] | None = None) -> Policy:
    """The merged, validated policy: shipped data, then ``overrides`` (config ``policy:``), then ``policy``
    (a file path or a mapping given with --policy / policy=)."""
    if isinstance(policy, Policy) and not overrides:
        return policy
    import json

    key = json.dumps([str(policy) if isinstance(policy, str | Path) else policy, overrides], sort_keys=True, default=str)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    data = shipped_data()
    where = "shipped policy"
    if overrides:
        data = deep_merge(data, overrides)
        where = "policy: in specplug.yaml"
    if isinstance(policy, Policy):
        data = deep_merge(data, policy.model_dump())
    elif isinstance(policy, dict):
        data = deep_merge(data, policy)
        where = "policy overrides"
    elif policy is not None:
        data = deep_merge(data, read_policy_file(policy))
        where = str(policy)
    result = validate(data, where)
    _CACHE[key] = result
    return result
