"""A fake Hub for the catalog tests: HF_ENDPOINT points at it, HF_HOME at the test's own folder."""

from __future__ import annotations

import pytest

from tests.catalog.hubfake import FakeHub, drafter_repos, fixture_repos


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
    with FakeHub({**fixture_repos(), **drafter_repos()}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub
