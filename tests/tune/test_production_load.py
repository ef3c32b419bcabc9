"""specplug tune end to end with a fake runner (no server): open-loop request rates beside the concurrencies, the
decision made for the load specplug.yaml states, and the measured crossover rate in the evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplug.tune import runner
from specplug.tune.state import TrialResult
from tests.tune.helpers import trial

# The deployment: SmolLM2 on the embedded stack, two concurrent streams in production.
CONFIG = "# mine\nmodel: smollm2-135m\nstack: embedded\nworkload: {type: chat, concurrency: 2}\n"
ARGS = ("tune", "--concurrency", "1,2", "--method", "ngram", "-k", "9", "--num-prompts", "2", "--max-tokens", "8",
        "--request-rate", "1,2,4,8")
# Output tokens/s per concurrency per repeat, and TPOT p50 (ms) per request rate per repeat.
SPEEDS = {"control": {1: [100, 113], 2: [100, 101]}, "ngram-k9": {1: [101, 101.5], 2: [116, 117]}}
TPOTS = {"control": {1: [50, 50], 2: [55, 56], 4: [70, 70], 8: [120, 121]},
         "ngram-k9": {1: [30, 30], 2: [40, 40], 4: [75, 76], 8: [200, 201]}}


def _fake_runner(monkeypatch, seen: list) -> None:
    def run_trial(t, _plan, settings, _prompts, run_dir: Path, _tick=None) -> TrialResult:
        seen.append(runner.level_order(settings))
        return trial(t.id, t.method, t.k, SPEEDS[t.id], rates=TPOTS[t.id])

    monkeypatch.setattr(runner, "run_trial", run_trial)


def test_a_win_at_the_stated_load_is_kept_on_a_one_k_stack_and_the_crossover_recorded(run_cli, tmp_path, monkeypatch):
    (tmp_path / "specplug.yaml").write_text(CONFIG)
    seen: list = []
    _fake_runner(monkeypatch, seen)
    r = run_cli(*ARGS)
    assert r.exit_code == 0, r.stderr
    # Each trial loads every concurrency, then every rate (open loop), repeats interleaved.
    assert [str(x) for x in seen[0]] == ["1", "2", "1/s", "2/s", "4/s", "8/s"] * 2
    text = (tmp_path / "specplug.yaml").read_text()
    assert "method: ngram" in text and "num_speculative_tokens: 9" in text
    assert "No technique beat the control" not in r.stdout + text
    out = " ".join(r.stdout.split())  # as read, not as wrapped
    assert "beat the control at the stated load (concurrency 2) by 1.16x" in out
    assert "so it also runs at concurrency 1 (0.95x)" in out
    assert "c=1: k=9 runs here too (embedded runs one draft length at every batch size): 0.95x (0.89-1.01, inside" in out
    # ln(55.5/40) = 0.328 at 2/s and ln(70/75.5) = -0.076 at 4/s: the log gain crosses 0 at 2 * 2**0.812 = 3.51/s.
    assert "Crossover (ngram-k9): TPOT p50 stops beating the control's at about 3.51 requests/s (paid at 2/s" in out
    rep = json.loads((tmp_path / "tune" / "tune.json").read_text())
    d = rep["decision"]
    assert d["load"] == "concurrency 2" and d["mode"] == "fixed"
    assert d["crossover_request_rate"] == pytest.approx(3.51, abs=0.01)
    assert [(e["min_batch"], e.get("max_batch"), e["num_speculative_tokens"]) for e in d["schedule"]] == [(1, None, 9)]
    rows = (tmp_path / "tune" / "tune.csv").read_text().splitlines()
    assert any(",ngram-k9," in f",{row}" and ",8.0," in row and "decode_speed" in row for row in rows)


def test_a_stated_rate_is_measured_and_decided_there(run_cli, tmp_path, monkeypatch):
    (tmp_path / "specplug.yaml").write_text(CONFIG.replace("concurrency: 2}", "concurrency: 2, request_rate: 8}"))
    seen: list = []
    _fake_runner(monkeypatch, seen)
    r = run_cli(*ARGS[:-2])  # no --request-rate: the stated rate is measured
    assert r.exit_code == 0, r.stderr
    assert [str(x) for x in seen[0]] == ["1", "2", "8/s"] * 2
    assert "speculation:\n  method: none" in (tmp_path / "specplug.yaml").read_text()
    out = " ".join(r.stdout.split())
    # k=9 won at concurrency 2, but at 8 requests/s its TPOT is 0.60x the control's: the stated load decides.
    assert "At the stated load (request rate 8/s) no technique beat the control" in out
    assert "ngram k=9 did at concurrency 2 (1.16x)" in out


def test_plan_only_lists_the_rates_and_bad_rates_are_one_clear_error(run_cli, tmp_path):
    (tmp_path / "specplug.yaml").write_text(CONFIG)
    r = run_cli("tune", "--plan-only", "--concurrency", "1", "--method", "ngram", "-k", "2", "--request-rate", "0.5,2")
    assert r.exit_code == 0, r.stderr
    # The stated concurrency (2) is measured even when --concurrency leaves it out.
    assert "concurrency 1,2 and request rate 0.5,2/s (open loop), 2 repeat(s) per level" in r.stdout
    assert "The decision serves the stated load: concurrency 2 (workload.concurrency)." in r.stdout
    for bad, said in (("1,x", "'x' is not a number"), ("0", "is not a rate above 0")):
        r = run_cli("tune", "--plan-only", "--request-rate", bad)
        assert r.exit_code == 1 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
