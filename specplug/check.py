"""``specplug check``: the CI / pre-commit gate for an infra repo's specplug files.

It never re-plans a locked config and never needs a GPU or a serving stack installed: everything is judged
against the committed lock. Checks, in order:

1. **schema**: specplug.yaml loads under the current schema (an old schema points at ``specplug migrate``);
2. **lock**: specplug.lock.yaml exists, is readable and was planned from the current inputs (**drift**: the
   spec, policy, calibration, traffic file or catalog changed since ``specplug plan``), naming the file and key.
   Without a lock there is nothing to judge against, so check runs what ``specplug plan`` runs
   (:func:`specplug.lock.plan_fresh`, which ends in :func:`specplug.validate.validate_plan`) and reports each
   **plan** problem it refuses with (no model, k=0 for a drafting method, a drafter of another vocabulary ...),
   beside the missing lock;
3. **compat**: the locked plan on its pinned stack version: technique supported, then every problem
   ``specplug.validate`` finds (drafter vocabulary, k, parallelism, precision, what render refuses), memory fits;
4. **stale**: each ``--rendered DIR`` holds exactly what the lock renders today (deploy renders via their
   ``specplug.rendered.yaml`` manifest, launch scripts from ``specplug render``);
5. **tune**: a lock made by ``specplug tune`` still has its evidence, and that evidence is not older than the
   inputs (model, serving options, workload, traffic file, the pinned stack version).

Exit codes (the README's rule, as every command): 0 all good (warnings may print), 1 problems found or no config
file (as ``plan``, ``render`` and ``launch`` exit for it), 2 usage error (a --rendered folder that is not there).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specplug.errors import ConfigError, SpecplugError, UsageError

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class CheckUsageError(UsageError):
    """A flag's value names something that isn't there (a --rendered folder): exit 2, as for any bad flag value."""


@dataclass
class Problem:
    kind: str  # schema | lock | plan | drift | compat | stale | tune
    file: str
    message: str
    key: str | None = None
    line: int | None = None
    fix: str | None = None

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def text(self) -> str:
        key = f" {self.key}:" if self.key else ""
        out = f"{self.where()}: {self.kind}:{key} {self.message}"
        return out + (f"\n  fix: {self.fix}" if self.fix else "")


@dataclass
class Report:
    config: str
    lock: str
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_PROBLEMS

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "config": self.config,
            "lock": self.lock,
            "checked": self.checked,
            "problems": [asdict(p) for p in self.problems],
            "warnings": [asdict(p) for p in self.warnings],
        }


# ---------------------------------------------------------------------------------------------- compat


def compat_problems(plan: Any, spec: dict[str, Any], cfg_file: str, lock_file: str) -> tuple[list[Problem], list[Problem]]:
    """Problems (and warnings) of the locked plan on its pinned stack version, from plan data alone."""
    from specplug.stacks.registry import get_adapter

    problems: list[Problem] = []
    warnings: list[Problem] = []
    explicit = isinstance(spec.get("speculation"), dict)
    key_method = "speculation.method" if explicit else "stack.version"
    stack, version = plan.stack.name, plan.stack.version
    try:
        adapter = get_adapter(stack)
    except SpecplugError as exc:
        problems.append(Problem("compat", cfg_file, exc.message, key="stack.name", fix=exc.hint))
        return problems, warnings
    method = plan.speculation.method
    if method != "none":
        try:
            reason = adapter.methods(version).get(method)
        except SpecplugError as exc:
            reason = exc.message
        if reason:
            problems.append(
                Problem(
                    "compat",
                    cfg_file,
                    f"{method} is not supported by {adapter.display_name} {version or '(unpinned)'}: {reason}",
                    key=key_method,
                    fix="pin a stack.version that supports it, or choose another speculation.method, then 'specplug plan'",
                )
            )
    problems += _plan_problems(plan, cfg_file, lock_file, explicit, skip_method=bool(problems))
    mem = plan.memory
    if mem is not None and not mem.fits:
        problems.append(
            Problem(
                "compat",
                cfg_file,
                f"the plan does not fit in {mem.gpu_memory_gb:g} GB per GPU (weights {mem.target_weights_gb:g} GB"
                f" + drafter {mem.drafter_weights_gb:g} GB + KV {mem.kv_cache_gb:g} GB)",
                key="hardware",
                fix=mem.hint or "use more or larger GPUs (hardware.num_gpus), a quantized model, or a shorter serve.max_model_len",
            )
        )
    if not version:
        warnings.append(
            Problem(
                "lock",
                cfg_file,
                "stack.version is not pinned, so renders follow whatever version is installed where they run",
                key="stack.version",
                fix="pin stack.version in specplug.yaml and re-plan",
            )
        )
    for w in plan.warnings:
        warnings.append(Problem("plan", lock_file, w))
    return problems, warnings


def _plan_problems(plan: Any, cfg_file: str, lock_file: str, explicit: bool, skip_method: bool) -> list[Problem]:
    """specplug.validate's problems (the ones render and launch refuse), each under the key to change."""
    from specplug.validate import plan_problems

    found = [p for p in plan_problems(plan) if not (skip_method and p.key == "speculation.method")]
    # (an unsupported method is already said by compat_problems' own message)
    return _located("compat", found, cfg_file, lock_file, explicit)


def _located(kind: str, found: list[Any], cfg_file: str, other_file: str, explicit: bool) -> list[Problem]:
    """specplug.validate Problems as check's: under the specplug.yaml key (and line) to change, when they name one."""
    out = []
    for p in found:
        key = p.key or "plan"
        if key.startswith("speculation.") and not explicit:
            key = "speculation"  # the policy chose it: re-plan rather than edit a key that is not there
        line = _config_line(cfg_file, key) if p.key else None
        out.append(Problem(kind, cfg_file if p.key else other_file, p.message, key=key, line=line, fix=p.hint))
    return out


def plan_refusals(cfg: Any, cfg_path: Path) -> list[Problem]:
    """What 'specplug plan' refuses in this config, found by running what it runs (no lock to judge yet).

    ``specplug plan`` calls :func:`specplug.lock.plan_fresh` (the planner, which ends in
    :func:`specplug.validate.validate_plan`); so does this, so the two never disagree about a config. Every problem
    of an :class:`~specplug.validate.InvalidPlan` is listed under its key; any other refusal (no model, a memory
    that cannot fit, a missing traffic file ...) is one problem.
    """
    from specplug.lock import plan_fresh
    from specplug.validate import InvalidPlan

    cfg_file = str(cfg_path)
    try:
        plan_fresh(cfg, cfg_path)
    except InvalidPlan as exc:
        if exc.problems:
            return _located("plan", exc.problems, cfg_file, cfg_file, cfg.speculation != "auto")
        return [Problem("plan", cfg_file, exc.message, fix=exc.hint)]
    except SpecplugError as exc:
        return [Problem("plan", cfg_file, exc.message, fix=exc.hint)]
    return []


def _config_line(cfg_file: str, key: str) -> int | None:
    """Line of ``key`` (or of its nearest parent) in the config, so editors jump to what to change."""
    import yaml

    from specplug.config import _line_of

    try:
        return _line_of(yaml.compose(Path(cfg_file).read_text(encoding="utf-8")), key.split("."))
    except (OSError, yaml.YAMLError):
        return None


# ---------------------------------------------------------------------------------------------- stale


def _first_difference(old: str, new: str) -> tuple[int, str]:
    """Line and text of the first difference, preferring content over the stamped comment header."""
    a_lines, b_lines = old.splitlines(), new.splitlines()
    first: tuple[int, str] | None = None
    for i, (a, b) in enumerate(zip(a_lines, b_lines, strict=False), start=1):
        if a != b:
            if not a.lstrip().startswith("#"):
                return i, f"-{a.strip()} +{b.strip()}"
            first = first or (i, f"-{a.strip()} +{b.strip()}")
    if len(a_lines) != len(b_lines):
        i = min(len(a_lines), len(b_lines)) + 1
        extra = (a_lines + b_lines)[i - 1] if i - 1 < max(len(a_lines), len(b_lines)) else ""
        return first or (i, f"{'-' if len(a_lines) > len(b_lines) else '+'}{extra.strip()}")
    return first or (1, "")


def _compare(folder: Path, expected: dict[str, str], fix: str) -> list[Problem]:
    out = []
    for rel, content in expected.items():
        path = folder / rel
        if not path.is_file():
            out.append(Problem("stale", str(path), "missing: the lock renders this file", fix=fix))
            continue
        have = path.read_text(encoding="utf-8")
        if have != content:
            line, sample = _first_difference(have, content)
            out.append(
                Problem(
                    "stale",
                    str(path),
                    f"differs from what the lock renders (line {line}: {sample[:160]})",
                    line=line,
                    fix=fix,
                )
            )
    return out


