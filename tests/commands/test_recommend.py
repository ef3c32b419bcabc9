"""specplug recommend / policy show from the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from click.testing import CliRunner

from specplug.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_recommend_json_is_the_plan() -> None:
    r = _run("recommend", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--batch-size", "1",
             "--workload", "chat", "--stack", "vllm", "--output", "json")
    assert r.exit_code == 0
    plan = json.loads(r.output)
    assert plan["speculation"]["method"] != "none"
    assert plan["prediction"]["speedup"] > 1.3
    assert plan["memory"]["fits"] is True


def test_recommend_table_shows_choice_memory_and_candidates() -> None:
    r = _run("recommend", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--stack", "vllm")
    assert r.exit_code == 0
    assert "memory per GPU" in r.output and "candidates" in r.output


def test_recommend_that_cannot_fit_exits_1_with_the_fixes_and_no_headline() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "specplug.cli", "recommend", "--model", "llama-3.1-70b", "--gpu", "l4", "--num-gpus", "1"],
        capture_output=True, text=True,
    )
    assert p.returncode == 1 and not p.stdout
    assert "does not fit" in p.stderr and "--num-gpus 8: fits" in p.stderr and "Traceback" not in p.stderr


def test_unknown_model_exits_nonzero_with_a_clean_message() -> None:
    p = subprocess.run([sys.executable, "-m", "specplug.cli", "recommend", "--model", "llama-9000b"], capture_output=True, text=True)
    assert p.returncode == 1
    assert "Unknown model" in p.stderr and "Traceback" not in p.stderr


def test_policy_show_prints_merged_policy(tmp_path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("rules:\n  min_speedup: 1.2\n")
    r = _run("policy", "show", "--policy", str(f), "--output", "json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["rules"]["min_speedup"] == 1.2
    assert "eagle3" in data["acceptance"]["methods"]


def test_a_reader_that_stops_early_is_no_failure() -> None:
    """``specplug recommend | head -1``: the reader closes the pipe before the table is printed. rich's default
    exits 1 there, which fails the pipeline under ``set -o pipefail``."""
    for fmt in ("table", "json"):
        p = subprocess.Popen([sys.executable, "-m", "specplug.cli", "recommend", "--model", "llama-3.1-70b",
                              "--output", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.close()  # before anything is written: every write meets a broken pipe
        err = p.stderr.read()
        assert p.wait(timeout=60) == 0, (fmt, err)
        assert err == b"", (fmt, err)


def test_recommend_shows_the_best_shapes_with_their_basis() -> None:
    # Llama-3.1-8B on one H200 with SGLang: the tree the plan picks, beside the best chain, each with its basis.
    args = ("recommend", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "1", "--stack", "sglang")
    plan = json.loads(_run(*args, "--output", "json").output)
    alts = plan["alternatives"]
    assert 2 <= len(alts) <= 3 and sum(a["chosen"] for a in alts) == 1
    assert [a["speedup"] for a in alts] == sorted((a["speedup"] for a in alts), reverse=True)
    assert {bool(a["tree"]) for a in alts} == {True, False}  # a tree and a chain, whichever is chosen
    for a in alts:
        assert a["acceptance_length"] > 1.0 and a["basis"] and a["num_speculative_tokens"] >= 1
    chosen = next(a for a in alts if a["chosen"])
    assert chosen["num_speculative_tokens"] == plan["speculation"]["num_speculative_tokens"]
    assert chosen["speedup"] == plan["prediction"]["speedup"]
    table = _run(*args).output
    assert "shapes for eagle3" in table and "CHOSEN" in table


def test_shapes_within_the_models_error_are_said_to_be() -> None:
    from specplug.planning import recommend

    plan = recommend(model="llama-3.1-8b", gpu="h200", num_gpus=1, stack="sglang", batch_size=8)
    tied = [a for a in plan.alternatives if a.within_error]
    chosen = next(a for a in plan.alternatives if a.chosen)
    for a in plan.alternatives:
        close = not a.chosen and abs(math.log(a.speedup / chosen.speedup)) <= plan_error()
        assert a.within_error == close
    if tied:
        assert any("within the model's error" in r for r in plan.reasons)


def plan_error() -> float:
    from specplug.policy.data import load_policy

    return load_policy().rules.shape_error + 1e-3  # speedups are rounded to 3 digits in the plan
