"""--request-rate and the SLO flags: recommend and estimate print both arms and carry the same JSON 'load' object."""

from __future__ import annotations

import pytest

ARGS = ("--model", "qwen3-8b", "--gpu", "h100", "--request-rate", "8", "--input-len", "2048", "--output-len", "256")
ARM = {"running_batch", "tpot_ms_p50", "ttft_ms_p50", "output_tokens_per_s"}


@pytest.mark.parametrize("command", [("recommend",), ("estimate", "--method", "eagle3")])
def test_json_carries_the_load_object(run_cli, command) -> None:
    r = run_cli(*command, *ARGS, "--slo-tpot-ms", "20", "--output", "json")
    assert r.exit_code == 0, r.stderr
    d = r.json()
    load = d["load"]
    assert load["request_rate"] == 8
    assert load["capacity_requests"] == d["capacity_requests"] >= 1
    assert load["baseline"].keys() >= ARM and load["speculative"].keys() >= ARM
    assert "crossover_request_rate" in load
    assert set(load["saturation_request_rate"]) == {"baseline", "speculative"}
    assert set(load["max_request_rate_within_slo"]) == {"baseline", "speculative"}


def test_recommend_prints_both_arms_and_the_crossover(run_cli) -> None:
    r = run_cli("recommend", *ARGS, "--slo-tpot-ms", "20")
    assert r.exit_code == 0, r.stderr
    assert "no speculation" in r.stdout and "TPOT ms p50/p90" in r.stdout and "TTFT ms p50/p90" in r.stdout
    assert "max req/s within SLO" in r.stdout
    # The running batch comes from the rate: the summary does not claim the default concurrency of 1.
    assert "Poisson arrivals" in r.stdout and "1 concurrent" not in r.stdout
    assert "Crossover" in r.stdout or "up to the baseline's saturation" in r.stdout or "at any request rate" in r.stdout


def test_every_plan_states_its_capacity(run_cli) -> None:
    r = run_cli("recommend", "--model", "llama-3.1-8b", "--gpu", "l4", "--num-gpus", "1", "--output", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["capacity_requests"] >= 1 and r.json()["load"] is None


def test_a_zero_request_rate_is_refused(run_cli) -> None:
    r = run_cli("recommend", "--model", "qwen3-8b", "--request-rate", "0")
    assert r.exit_code == 2 and "--request-rate" in r.stderr


def test_plot_draws_both_arms_against_the_rate(run_cli, tmp_path) -> None:
    out = tmp_path / "load.png"
    r = run_cli("recommend", *ARGS, "--plot", str(out), "--output", "json")
    assert r.exit_code == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sweep = r.json()["load"]["sweep"]
    assert len(sweep) >= 10 and sweep[0]["request_rate"] < 8 < sweep[-1]["request_rate"]


def test_plot_without_a_rate_says_what_is_missing(run_cli, tmp_path) -> None:
    r = run_cli("estimate", "--model", "qwen3-8b", "--method", "ngram", "--gpu", "h100", "--plot", str(tmp_path / "x.png"))
    assert r.exit_code == 1 and "--request-rate" in r.stderr and not (tmp_path / "x.png").exists()
