"""A third-party adapter, installed from another distribution, works in stacks, recommend and render.

The adapter and its packaging are exactly the code blocks of docs/writing-an-adapter.md.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing-an-adapter.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    src = tmp_path_factory.mktemp("toyserve")
    (src / "specplug_toyserve.py").write_text(_blocks("python")[0], encoding="utf-8")
    (src / "pyproject.toml").write_text(_blocks("toml")[0], encoding="utf-8")
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(src)],
        check=True, capture_output=True, text=True,
    )
    return {**os.environ, "PYTHONPATH": str(site), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specplug.cli", *args], env=env, cwd=cwd, capture_output=True, text=True)


def test_the_installed_plugin_is_listed_with_what_it_runs(plugin_env, tmp_path) -> None:
    r = _cli(plugin_env, tmp_path, "stacks", "--output", "json")
    assert r.returncode == 0, r.stderr
    toy = next(s for s in json.loads(r.stdout)["stacks"] if s["name"] == "toyserve")
    assert toy["supported"] == ["ngram"] and not json.loads(r.stdout)["broken_plugins"]


def test_recommend_plans_for_the_plugin_stack(plugin_env, tmp_path) -> None:
    r = _cli(plugin_env, tmp_path, "recommend", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "1",
             "--stack", "toyserve", "--workload", "code-edit", "--output", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["stack"]["name"] == "toyserve" and plan["speculation"]["method"] == "ngram"
    assert any("default" in w for w in plan["warnings"])  # costed with the named default factors, and says so


def test_render_writes_the_plugins_command(plugin_env, tmp_path) -> None:
    r = _cli(plugin_env, tmp_path, "render", "toyserve", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "1",
             "--method", "ngram", "-k", "4", "-o", str(tmp_path / "deploy"))
    assert r.returncode == 0, r.stderr
    text = "\n".join(p.read_text() for p in (tmp_path / "deploy").iterdir() if p.is_file())
    assert "toyserve" in text and "--speculate prompt-lookup" in text and "--k 4" in text


def test_an_unregistered_stack_is_a_clear_error_listing_the_registered_ones(plugin_env, tmp_path) -> None:
    r = _cli(plugin_env, tmp_path, "recommend", "--model", "llama-3.1-8b", "--stack", "toyservee")
    assert r.returncode == 2 and "toyserve" in r.stderr and "Traceback" not in r.stderr
