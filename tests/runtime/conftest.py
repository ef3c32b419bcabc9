"""Shared fixtures for the runtime tests: the device they run on, and the packaged SmolLM2 (fetched and
converted once, then cached).

``SPECPLUG_TEST_DEVICE=cuda`` runs the losslessness tests (engine, verifier, decoder, SmolLM2) on a GPU; the
default is the CPU, which is where CI runs them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DEVICE_ENV = "SPECPLUG_TEST_DEVICE"


@pytest.fixture(scope="session")
def device():
    torch = pytest.importorskip("torch")
    name = os.environ.get(DEVICE_ENV, "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(f"{DEVICE_ENV}={name}, but torch sees no CUDA GPU")
    return torch.device(name)


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