def rendered_problems(folder: Path, lock: Any, config_path: Path) -> tuple[list[Problem], list[str]]:
    """Compare ``folder`` with what the lock renders now. Returns problems and the files compared."""
    from specplug import deploy
    from specplug.lock import LOCK_NAME

    plan = lock.plan
    problems: list[Problem] = []
    checked: list[str] = []
    found_any = False
    manifest = folder / deploy.MANIFEST
    if manifest.is_file():
        found_any = True
        import yaml

        try:
            meta = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
            targets = list(meta["targets"])
        except Exception:
            return [Problem("stale", str(manifest), "unreadable deploy manifest", fix=f"specplug deploy -o {folder}")], []
        opts = ""
        if meta.get("name") and meta["name"] != deploy.default_name(plan):
            opts += f" --name {meta['name']}"
        if meta.get("image"):
            opts += f" --image {meta['image']}"
        fix = f"specplug deploy -c {config_path} -o {folder}" + "".join(f" --target {t}" for t in targets) + opts
        try:
            expected = deploy.expected_files(
                plan,
                targets,
                name=meta.get("name"),
                image=meta.get("image"),
                lock_file=LOCK_NAME,
                inputs_hash=lock.inputs.hash,
                config_rel=str(meta.get("config") or config_path.name),
            )
        except SpecplugError as exc:
            return [Problem("stale", str(manifest), f"cannot re-render: {exc.message}", fix=exc.hint)], []
        problems += _compare(folder, expected, fix)
        checked += [str(folder / r) for r in expected]
    script = folder / f"launch-{plan.stack.name}.sh"
    if script.is_file():
        found_any = True
        from specplug.rendering import render_plan

        try:
            r = render_plan(plan, "shell")
        except SpecplugError as exc:
            return problems + [Problem("stale", str(script), f"cannot re-render: {exc.message}", fix=exc.hint)], checked
        expected = {r.script_name: r.script, **r.files, f"launch-{plan.stack.name}.json": json.dumps(r.launch_spec_dict(), indent=2) + "\n"}
        problems += _compare(folder, expected, f"specplug render {plan.stack.name} -c {config_path} -o {folder}")
        checked += [str(folder / r) for r in expected]
    if not found_any:
        problems.append(
            Problem(
                "stale",
                str(folder),
                f"no specplug renders here (neither {deploy.MANIFEST} nor launch-{plan.stack.name}.sh)",
                fix=f"specplug deploy -c {config_path} -o {folder}, or drop --rendered {folder}",
            )
        )
    return problems, checked


# ---------------------------------------------------------------------------------------------- entry


def check(config_path: str | Path, rendered: list[str | Path] | tuple[str | Path, ...] = ()) -> Report:
    from specplug.config import parse_config
    from specplug.lock import drift, lock_path_for, read_lock
    from specplug.migrate import needs_migration

    cfg_path = Path(config_path)
    lock_path = lock_path_for(cfg_path)
    report = Report(config=str(cfg_path), lock=str(lock_path))
    if not cfg_path.is_file():
        # A missing config is a problem to fix, not a usage error: exit 1, as plan, render and launch exit for it.
        raise ConfigError(f"No config file at {cfg_path}.", "Pass -c PATH/specplug.yaml, or run 'specplug init' first.")
    for folder in rendered:
        if not Path(folder).is_dir():
            raise CheckUsageError(f"--rendered {folder}: no such folder.", "Point it at the folder 'specplug deploy -o' wrote.")
    text = cfg_path.read_text(encoding="utf-8")
    report.checked.append(str(cfg_path))
    try:
        cfg = parse_config(text, str(cfg_path))
    except ConfigError as exc:
        old = needs_migration(text)
        fix = f"specplug migrate -c {cfg_path}" if old is not None else "fix the key named above ('specplug schema' prints the schema)"
        report.problems.append(Problem("schema", str(cfg_path), exc.message, fix=fix))
        return report
    if not lock_path.is_file():
        refused = plan_refusals(cfg, cfg_path)
        report.problems += refused
        fix = f"specplug plan -c {cfg_path}"
        report.problems.append(
            Problem("lock", str(lock_path), "missing: nothing pins what this config deploys",
                    fix=f"fix the problem(s) above, then {fix}" if refused else fix)
        )
        return report
    try:
        lock = read_lock(lock_path)
    except ConfigError as exc:
        report.problems.append(Problem("lock", str(lock_path), exc.message, fix=f"specplug plan -c {cfg_path}"))
        return report
    report.checked.append(str(lock_path))
    for d in drift(cfg, cfg_path, lock, text):
        report.problems.append(
            Problem("drift", d.file, d.message, key=d.key, line=d.line, fix=f"specplug plan -c {cfg_path}, then commit the lock")
        )
    from specplug.tune.lockref import tune_findings

    for f in tune_findings(cfg, cfg_path, lock_path, lock.plan.stack.version):
        (report.problems if f.severity == "problem" else report.warnings).append(
            Problem("tune", f.file, f.message, key=f.key, fix=f.fix)
        )
    problems, warnings = compat_problems(lock.plan, lock.spec, str(cfg_path), str(lock_path))
    report.problems += problems
    report.warnings += warnings
    from specplug import __version__

    if lock.specplug_version != __version__:
        report.warnings.append(
            Problem("lock", str(lock_path), f"written by specplug {lock.specplug_version}; this is {__version__}", key="specplug_version")
        )
    for folder in rendered:
        p, checked = rendered_problems(Path(folder), lock, cfg_path)
        report.problems += p
        report.checked += checked
    return report
