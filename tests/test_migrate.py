"""specplug migrate: old schema versions are rewritten with their comments; current files are left alone."""

from __future__ import annotations

import pytest

from specplug.config import SCHEMA_VERSION, parse_config
from specplug.errors import SpecplugError
from specplug.migrate import MIGRATIONS, migrate_text

V0 = """\
# Production chat deployment (owner: infra)
model: llama-3.1-8b   # the target
gpu: h100             # SXM boards
num_gpus: 2
stack: vllm
speculation:
  method: ngram
  draft_tokens: 4     # tuned in March
"""


def test_registry_reaches_the_current_version():
    v = 0
    while v < SCHEMA_VERSION:
        assert v in MIGRATIONS
        v += 1


def test_v0_is_rewritten_keeping_comments():
    r = migrate_text(V0)
    assert (r.from_version, r.to_version) == (0, 1)
    assert "# Production chat deployment (owner: infra)" in r.text
    assert "  gpu: h100             # SXM boards" in r.text
    assert "  num_speculative_tokens: 4     # tuned in March" in r.text
    assert "model: llama-3.1-8b   # the target" in r.text
    cfg = parse_config(r.text)
    assert cfg.hardware.gpu == "h100" and cfg.hardware.num_gpus == 2
    assert cfg.speculation.num_speculative_tokens == 4
    assert any("draft_tokens" in c for c in r.changes) and any("hardware.gpu" in c for c in r.changes)


def test_flow_style_and_hardware_auto():
    r = migrate_text("version: 0\nhardware: auto  # was auto\nspeculation: {method: ngram, draft_tokens: 3}\ngpus_per_node: 4\n")
    cfg = parse_config(r.text)
    assert cfg.hardware.gpus_per_node == 4 and cfg.speculation.num_speculative_tokens == 3
    assert "# was auto" in r.text


def test_conflicting_layout_is_refused_with_what_to_do():
    with pytest.raises(SpecplugError, match="merge them under 'hardware:' by hand"):
        migrate_text("gpu: h100\nhardware: {gpu: a100}\n")


def test_cli_migrates_current_files_untouched(run_cli, tmp_path):
    f = tmp_path / "specplug.yaml"
    f.write_text(V0)
    r = run_cli("migrate", "--check")
    assert r.exit_code == 1 and "needs migrating from schema version 0 to 1" in r.stdout
    assert f.read_text() == V0
    r = run_cli("migrate", "--diff")
    assert r.exit_code == 0 and "+  num_speculative_tokens: 4" in r.stdout
    after = f.read_text()
    r = run_cli("migrate")
    assert r.exit_code == 0 and "already at schema version 1" in r.stdout
    assert f.read_text() == after


def test_check_points_old_files_at_migrate(run_cli, tmp_path):
    (tmp_path / "specplug.yaml").write_text(V0)
    r = run_cli("check")
    assert r.exit_code == 1 and "specplug migrate" in r.stdout
