"""bench, verify and calibrate against real embedded servers: speculation on (n-gram k=4) and off."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench_dir(embedded_pair, tmp_path_factory):
    """One bench run shared by the tests below (it is the slow part): code-edit at concurrency 1 and 4."""
    from specplug.cli import main

    spec_url, base_url = embedded_pair
    out = tmp_path_factory.mktemp("bench")
    try:
        main([
            "bench", "--endpoint", spec_url, "--baseline", base_url, "--workload", "code-edit", "--concurrency", "1,4",
            "--num-prompts", "4", "--max-tokens", "32", "-o", str(out),
        ])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return out


def test_bench_writes_json_csv_png_with_acceptance_and_speedup(bench_dir, run_cli):
    data = json.loads((bench_dir / "bench.json").read_text())
    assert data["complete"] and data["stack"] == "embedded" and data["workload"] == "code-edit"
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 4]
    for lv in data["levels"]:
        spec, base = lv["speculative"], lv["baseline"]
        assert spec["requests"] == 4 and base["requests"] == 4 and spec["failed"] == 0
        acc = spec["acceptance"]
        assert acc["source"] == "vllm counters" and acc["accepted_tokens"] > 0
        assert acc["mean_acceptance_length"] > 1.0 and 0 < acc["acceptance_rate"] <= 1
        assert len(acc["per_position"]) == 4
        assert base["acceptance"] is None or not base["acceptance"]["drafts"]  # speculation off: nothing drafted
        assert lv["speedup"] > 0 and spec["ttft_s"]["p50"] > 0 and spec["tpot_s"]["p99"] >= spec["tpot_s"]["p50"]
    assert data["verdict"]
    rows = list(csv.DictReader((bench_dir / "bench.csv").open()))
    assert [(r["concurrency"], r["role"]) for r in rows] == [
        ("1", "speculative"), ("1", "baseline"), ("4", "speculative"), ("4", "baseline")
    ]
    assert (bench_dir / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The saved record re-prints without touching a server.
    r = run_cli("bench", "--load", str(bench_dir / "bench.json"))
    assert r.exit_code == 0 and "acc len" in r.stdout and "speedup" in r.stdout and "code-edit" in r.stdout


def test_verify_reports_identical_greedy_outputs(embedded_pair, run_cli):
    spec_url, base_url = embedded_pair
    r = run_cli("verify", "--endpoint", spec_url, "--baseline", base_url, "--workload", "code-edit",
                "--num-prompts", "3", "--max-tokens", "32", "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    rep = r.json()
    assert rep["prompts"] == 3 and rep["identical"] == 3 and rep["share_identical"] == 1.0 and rep["systematic"] == 0
    t = run_cli("verify", "--endpoint", spec_url, "--baseline", base_url, "--workload", "chat", "--num-prompts", "1",
                "--max-tokens", "16")
    assert t.exit_code == 0 and "1/1 identical (100%)" in t.stdout and "Lossless" in t.stdout


def test_calibrate_moves_the_estimate_to_the_measurement(bench_dir, run_cli, tmp_path):
    out = tmp_path / "calibration.yaml"
    out.write_text(yaml.safe_dump({"version": 1, "entries": [
        {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "method": "ngram", "workload": "chat", "acceptance_rate": 0.3}
    ]}))
    r = run_cli("calibrate", "--from", str(bench_dir), "--model", "smollm2-135m", "--method", "ngram",
                "--gpu", "l4", "-o", str(out), "--output", "json")
    assert r.exit_code == 0, r.stderr
    rep = r.json()
    assert rep["stack"] == "embedded" and rep["num_speculative_tokens"] == 4 and rep["workload"] == "code-edit"
    measured = json.loads((bench_dir / "bench.json").read_text())
    for row in rep["rows"]:
        m, before, after = row["measured"]["acceptance_length"], row["before"]["acceptance_length"], row["after"]["acceptance_length"]
        assert abs(after - m) < abs(before - m) or abs(after - m) < 0.05
    pooled = sum(lv["speculative"]["acceptance"]["accepted_tokens"] for lv in measured["levels"]) / sum(
        lv["speculative"]["acceptance"]["drafts"] for lv in measured["levels"]
    ) + 1
    assert rep["rows"][0]["after"]["acceptance_length"] == pytest.approx(pooled, abs=0.05)
    written = yaml.safe_load(out.read_text())
    # Merged: the unrelated entry stays, the new one matches the setup.
    assert [e["workload"] for e in written["entries"]] == ["chat", "code-edit"]
    new = written["entries"][1]
    assert new["stack"] == "embedded" and new["num_speculative_tokens"] == 4 and new["measured_speedup"] > 0
    from specplug.planning import estimate
    from specplug.policy.calibration import load_calibration

    assert len(load_calibration(out).entries) == 2
    e = estimate("smollm2-135m", "ngram", gpu="l4", stack="embedded", workload="code-edit", num_speculative_tokens=4,
                 calibration=str(out))
    assert e.calibrated and e.acceptance_length == pytest.approx(pooled, abs=0.05)
    # Calibrating again replaces the entry for this setup instead of piling up duplicates.
    again = run_cli("calibrate", "--from", str(bench_dir / "bench.json"), "--model", "smollm2-135m", "--method", "ngram",
                    "--gpu", "l4", "-o", str(out))
    assert again.exit_code == 0 and "predicted before" in again.stdout and "measured" in again.stdout
    assert len(yaml.safe_load(out.read_text())["entries"]) == 2


def test_verify_json_schema_reports_valid_and_identical_structured_outputs(embedded_pair, run_cli, tmp_path):
    spec_url, base_url = embedded_pair
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({
        "type": "object", "properties": {"title": {"type": "string", "maxLength": 24}, "lines": {"type": "integer"}},
        "required": ["title", "lines"], "additionalProperties": False,
    }))
    r = run_cli("verify", "--endpoint", spec_url, "--baseline", base_url, "--workload", "chat", "--num-prompts", "2",
                "--max-tokens", "64", "--json-schema", str(schema), "--lora", "smollm2-135m", "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    rep = r.json()
    assert rep["identical"] == 2 and rep["json_schema"] == str(schema) and rep["model"] == "smollm2-135m"
    checks = {c["role"]: c for c in rep["schema_checks"]}
    assert set(checks) == {"speculative", "baseline"}
    for c in checks.values():
        assert c["outputs"] == c["parsed"] == c["valid"] == 2 and c["truncated"] == 0
    t = run_cli("verify", "--endpoint", spec_url, "--baseline", base_url, "--workload", "chat", "--num-prompts", "1",
                "--max-tokens", "64", "--json-schema", str(schema))
    assert t.exit_code == 0 and "JSON schema" in t.stdout and "speculative" in t.stdout
