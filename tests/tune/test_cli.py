"""specplug tune's command line: the printed trial plan, and bad input as one clear error."""

from __future__ import annotations

import pytest

CONFIG = "model: smollm2-135m\nstack: embedded\nworkload: {type: chat, concurrency: 4}\n"


def test_plan_only_prints_what_will_run_in_order_and_starts_nothing(run_cli, tmp_path):
    (tmp_path / "specplug.yaml").write_text(CONFIG)
    r = run_cli("tune", "--plan-only", "--concurrency", "1,4", "--method", "ngram,draft_model", "-k", "1-3",
                "--budget", "20m")
    assert r.exit_code == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("│")]
    assert [ln.split("│")[2].strip() for ln in rows][:3] == ["control", "ngram-k3", "draft_model-k3"]
    assert "launch(es); concurrency 1,4, 2 repeat(s) per level" in r.stdout and "rough prior" in r.stdout
    assert "--budget left out" in r.stdout
    assert not (tmp_path / "tune").exists() and (tmp_path / "specplug.yaml").read_text() == CONFIG


@pytest.mark.parametrize(
    ("args", "config", "code", "message"),
    [
        (["--plan-only"], None, 1, "No specplug.yaml here"),
        (["--plan-only", "--method", "warp"], CONFIG, 1, "unknown method 'warp'"),
        (["--plan-only", "--budget", "soon"], CONFIG, 1, "is not a duration"),
        (["--plan-only", "--budget", "1s"], CONFIG, 1, "below the least that decides anything"),
        (["--plan-only", "-k", "0-3"], CONFIG, 1, "values must lie in 1..64"),
        (["--plan-only", "--concurrency", "1,x"], CONFIG, 2, "not a concurrency"),
        (["--plan-only", "--workload", "poems"], CONFIG, 1, "Unknown workload 'poems'"),
        (["--plan-only", "--traffic", "missing.jsonl"], CONFIG, 1, "missing.jsonl"),
    ],
)
def test_bad_input_is_one_clear_error_not_a_crash(run_cli, tmp_path, args, config, code, message):
    if config:
        (tmp_path / "specplug.yaml").write_text(config)
    r = run_cli("tune", *args)
    assert r.exit_code == code and message in r.stderr, r.stderr
    assert "Internal error" not in r.stderr
