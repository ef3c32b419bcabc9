"""plan_from_config, recommend and estimate: the API layer. The hardware, the stack (with what it can do,
specplug.capabilities) and the policy are resolved here, once; the policy's planning stages
(specplug.policy.planner) plan from them; the stack's checks (specplug.validate) run once on the result. The only
place the policy and the stacks meet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplug.config import Config
from specplug.errors import SpecplugError
from specplug.plan import Plan
from specplug.policy.schema import Policy

if TYPE_CHECKING:
    from specplug.capabilities import StackCapabilities
    from specplug.catalog.drafters import Drafter
    from specplug.policy.estimator import Estimate
    from specplug.probe import Hardware, ProbeResult


def plan_from_config(
    cfg: Config,
    *,
    probed: ProbeResult | None = None,
    stack_version: str | None = None,
    policy: str | Path | dict[str, Any] | Policy | None = None,
    calibration: str | None = None,
    discover: bool | None = None,
) -> Plan:
    """Resolve every ``auto`` in ``cfg`` (stack, hardware, speculation) and fill the whole Plan.

    ``discover``: whether drafters published outside the catalog are candidates (:func:`discovered`); None
    searches for a target the catalog does not hold, True for any Hub target, False never.
    """
    from specplug import stackcaps
    from specplug.policy.data import load_policy
    from specplug.policy.planner import plan
    from specplug.validate import validate_plan

    name = cfg.stack.name if "name" in cfg.stack.model_fields_set else stackcaps.default_stack()
    caps = stackcaps.resolve(name, cfg.stack.version, stack_version)
    hardware = resolve_hardware_for(cfg, caps, probed)
    pol = load_policy(policy, cfg.policy or None)
    found = discovered(cfg, force=True) if discover else () if discover is False else discovered(cfg)
    out = plan(cfg, hardware, caps, pol, calibration=calibration, validate=validate_plan, found=found)
    validate_plan(out)
    return out


def resolve_hardware_for(cfg: Config, caps: StackCapabilities, probed: ProbeResult | None = None) -> Hardware:
    """What ``cfg`` plans for: the GPU it names, else what the probe finds here, else the default GPU; a stack
    that serves on the CPU (caps.runs_on_cpu) plans for this machine's CPU where no GPU is named or found."""
    from specplug.probe import Hardware, resolve_hardware

    hs = cfg.hardware_spec()
    hw = resolve_hardware(hs.gpu, hs.num_gpus, probed)
    if hw.source == "default" and caps.runs_on_cpu:
        from specplug.hostcpu import host_cpu

        host = host_cpu()
        hw = Hardware(gpu=host.spec, num_gpus=1, memory_gb=host.memory_gib, source="host",
                      note=f"{hw.probe_message} {host.note}")
    return hw


def discovered(cfg: Config, *, force: bool = False) -> tuple[Drafter, ...]:
    """Drafters for the config's target found in the local Hugging Face cache and (unless HF_HUB_OFFLINE) on the
    Hub, when the speculation leaves the drafter to choose. Catalog targets keep to the catalog's curated rows
    unless ``force``: a plan of a catalog model stays the same on every machine, online or not."""
    from specplug.catalog import get_model
    from specplug.catalog.discovery import found_drafters
    from specplug.catalog.hub import is_repo_id
    from specplug.catalog.models import in_catalog
    from specplug.methods import BY_NAME

    spec = cfg.speculation
    if spec != "auto" and (getattr(spec, "drafter", None) or spec.method not in BY_NAME
                           or not BY_NAME[spec.method].needs_drafter):
        return ()
    if not cfg.model or (in_catalog(cfg.model) and not force):
        return ()
    try:
        model = get_model(cfg.model)
    except SpecplugError:
        return ()  # planning reports the same error
    target = model.base_model or model.hf_id
    if model.local_path or not is_repo_id(target):
        return ()
    return tuple(found_drafters(target)[0])


def estimate(model: str, method: str, *, stack: str = "vllm", stack_version: str | None = None, **kw: Any) -> Estimate:
    """Predicted speedup and acceptance of one configuration (the CLI's ``specplug estimate``); same keywords as
    :func:`specplug.policy.estimator.estimate`, with the stack's capabilities resolved here."""
    from specplug import stackcaps
    from specplug.capabilities import RESEARCH_CODE
    from specplug.policy.estimator import estimate as score
    from specplug.stacks.registry import is_stack, stack_names
    from specplug.validate import validate_plan

    if stack != RESEARCH_CODE and not is_stack(stack):
        raise SpecplugError(f"Unknown stack '{stack}'.", f"Choose one of: {', '.join(stack_names())}, hf (research code).")
    return score(model, method, stack=stack, caps=stackcaps.resolve(stack, None, stack_version), validate=validate_plan, **kw)


def recommend(
    model: str | None = None,
    *,
    config: str | Path | Config | None = None,
    policy: str | Path | dict[str, Any] | None = None,
    calibration: str | None = None,
    probed: Any = None,
    discover: bool | None = None,
    **flags: Any,
) -> Plan:
    """Recommend a speculative-decoding setup (the CLI's ``specplug recommend``): the config (a file, a Config or
    none) with the plan flags of :class:`~specplug.request.PlanRequest` on top (``batch_size`` is
    ``concurrency``). Unset traffic flags fall back to the config file, then to chat, 1 request, 1024 in / 256
    out, greedy.
    """
    from specplug.config import load_config
    from specplug.request import PlanRequest

    if isinstance(config, Config):
        cfg = config
    elif config is not None:
        cfg = load_config(config)
    else:
        cfg = Config()
    request = PlanRequest.from_flags(model=model, **flags)
    merged = request.apply(cfg)
    return plan_from_config(merged, probed=probed, stack_version=request.stack_version, policy=policy,
                            calibration=calibration, discover=discover)
