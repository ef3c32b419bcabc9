"""Shared fixtures: run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


@pytest.fixture
def run_cli(capsys, monkeypatch, tmp_path):
    """Run ``specplug ARGS`` through the real entry point (exit codes included), in a scratch folder."""
    from specplug.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """A clean Hugging Face environment: its own cache, no token, online, and no real Hub to reach."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    from huggingface_hub import constants

    # huggingface_hub reads HF_HUB_OFFLINE once, at import: another test's offline setting must not leak in.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path / "hf" / "hub"


@pytest.fixture
def fake_hub(hub_env, monkeypatch):
    """The fake Hub on 127.0.0.1 with the model configs and drafters of tests/catalog, HF_ENDPOINT pointing at it."""
    from tests.catalog.hubfake import FakeHub, drafter_repos, fixture_repos

    with FakeHub({**fixture_repos(), **drafter_repos()}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub
