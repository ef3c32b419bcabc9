"""The wheel is self-contained: adapters, templates, policy data, catalogs and workloads travel with it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("specplug-*.whl")
    with zipfile.ZipFile(whl) as zf:
        return set(zf.namelist())


def _repo_files(folder: str, pattern: str) -> list[Path]:
    return [p for p in (REPO / folder).rglob(pattern) if "__pycache__" not in p.parts]


def test_every_adapter_template_and_policy_file_is_in_the_wheel(wheel_names):
    mapping = {"adapters": "specplug/adapters", "templates": "specplug/templates", "policies": "specplug/policies"}
    for folder, pkg in mapping.items():
        for f in _repo_files(folder, "*"):
            if f.is_file() and f.suffix in {".py", ".j2", ".yaml", ".json"}:
                rel = f.relative_to(REPO / folder).as_posix()
                assert f"{pkg}/{rel}" in wheel_names, f"{folder}/{rel} is missing from the wheel"


def test_catalog_data_and_package_data_are_in_the_wheel(wheel_names):
    for f in _repo_files("specplug", "*"):
        if f.is_file() and f.suffix in {".csv", ".yaml", ".jsonl", ".json", ".j2"}:
            rel = f.relative_to(REPO).as_posix()
            assert rel in wheel_names, f"{rel} is missing from the wheel"


def test_console_script_is_declared(wheel_names):
    entry = next(n for n in wheel_names if n.endswith("entry_points.txt"))
    assert entry
