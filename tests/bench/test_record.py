"""The bench record: the stop-paying verdict, and that bench.json/CSV/PNG round-trip."""

from __future__ import annotations

import csv

from specplug.bench.metrics import Acceptance
from specplug.bench.record import BenchRecord, Level, Percentiles, RunStats, load_record
from specplug.bench.report import write_outputs


def _level(conc: int, spec_tps: float, base_tps: float) -> Level:
    acc = Acceptance(source="vllm counters", drafts=10, draft_tokens=40, accepted_tokens=20, acceptance_rate=0.5,
                     mean_acceptance_length=3.0, per_position=[0.8, 0.6, 0.4, 0.2])
    return Level(
        concurrency=conc,
        speculative=RunStats(role="speculative", concurrency=conc, requests=8, output_tokens=800,
                             output_tokens_per_s=spec_tps, tpot_s=Percentiles.of([0.01, 0.02]), acceptance=acc),
        baseline=RunStats(role="baseline", concurrency=conc, requests=8, output_tokens=800,
                          output_tokens_per_s=base_tps, tpot_s=Percentiles.of([0.02, 0.03])),
    )


def test_verdict_names_the_concurrency_where_speculation_stops_paying():
    rec = BenchRecord(endpoint="http://a", baseline="http://b",
                      levels=[_level(1, 200, 100), _level(4, 500, 400), _level(16, 900, 1000), _level(64, 1000, 1500)])
    rec.finish()
    assert rec.pays_up_to == 4 and rec.stops_paying_at == 16
    assert "pays up to concurrency 4 and stops paying at 16" in rec.verdict
    assert rec.levels[0].speedup == 2.0 and abs(rec.levels[0].tpot_speedup - 0.025 / 0.015) < 1e-9
    all_pay = BenchRecord(endpoint="http://a", levels=[_level(1, 2, 1)])
    all_pay.finish()
    assert "pays at every measured concurrency" in all_pay.verdict and all_pay.stops_paying_at is None
    none_pay = BenchRecord(endpoint="http://a", levels=[_level(1, 1, 2)])
    none_pay.finish()
    assert none_pay.stops_paying_at == 1 and "does not pay" in none_pay.verdict


def test_percentiles_interpolate_like_numpy():
    p = Percentiles.of([1.0, 2.0, 3.0, 4.0])
    assert (p.p50, p.p90, p.mean) == (2.5, 3.7, 2.5)
    assert Percentiles.of([]).p50 is None


def test_outputs_round_trip(tmp_path, run_cli):
    rec = BenchRecord(endpoint="http://a", baseline="http://b", workload="rag", api_key_env="MY_KEY",
                      levels=[_level(1, 200, 100), _level(8, 300, 350)], complete=True)
    rec.finish()
    write_outputs(rec, tmp_path)
    again = load_record(tmp_path / "bench.json")
    assert again == rec
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert rows[0]["speedup"] == "2.0" and rows[0]["per_position"] == "0.8000 0.6000 0.4000 0.2000"
    assert rows[1]["role"] == "baseline" and rows[1]["speedup"] == ""
    assert (tmp_path / "bench.png").stat().st_size > 5000
    r = run_cli("bench", "--load", str(tmp_path), "--output", "json")
    assert r.exit_code == 0 and r.json()["stops_paying_at"] == 8 and r.json()["api_key_env"] == "MY_KEY"
