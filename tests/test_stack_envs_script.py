"""scripts/stack_envs.sh runs pip quietly: the resolver's expected complaints about a --no-deps install become one
line, while a failing pip, or an unexpected ERROR line, is still shown (checked with a fake pip)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "stack_envs.sh"
# What pip printed while building the SGLang venv (sglang installed with --no-deps, then the pinned subset).
RESOLVER = """ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. \
This behaviour is the source of the following dependency conflicts.
sglang 0.5.23 requires anthropic>=0.20.0, which is not installed.
sglang 0.5.23 requires blobfile==3.0.0, which is not installed.
sglang 0.5.23 requires torch==2.9.1, but you have torch 2.14.1 which is incompatible.
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _pip_quiet(tmp_path: Path, output: str, rc: int) -> subprocess.CompletedProcess:
    fake = tmp_path / "pip"
    (tmp_path / "said.txt").write_text(output)
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'said.txt'}'\nexit {rc}\n")
    fake.chmod(0o755)
    cmd = f"source '{SCRIPT}'; pip_quiet '{tmp_path / 'pip.log'}' '{fake}' install -q x"
    env = {"PATH": "/usr/bin:/bin", "SPECPLUG_STACKENVS": str(tmp_path / "envs"), "HOME": str(tmp_path)}
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env)


def test_expected_resolver_complaints_are_one_line(tmp_path):
    r = _pip_quiet(tmp_path, "Collecting x\n" + RESOLVER, 0)
    assert r.returncode == 0
    assert "which is not installed" not in r.stderr and "ERROR" not in r.stderr and "Collecting" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "3 declared requirement(s) unmet" in r.stderr
    assert (tmp_path / "pip.log").read_text().count("requires") == 3  # everything is kept in the log


def test_a_failing_pip_shows_everything(tmp_path):
    r = _pip_quiet(tmp_path, "ERROR: Could not find a version that satisfies the requirement x\n", 1)
    assert r.returncode == 1
    assert "pip failed" in r.stderr and "Could not find a version" in r.stderr


def test_an_unexpected_error_line_is_kept(tmp_path):
    r = _pip_quiet(tmp_path, RESOLVER + "ERROR: something else went wrong\n", 0)
    assert r.returncode == 0 and "ERROR: something else went wrong" in r.stderr
    assert "dependency resolver" not in r.stderr


def test_sourcing_builds_nothing(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "SPECPLUG_STACKENVS": str(tmp_path / "envs"), "HOME": str(tmp_path)}
    r = subprocess.run(["bash", "-c", f"source '{SCRIPT}'; echo sourced"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout == "sourced\n" and r.stderr == ""
