"""specplug.yaml edited in place: the speculation block replaced, every other line kept."""

from __future__ import annotations

import pytest

from specplug.config import parse_config
from specplug.errors import ConfigError
from specplug.tune.writeback import set_top_level, write_decision

CONFIG = """# my deployment
model: qwen3-8b   # the 8B
stack: vllm
speculation:
  method: eagle3   # tried by hand
  num_speculative_tokens: 3

# serving below
serve: {port: 9000}
"""

SPEC = {"method": "ngram", "num_speculative_tokens": 4,
        "schedule": [{"min_batch": 1, "max_batch": 15, "num_speculative_tokens": 4},
                     {"min_batch": 16, "num_speculative_tokens": 0}]}


def test_speculation_replaced_and_the_rest_kept(tmp_path):
    p = tmp_path / "specplug.yaml"
    p.write_text(CONFIG)
    text = write_decision(p, SPEC, "# Set by 'specplug tune' today: ngram won.", "calibration.yaml")
    assert text.startswith("# my deployment\nmodel: qwen3-8b   # the 8B\nstack: vllm\n")
    assert "# serving below\nserve: {port: 9000}\n" in text and "eagle3" not in text
    cfg = parse_config(text)
    assert cfg.speculation.method == "ngram" and cfg.speculation.schedule[1].num_speculative_tokens == 0
    assert cfg.calibration == "calibration.yaml"
    # A second tune replaces its own comment instead of stacking another.
    again = write_decision(p, {"method": "none"}, "# Set by 'specplug tune' tomorrow: nothing won.", "calibration.yaml")
    assert again.count("specplug tune") == 1 and "nothing won" in again
    assert parse_config(again).speculation.method == "none"
    assert again.count("calibration:") == 1


def test_missing_key_is_appended_and_an_auto_scalar_replaced():
    assert set_top_level("model: x", "speculation", {"method": "none"}) == "model: x\nspeculation:\n  method: none\n"
    assert set_top_level("speculation: auto\nmodel: x\n", "speculation", {"method": "none"}) == (
        "speculation:\n  method: none\nmodel: x\n")


def test_a_file_that_would_not_load_is_never_written(tmp_path):
    p = tmp_path / "specplug.yaml"
    p.write_text(CONFIG)
    with pytest.raises(ConfigError):
        write_decision(p, {"method": "ngram", "num_speculative_tokens": 99}, "# Set by 'specplug tune'")
    assert p.read_text() == CONFIG
