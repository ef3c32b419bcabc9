"""plan_from_config and recommend: the stack resolved once (with what it can do, specplug.capabilities), then
the policy's planning stages (specplug.policy.planner). The only place the two meet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplug.config import Config
from specplug.errors import SpecplugError
from specplug.plan import Plan
from specplug.policy.schema import Policy

if TYPE_CHECKING:
    from specplug.policy.estimator import Estimate


def plan_from_config(
    cfg: Config,
    *,
    probed: Any = None,
    stack_version: str | None = None,
    policy: str | Path | dict[str, Any] | Policy | None = None,
    calibration: str | None = None,
) -> Plan:
    """Resolve every ``auto`` in ``cfg`` (stack, hardware, speculation) and fill the whole Plan."""
    from specplug import stackcaps
    from specplug.policy.planner import plan
    from specplug.validate import validate_plan

    name = cfg.stack.name if "name" in cfg.stack.model_fields_set else stackcaps.default_stack()
    caps = stackcaps.resolve(name, cfg.stack.version, stack_version)
    return plan(cfg, caps, probed=probed, policy=policy, calibration=calibration, validate=validate_plan)


def estimate(model: str, method: str, *, stack: str = "vllm", stack_version: str | None = None, **kw: Any) -> Estimate:
    """Predicted speedup and acceptance of one configuration (the CLI's ``specplug estimate``); same keywords as
    :func:`specplug.policy.estimator.estimate`, with the stack's capabilities resolved here."""
    from specplug import stackcaps
    from specplug.adapter import is_stack, stack_names
    from specplug.capabilities import RESEARCH_CODE
    from specplug.policy.estimator import estimate as score
    from specplug.validate import validate_plan

    if stack != RESEARCH_CODE and not is_stack(stack):
        raise SpecplugError(f"Unknown stack '{stack}'.", f"Choose one of: {', '.join(stack_names())}, hf (research code).")
    return score(model, method, stack=stack, caps=stackcaps.resolve(stack, None, stack_version), validate=validate_plan, **kw)


def recommend(
    model: str | None = None,
    *,
    gpu: str | None = None,
    num_gpus: int | None = None,
    batch_size: int | None = None,
    concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    workload: str | None = None,
    temperature: float | None = None,
    stack: str | None = None,
    stack_version: str | None = None,
    drafter: str | None = None,
    config: str | Path | Config | None = None,
    policy: str | Path | dict[str, Any] | None = None,
    calibration: str | None = None,
    probed: Any = None,
    traffic: str | Path | None = None,
    quantization: str | None = None,
    kv_cache_dtype: str | None = None,
) -> Plan:
    """Recommend a speculative-decoding setup (the CLI's ``specplug recommend``); flags override the config.

    Unset traffic flags fall back to the config file, then to chat, 1 request, 1024 in / 256 out, greedy.
    """
    from specplug.config import load_config

    if isinstance(config, Config):
        cfg = config
    elif config is not None:
        cfg = load_config(config)
    else:
        cfg = Config()
    data = cfg.model_dump(exclude_unset=True)
    if model:
        data["model"] = model
    if stack:
        data["stack"] = {**(data.get("stack") or {}), "name": stack}
    if gpu or num_gpus:
        hw = data.get("hardware") if isinstance(data.get("hardware"), dict) else {}
        data["hardware"] = {**hw, **({"gpu": gpu} if gpu else {}), **({"num_gpus": num_gpus} if num_gpus else {})}
    wl = dict(data.get("workload") or {})
    if batch_size is not None or concurrency is not None:
        wl["concurrency"] = batch_size if batch_size is not None else concurrency
    for key, val in (
        ("input_len", input_len), ("output_len", output_len), ("type", workload), ("temperature", temperature),
        ("traffic", str(traffic) if traffic is not None else None),
    ):
        if val is not None:
            wl[key] = val
    data["workload"] = wl
    if quantization is not None or kv_cache_dtype is not None:
        serve = dict(data.get("serve") or {})
        if quantization is not None:
            serve["quantization"] = quantization
        if kv_cache_dtype is not None:
            serve["kv_cache_dtype"] = kv_cache_dtype
        data["serve"] = serve
    if drafter:
        spec = data.get("speculation") if isinstance(data.get("speculation"), dict) else None
        if spec is None:
            # A drafter alone means "use this draft model/head": infer the method from the catalog.
            from specplug.catalog.drafters import find_drafter

            cat = find_drafter(drafter)
            data["speculation"] = {"method": cat.method if cat else "draft_model", "drafter": drafter}
        else:
            data["speculation"] = {**spec, "drafter": drafter}
    from pydantic import ValidationError

    try:
        merged = Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SpecplugError(
            f"Invalid option {'.'.join(str(p) for p in err['loc'])}: {err['msg']}.",
            "Run 'specplug recommend --help' for the accepted values.",
        ) from None
    return plan_from_config(merged, probed=probed, stack_version=stack_version, policy=policy, calibration=calibration)
