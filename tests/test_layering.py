"""The whiteboard rules as tests: which layer may import which, and what stays out of light imports.

- library code never imports the face (``specplug.commands``, ``specplug.cli``, the presentation module
  ``specplug.output``), and click and rich are imported only there, lazily or not;
- the policy never imports adapters;
- the CLI never imports a deep-learning framework or serving stack at start-up;
- estimates need no torch;
- no import cycles among specplug's and the adapters' modules (imports inside functions are lazy and allowed).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specplug", "adapters")
HEAVY = ("torch", "transformers", "vllm", "sglang", "tensorrt_llm")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _sources()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, module: str, is_package: bool, *, top_level: bool) -> Iterator[str]:
    """Dotted names ``node`` imports; with ``top_level``, only those run when the module is imported
    (not inside functions or classes' methods, not under ``if TYPE_CHECKING``)."""
    for child in ast.iter_child_nodes(node):
        if top_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if top_level and isinstance(child, ast.If) and _is_type_checking(child.test):
            yield from (name for stmt in child.orelse for name in _imports(stmt, module, is_package, top_level=True))
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (child.level - 1)]
                prefix = ".".join([*base, child.module] if child.module else base)
            else:
                prefix = child.module or ""
            # ``from a import b`` imports a, and a.b when b is a module rather than a name in a.
            yield prefix
            yield from (f"{prefix}.{alias.name}" for alias in child.names)
        yield from _imports(child, module, is_package, top_level=top_level)


def _project_imports(module: str, *, top_level: bool) -> set[str]:
    """The project modules ``module`` imports (each name resolved to the deepest module that exists)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    for name in _imports(tree, module, path.name == "__init__.py", top_level=top_level):
        if name in MODULES and name != module:
            found.add(name)
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# The face: the commands, the click group, and the one presentation module. Only these may import click or rich.
FACE = ("specplug.commands", "specplug.cli", "specplug.output")
TERMINAL = ("rich", "click")


def _in_face(module: str) -> bool:
    return any(_in(module, f) for f in FACE)


def test_library_code_never_imports_the_face():
    # Lazy imports included: a library module reaching specplug.output would pull rich in at run time.
    offenders = {
        module: sorted(m for m in _project_imports(module, top_level=False) if _in_face(m))
        for module in MODULES
        if not _in_face(module)
    }
    assert {m: found for m, found in offenders.items() if found} == {}


def test_the_policy_never_imports_adapters():
    offenders = {
        module: sorted(m for m in _project_imports(module, top_level=False)
                       if _in(m, "adapters") or _in(m, "specplug.adapter") or _in(m, "specplug.stacks") or _in(m, "specplug.adapters"))
        for module in MODULES
        if _in(module, "specplug.policy")
    }
    assert {m: found for m, found in offenders.items() if found} == {}


# The floor below the registry: the policy and the data it plans from (config, Plan, capabilities, methods).
PURE = ("specplug.policy", "specplug.config", "specplug.plan", "specplug.capabilities", "specplug.methods")
# What asks the adapters, and the floors above it.
REGISTRY = ("specplug.adapter", "specplug.stacks", "specplug.adapters", "adapters", "specplug.stackcaps", "specplug.validate",
            "specplug.planning", "specplug.rendering", "specplug.launcher", "specplug.commands", "specplug.cli")


def _reach(module: str) -> set[str]:
    """Every project module ``module`` can import when its code runs, lazy imports included, transitively."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for nxt in _project_imports(todo.pop(), top_level=False):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_policy_and_its_data_never_reach_the_registry_even_lazily():
    offenders = {
        module: sorted(m for m in _reach(module) if any(_in(m, r) for r in REGISTRY))
        for module in MODULES
        if any(_in(module, p) for p in PURE)
    }
    assert {m: found for m, found in offenders.items() if found} == {}


