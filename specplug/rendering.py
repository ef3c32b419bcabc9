"""Render a plan for one stack: the launch spec, a launch script and files, stamped and written atomically.

``specplug render STACK`` and :func:`render` share this code and parameter names. The flow is
config/flags -> :func:`resolve_plan` (policy) -> specplug.validate -> adapter.render(plan) -> :class:`Rendered`
(script + files).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specplug.config import Config, load_config
from specplug.errors import SpecplugError
from specplug.plan import Plan
from specplug.request import PlanRequest
from specplug.stacks.protocol import Adapter, LaunchSpec
from specplug.stacks.registry import get_adapter

FORMATS = ("shell", "json", "yaml")


class Rendered(BaseModel):
    """What a render produced: the spec itself, the script text, stamped files and the inputs hash."""

    spec: LaunchSpec
    plan: Plan
    script: str
    files: dict[str, str] = Field(default_factory=dict, description="Stamped file contents, by relative path.")
    inputs_hash: str
    script_name: str
    written: list[str] = Field(default_factory=list)

    def launch_spec_dict(self) -> dict[str, Any]:
        """The machine-readable form printed by ``--format json``: argv, env, files first."""
        s = self.spec
        return {
            "argv": s.argv,
            "env": s.env,
            "files": self.files,
            "env_from": s.env_from,
            "env_passthrough": s.env_passthrough,
            "stack": s.stack,
            "stack_version": s.stack_version,
            "health_url": s.health_url,
            "metrics_url": s.metrics_url,
            "base_url": s.base_url,
            "notes": s.notes,
            "inputs_hash": self.inputs_hash,
        }


# ---------------------------------------------------------------------------------------------- plan


def build_config(stack: str, *, config_path: str | None = None, **flags: Any) -> Config:
    """specplug.yaml (``config_path``, else ./specplug.yaml, else defaults) with the flags laid on top."""
    from specplug.configfile import read_config

    cfg, _ = read_config(config_path)
    return PlanRequest.from_flags(stack=stack, **flags).apply(cfg)


def _plan_from_config(cfg: Config, stack_version: str | None) -> Plan:
    try:
        from specplug.planning import plan_from_config
    except ImportError as exc:
        raise SpecplugError(
            f"The policy engine is not available in this build ({exc}).",
            "Reinstall specplug; meanwhile give an explicit technique in specplug.yaml's speculation: block.",
        ) from None
    return plan_from_config(cfg, stack_version=stack_version)


def resolve_plan(cfg: Config, adapter: Adapter | None = None) -> Plan:
    """The plan for ``cfg`` on its stack, rendered for the pinned version, else the installed one."""
    adapter = adapter or get_adapter(cfg.stack.name)
    if cfg.model is None:
        raise SpecplugError("No model given.", "Pass --model NAME (alias, HF id or folder), or set model: in specplug.yaml.")
    if cfg.stack.name != adapter.name or "name" not in cfg.stack.model_fields_set:
        from specplug.config import StackSpec

        cfg = cfg.model_copy(update={"stack": StackSpec(name=adapter.name, version=cfg.stack.version)})
    # The version (pinned, else installed) is resolved once, with the stack's capabilities, by the planner.
    return _plan_from_config(cfg, None)


def plan_for_request(stack: str, *, config_path: str | None = None, **flags: Any) -> tuple[Plan, Config]:
    """The plan render and launch use, checked (:func:`specplug.validate.validate_plan`): the committed lock when
    the config has one and no flag overrides it (so renders reproduce what was reviewed), else a fresh plan from the
    config with the flags on top."""
    from specplug.config import find_config

    cfg = build_config(stack, config_path=config_path, **flags)
    path = find_config(config_path)
    if path is not None and not PlanRequest.from_flags(**flags).overrides():
        from specplug.lock import lock_path_for, plan_for

        if lock_path_for(path).is_file() and load_config(path).stack.name == stack:
            from specplug.validate import validate_plan

            locked = plan_for(path, stack_version=flags.get("stack_version"))
            validate_plan(locked)  # a fresh plan is checked where it is made; a locked one here
            return locked, cfg
    return resolve_plan(cfg), cfg


# ---------------------------------------------------------------------------------------------- text


def inputs_hash(plan: Plan, fmt: str = "shell") -> str:
    """sha256 (first 16 hex digits) of everything a render depends on: plan, versions, format."""
    from specplug import __version__

    blob = json.dumps(
        {"plan": plan.model_dump(mode="json"), "specplug": __version__, "format": fmt}, sort_keys=True
    ).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _quote(arg: str, files: dict[str, str]) -> str:
    # A file the spec ships is referenced beside the script, wherever it is run from.
    return f'"$HERE/{arg}"' if arg in files else shlex.quote(arg)


def command_lines(argv: list[str], files: dict[str, str]) -> list[str]:
    """argv as shell-quoted lines: the program and positionals first, then one flag (with values) a line."""
    lines: list[str] = []
    cur: list[str] = []
    for a in argv:
        if a.startswith("-") and len(a) > 1 and not a[1:2].isdigit() and cur:
            lines.append(" ".join(cur))
            cur = []
        cur.append(_quote(a, files))
    if cur:
        lines.append(" ".join(cur))
    return lines


def env_lines(spec: LaunchSpec) -> list[str]:
    """``export`` lines: names checked as variable names, values shell-quoted (a value may span lines)."""
    from specplug.safetext import env_name
    from specplug.templating import Verbatim

    try:
        out = [Verbatim(f"export {env_name(k)}={shlex.quote(v)}") for k, v in spec.env.items()]
        for target, source in spec.env_from.items():
            out.append(f'export {env_name(target)}="${{{env_name(source)}:?set {source} to the value for {target}}}"')
    except ValueError as exc:
        raise SpecplugError(f"Cannot write the launch environment: {exc}.") from None
    return out


def summary(plan: Plan) -> str:
    s = plan.speculation
    if not s.enabled:
        return f"{plan.model.name}, no speculation"
    parts = [s.method]
    if s.drafter:
        parts.append(f"drafter {s.drafter}")
    parts.append(f"k={s.num_speculative_tokens}")
    if s.lossy:
        parts.append(f"LOSSY verification {s.verification}")
    return f"{plan.model.name}, " + ", ".join(parts)


def _stamp_file(adapter: Any, name: str, content: str, plan: Plan, digest: str) -> str:
    from specplug import __version__
    from specplug.templating import Verbatim, render_template

    ext = name.rsplit(".", 1)[-1]
    tmpl = adapter.template_name(plan.stack.version, ext)
    if tmpl is None:
        return content
    return render_template(
        tmpl,
        display_name=adapter.display_name,
        stack_version=plan.stack.version,
        specplug_version=__version__,
        inputs_hash=digest,
        summary=summary(plan),
        body=Verbatim(content.rstrip("\n")),  # the adapter's own YAML/JSON dump, escaped by its dumper
    )


def script_text(adapter: Any, spec: LaunchSpec, plan: Plan, digest: str) -> str:
    from specplug import __version__
    from specplug.templating import render_template

    tmpl = adapter.template_name(plan.stack.version)
    ctx = dict(
        display_name=adapter.display_name,
        stack_version=plan.stack.version,
        specplug_version=__version__,
        inputs_hash=digest,
        summary=summary(plan),
        notes=spec.notes,
        passthrough=spec.env_passthrough,
        uses_here=bool(spec.files),
        env_lines=env_lines(spec),
        command_lines=command_lines(spec.argv, spec.files),
    )
    return render_template(tmpl or "_launch.sh.j2", **ctx)


# ---------------------------------------------------------------------------------------------- api


def render_plan(plan: Plan, fmt: str = "shell", *, checked: bool = False) -> Rendered:
    """``plan`` rendered by its stack's adapter; ``checked``: :func:`specplug.validate.validate_plan` has passed
    it already (a plan from :func:`plan_for_request`), so it is not checked again."""
    adapter = get_adapter(plan.stack.name)
    if not checked:
        from specplug.validate import validate_plan

        validate_plan(plan)  # every problem at once, before the adapter refuses the first one it meets
    spec = adapter.render_valid(plan)
    digest = inputs_hash(plan, fmt)
    files = {name: _stamp_file(adapter, name, content, plan, digest) for name, content in spec.files.items()}
    return Rendered(
        spec=spec,
        plan=plan,
        script=script_text(adapter, spec, plan, digest),
        files=files,
        inputs_hash=digest,
        script_name=f"launch-{plan.stack.name}.sh",
    )


def write_rendered(r: Rendered, output_dir: str | Path) -> list[str]:
    """Write the script (executable) and files into ``output_dir`` atomically; returns the paths."""
    from specplug.fileio import write_atomic

    out = Path(output_dir)
    written = [str(write_atomic(out / r.script_name, r.script, mode=0o755))]
    for name, content in r.files.items():
        target = (out / name).resolve()
        if out.resolve() not in target.parents:
            raise SpecplugError(f"Refusing to write {name!r} outside {out}.")
        written.append(str(write_atomic(target, content)))
    written.append(str(write_atomic(out / f"launch-{r.plan.stack.name}.json", json.dumps(r.launch_spec_dict(), indent=2) + "\n")))
    r.written = written
    return written


def render(
    stack: str,
    *,
    config_path: str | None = None,
    output_dir: str | None = None,
    format: str = "shell",
    plan: Plan | None = None,
    **flags: Any,
) -> Rendered:
    """Render STACK's launch for a config and the plan flags of :class:`~specplug.request.PlanRequest` (or an
    explicit ``plan``); write it when ``output_dir``."""
    if format not in FORMATS:
        raise SpecplugError(f"Unknown format '{format}'.", f"Use one of: {', '.join(FORMATS)}.")
    checked = plan is None
    if plan is None:
        plan, _ = plan_for_request(stack, config_path=config_path, **flags)
    elif plan.stack.name != stack:
        plan = plan.model_copy(update={"stack": plan.stack.model_copy(update={"name": stack})})
    r = render_plan(plan, format, checked=checked)
    if output_dir:
        write_rendered(r, output_dir)
    return r