def test_the_policy_plans_with_the_registry_poisoned():
    """Capabilities as data in, a Plan out, and a lock naming a plugin not installed here still reads."""
    proc = _run(f"""
        import sys
        for name in {list(REGISTRY)!r}:
            sys.modules[name] = None  # any import of these now raises
        from specplug.capabilities import StackCapabilities
        from specplug.config import Config
        from specplug.methods import SPECULATING
        from specplug.plan import Plan
        from specplug.policy.estimator import estimate
        from specplug.policy.data import load_policy
        from specplug.policy.planner import plan
        from specplug.probe import resolve_hardware

        caps = StackCapabilities("vllm", "0.32.0", "pinned", {{m: None for m in SPECULATING}}, schedules=True)
        cfg = Config.model_validate({{"model": "llama-3.1-8b", "stack": {{"name": "vllm", "version": "0.32.0"}},
                                     "hardware": {{"gpu": "h100", "num_gpus": 1}}}})
        p = plan(cfg, resolve_hardware("h100", 1), caps, load_policy())
        assert p.speculation.method != "none" and p.prediction.speedup > 1
        assert estimate("llama-3.1-8b", "eagle3", gpu="h100", caps=caps).speedup > 1
        data = p.model_dump(mode="json")
        data["stack"]["name"] = "someplugin"
        assert Plan.model_validate(data).stack.name == "someplugin"
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_cli_imports_no_framework_or_stack():
    proc = _run(f"""
        import json, sys
        import specplug.cli
        print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))
    """)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_estimate_runs_with_torch_blocked():
    proc = _run("""
        import sys
        from importlib.abc import MetaPathFinder

        class Refuse(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers"):
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, Refuse())
        import specplug
        est = specplug.estimate(model="vicuna-7b", method="eagle", gpu="a100", batch_size=1)
        assert est is not None
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle in ``graph`` as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    graph = {module: _project_imports(module, top_level=True) for module in MODULES}
    # A package's __init__ running while one of its submodules imports the package is Python's normal order,
    # not a cycle: drop edges from a module to the packages that contain it.
    graph = {m: {t for t in targets if not _in(m, t)} for m, targets in graph.items()}
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("code, expected", [
    ("import specplug.config", {"specplug.config"}),
    ("from specplug.runtime import smollm2", {"specplug.runtime.smollm2"}),
    ("from specplug import config", {"specplug", "specplug.config"}),
    ("def f():\n    import specplug.config", set()),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import specplug.config", set()),
])
def test_top_level_imports_are_read_as_python_runs_them(code, expected):
    tree = ast.parse(code)
    names = set(_imports(tree, "specplug.x", False, top_level=True))
    assert {n for n in names if n in MODULES} == expected


def test_the_stack_layer_never_reaches_up_to_the_built_in_adapters():
    # The registry finds built-ins by entry point or module name at run time; nothing in specplug.stacks imports them.
    offenders = {
        module: sorted(m for m in _reach(module) if _in(m, "adapters") or _in(m, "specplug.adapters"))
        for module in MODULES
        if _in(module, "specplug.stacks")
    }
    assert {m: found for m, found in offenders.items() if found} == {}


def _terminal_imports(tree: ast.AST) -> list[str]:
    """Every rich or click module ``tree`` names in an import, anywhere (in functions, under TYPE_CHECKING) or
    through ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__")):
            names.append(node.args[0].value)
    return sorted(n for n in names if n.split(".")[0] in TERMINAL)


def test_click_and_rich_are_imported_only_by_the_face():
    # The library returns data and takes callbacks; tables, progress bars and options belong to the face.
    offenders = {}
    for module, path in MODULES.items():
        if _in_face(module):
            continue
        found = _terminal_imports(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[module] = found
    assert offenders == {}


@pytest.mark.parametrize("code, expected", [
    ("import rich", ["rich"]),
    ("def f():\n    from rich.table import Table", ["rich.table"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import click", ["click"]),
    ("import importlib\nimportlib.import_module('rich.progress')", ["rich.progress"]),
    ("from . import rich", []),  # a sibling module that happens to be called rich
    ("import richer", []),
])
def test_terminal_imports_are_found_wherever_they_hide(code, expected):
    assert _terminal_imports(ast.parse(code)) == expected
