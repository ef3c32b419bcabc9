"""benchmarks/load_model.py's arithmetic, on result files written by hand: the steady-state throughput window,
the calibration's step-cost line, and the measured saturation and crossover rates (the servers are not started)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "load_model.py"


@pytest.fixture(scope="module")
def lm():
    spec = importlib.util.spec_from_file_location("load_model_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up while being built
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def _result(starts: list[float], ttft: float, gap: float, tokens: int) -> dict:
    return {"start_times": starts, "ttfts": [ttft] * len(starts), "itls": [[gap] * (tokens - 1)] * len(starts),
            "latencies": [ttft + gap * (tokens - 1)] * len(starts), "output_throughput": 1.0}


def test_steady_throughput_leaves_out_the_ramp_and_the_drain(lm):
    # One request a second for 20 s, 10 tokens each over 1 s: 10 tokens/s in steady state, whatever the tail.
    res = _result([float(i) for i in range(20)], 0.1, 0.1, 10)
    assert lm.steady_tokens_per_s(res) == pytest.approx(10.0, rel=0.1)
    assert lm.arrival_rate(res) == pytest.approx(1.0)
    # Speculation streams several tokens per chunk: 10 tokens in 4 chunks still count as 10.
    chunky = {**res, "itls": [[0.3, 0.3, 0.3]] * 20, "output_lens": [10] * 20}
    assert lm.steady_tokens_per_s(chunky) == pytest.approx(10.0, rel=0.1)
    short = _result([0.0, 0.5], 0.1, 0.1, 10)
    assert lm.steady_tokens_per_s(short) == 1.0  # too short a window: the run's own figure


def test_saturation_and_crossover_are_read_between_measured_rates(lm):
    def row(rate, tpot, tokens_per_s):
        return {"rate": rate, "meas": lm.Measured(completed=8, failed=0, tpot_ms_p50=tpot, ttft_ms_p50=100.0,
                                                  tokens_per_s=tokens_per_s, requests_per_s=rate, arrival_rate=rate)}

    base = lm.ArmResult(server="x", arm="none", rows=[row(1, 50, 24), row(2, 60, 48), row(4, 90, 60)])
    spec = lm.ArmResult(server="x", arm="ngram", rows=[row(1, 30, 24), row(2, 70, 47), row(4, 120, 40)])
    # 24 output tokens per request: 4/s needs 96 tokens/s, and 60 is under 90% of it.
    assert lm.measured_saturation(base.rows, 24) == (2, 4)
    assert lm.measured_crossover(base, spec) == (1, 2)
    rates = [1, 2, 4]
    assert lm._within_one_step(1.5, 1, 2, rates) and lm._within_one_step(3.9, 1, 2, rates)
    assert not lm._within_one_step(None, 1, 2, rates) and lm._within_one_step(None, 4, None, rates)


def test_a_loss_counts_only_beyond_the_repeats_spread(lm):
    def row(rate, *tpots):
        reps = [lm.Measured(completed=8, failed=0, tpot_ms_p50=t, ttft_ms_p50=100.0, tokens_per_s=10.0,
                            requests_per_s=rate, arrival_rate=rate) for t in tpots]
        return {"rate": rate, "meas": lm.mean_of(reps), "repeats": reps}

    rates = [1.0, 2.4, 3.7, 5.2]
    base = lm.ArmResult(server="x", arm="none", rows=[row(1.0, 48, 49), row(2.4, 49, 50), row(3.7, 50, 53),
                                                      row(5.2, 70, 71)])
    # At 3.7/s speculation is 4% slower on average, but its fastest repeat beats the baseline's slowest: a tie.
    spec = lm.ArmResult(server="x", arm="ngram", rows=[row(1.0, 43, 44), row(2.4, 45, 47), row(3.7, 52, 55),
                                                       row(5.2, 67, 69)])
    assert [lm.verdict(b, sp) for b, sp in zip(base.rows, spec.rows, strict=True)] == ["win", "win", "tie", "win"]
    assert lm.measured_crossover(base, spec) == (5.2, None)
    assert lm._within_one_step(None, 5.2, None, rates)
    assert base.rows[2]["meas"].tpot_ms_p50 == pytest.approx(51.5)
    # A loss beyond the spread at 5.2/s: the crossover lies after the last win (2.4) and at or before 5.2.
    spec.rows[3] = row(5.2, 75, 77)
    assert lm.measured_crossover(base, spec) == (2.4, 5.2)
    assert lm._within_one_step(4.5, 2.4, 5.2, rates) and lm._within_one_step(1.5, 2.4, 5.2, rates)
    assert not lm._within_one_step(0.5, 2.4, 5.2, rates)
    # "Never, up to saturation" is one step from a first loss at the last (past-saturation) rate, not before it.
    assert lm._within_one_step(None, 2.4, 5.2, rates) and not lm._within_one_step(None, 1.0, 3.7, rates)


def test_the_step_cost_follows_every_profile_point(lm):
    # A speculative pass turning compute-bound: 40 ms at 1, 60 at 4, 150 at 8 (a line through 1 and 4 says 87).
    step = lm._through([1.0, 4.0, 8.0], [40.0, 60.0, 150.0])
    assert step(1) == 40.0 and step(8) == 150.0 and step(6) == pytest.approx(105.0)
    assert step(10) == pytest.approx(195.0)  # past the last point, the last segment's slope
    assert lm._through([1.0], [7.0])(5) == 7.0


def test_a_step_is_the_gap_between_chunks_and_tokens_per_step_their_size(lm):
    # Two speculative requests: 24 tokens in 12 chunks 80 ms apart, and 24 in 8 chunks 90 ms apart.
    res = {"itls": [[0.080] * 11, [0.090] * 7], "output_lens": [24, 24]}
    got = lm.chunk_figures(res)
    assert got["itl_ms_p50"] == pytest.approx(80.0)
    assert got["tokens_per_chunk"] == pytest.approx((2.0 + 3.0) / 2)
    assert lm.chunk_figures({"itls": [], "output_lens": []}) == {}


def test_tokens_per_step_may_fall_with_the_batch_and_stay_flat_past_the_profile(lm):
    per = lm._through([1.0, 4.0, 8.0], [1.6, 1.3, 1.2], rising=False)
    assert per(1) == 1.6 and per(4) == pytest.approx(1.3) and per(16) == pytest.approx(1.2)


def test_a_joining_prefill_stalls_the_others_as_the_stack_schedules_it(lm, tmp_path):
    # A profile at c=1 and c=4: TTFT 150 ms alone, one step every 40 ms (50 at c=4).
    for c, gap in ((1, 0.040), (4, 0.050)):
        res = {**_result([0.0, 0.1], 0.150, gap, 24), "completed": 2, "request_throughput": 1.0,
               "median_ttft_ms": 150.0, "median_tpot_ms": gap * 1000, "output_lens": [24, 24]}
        (tmp_path / f"x-profile-c{c}.json").write_text(json.dumps(res))
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, replay=True)
    own, info = lm.calibrate("", s, "x", mixes_prefill=False)
    mixed, mixed_info = lm.calibrate("", s, "x", mixes_prefill=True)
    assert own.stall_ms == pytest.approx(150.0) and info["mixes_prefill"] is False
    assert mixed.stall_ms == pytest.approx(110.0) and mixed_info["stall_ms"] == pytest.approx(110.0)
    assert lm.predict(mixed, 3.0, 24).tpot_ms_p50 < lm.predict(own, 3.0, 24).tpot_ms_p50


def test_every_profile_point_sends_each_prompt_equally_often(lm, tmp_path):
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4, 8],
                 rate_window_s=20.0, work=tmp_path)
    rows = json.loads(lm.dataset(s, 2 * len(lm.PROMPTS)).read_text())
    sent = [r["conversations"][0]["value"] for r in rows]
    assert sorted(sent) == sorted(lm.PROMPTS * 2)


def test_every_profile_point_runs_a_whole_number_of_rounds_over_the_prompts(lm, tmp_path, monkeypatch):
    sent = []

    def bench(base, s, n, **kw):
        sent.append(n)
        return lm.Measured(completed=n, failed=0, tpot_ms_p50=40.0, ttft_ms_p50=100.0, tokens_per_s=1.0,
                           requests_per_s=1.0, itl_ms_p50=40.0, tokens_per_chunk=1.0)

    monkeypatch.setattr(lm, "bench", bench)
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4, 8],
                 rate_window_s=20.0, work=tmp_path)
    lm.calibrate("", s, "x", mixes_prefill=False)
    assert sent == [8, 8, 16]


def test_the_median_requests_share_of_tokens_per_step_sets_tpot_p50(lm, tmp_path):
    # Two of eight requests copy (3 tokens a chunk), the rest do not (1): the mean request is 1.5, the median 1.
    for c in (1, 4):
        res = {**_result([0.0, 0.1] * 4, 0.150, 0.040, 25), "completed": 8, "request_throughput": 1.0,
               "median_ttft_ms": 150.0, "median_tpot_ms": 40.0,
               "output_lens": [24] * 8, "itls": [[0.04] * 7] * 2 + [[0.04] * 23] * 6}
        (tmp_path / f"x-profile-c{c}.json").write_text(json.dumps(res))
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, replay=True)
    arm, info = lm.calibrate("", s, "x", mixes_prefill=True)
    assert info["median_share"] == pytest.approx(1.0 / 1.5, abs=1e-3)
    assert arm.median_share == pytest.approx(1.0 / 1.5)


def _arm(lm, step: float = 40.0, prefill: float = 150.0):
    return lm.Arm(step_ms=lambda b: step + 2.0 * b, tokens_per_step=lambda b: 1.0, prefill_ms=prefill, capacity=8)


def test_a_slower_machine_costs_every_step_and_prefill_that_much_more(lm):
    arm = _arm(lm)
    slow = lm.scaled(arm, 1.25)
    assert slow.step_ms(4) == pytest.approx(1.25 * arm.step_ms(4)) and slow.prefill_ms == pytest.approx(187.5)
    # Saturation is capacity over the time a full batch takes per request: 1.25x the time, 1/1.25 the rate.
    assert lm.saturation_rate(slow, 24) == pytest.approx(lm.saturation_rate(arm, 24) / 1.25)
    assert lm.scaled(arm, 1.0) is arm


def test_the_machine_is_retimed_against_the_profiles_first_point(lm, tmp_path):
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, replay=True)
    info = {"profile": [{"concurrency": 1, "latency_ms_p50": 1000.0}]}
    assert lm.retime("", s, "x-r1-s0-retime", info) is None  # a replayed run that saved no re-timing
    res = {**_result([0.0, 1.2], 0.1, 0.05, 23), "completed": 2, "request_throughput": 1.0}  # 1.2 s per request
    (tmp_path / "x-r1-s0-retime.json").write_text(json.dumps(res))
    assert lm.retime("", s, "x-r1-s0-retime", info) == pytest.approx(1.2)
    # One request held up by a hiccup of the machine does not move it.
    (tmp_path / "x-r2-s0-retime.json").write_text(json.dumps({**res, "latencies": [1.2] * 7 + [3.6]}))
    assert lm.retime("", s, "x-r2-s0-retime", info) == pytest.approx(1.2)


def test_repeats_predict_on_the_machine_as_it_was_and_average(lm):
    arm = _arm(lm)
    fast, slow = lm.predict(arm, 2.0, 24), lm.predict(lm.scaled(arm, 1.2), 2.0, 24)
    both = lm.mean_point([fast, slow])
    assert both.tpot_ms_p50 == pytest.approx((fast.tpot_ms_p50 + slow.tpot_ms_p50) / 2)
    assert slow.tpot_ms_p50 > fast.tpot_ms_p50
    gone = lm.predict(arm, 100.0, 24)  # past saturation: no TTFT
    assert lm.mean_point([fast, gone]).ttft_ms_p50 is None and lm.mean_point([fast, gone]).saturated


def _stub_servers(lm, monkeypatch, sent: list, slow: float = 1.1):
    """Servers that answer at once: each run is recorded as (tag, requests); the n-gram server re-times ``slow``."""

    def bench(base, s, n, *, rate=None, concurrency=None, tag, seed=0):
        sent.append((tag, n))
        lat = 1000.0 * slow if "ngram" in tag and "retime" in tag else 1000.0
        return lm.Measured(completed=n - 1, failed=1, tpot_ms_p50=40.0, ttft_ms_p50=100.0, tokens_per_s=20.0,
                           requests_per_s=1.0, arrival_rate=rate, itl_ms_p50=40.0, tokens_per_chunk=1.0,
                           latency_ms_p50=lat)

    monkeypatch.setattr(lm, "bench", bench)
    monkeypatch.setattr(lm, "start", lambda server, method, s: (None, f"http://{method}", None))
    monkeypatch.setattr(lm, "stop", lambda proc: None)
    monkeypatch.setattr(lm, "choose_rates", lambda server, base, s: [1.0, 2.0])


def test_the_arms_run_back_to_back_in_turn_first_each_run_retimed(lm, tmp_path, monkeypatch):
    sent = []
    _stub_servers(lm, monkeypatch, sent)
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path)
    base, spec = lm.run_server("embedded", s)
    tags = [tag for tag, _ in sent]
    # Each warm-up sends every prompt once: the prefix cache holds them all before the profile and the re-timings.
    assert sent[:2] == [("embedded-none-warmup", len(lm.PROMPTS)), ("embedded-ngram-warmup", len(lm.PROMPTS))]
    assert [t for t in tags if "-r1-" in t] == [
        "embedded-none-r1-s0-retime", "embedded-none-r1-s0", "embedded-ngram-r1-s0-retime", "embedded-ngram-r1-s0",
        "embedded-ngram-r1-s1-retime", "embedded-ngram-r1-s1", "embedded-none-r1-s1-retime", "embedded-none-r1-s1"]
    assert base.rows[0]["speeds"] == [1.0, 1.0] and spec.rows[0]["speeds"] == pytest.approx([1.1, 1.1])
    # Each run is predicted on the machine as re-timed before it, and each arm's rates on its mean re-timing.
    assert spec.rows[0]["pred"].tpot_ms_p50 > 1.05 * lm.predict(spec.arm_model, 1.0, 24).tpot_ms_p50
    assert lm.saturation_rate(spec.during_run(), 24) == pytest.approx(lm.saturation_rate(spec.arm_model, 24) / 1.1)
    assert base.rows[0]["n"] == lm.rate_size(s, 1.0)  # the requests a run sent: completed and failed


def test_with_one_repeat_the_arm_that_goes_first_alternates_across_rates(lm, tmp_path, monkeypatch):
    sent = []
    _stub_servers(lm, monkeypatch, sent)
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, repeats=1)
    lm.run_server("embedded", s)
    runs = [tag for tag, _ in sent if "-r" in tag and "retime" not in tag]
    assert runs == ["embedded-none-r1-s0", "embedded-ngram-r1-s0", "embedded-ngram-r2-s0", "embedded-none-r2-s0"]


def _kept_folder(folder: Path, rates: list[float], poisson_gap: float = 0.06) -> None:
    """A --keep folder of an embedded run made before runs were re-timed: each arm's profile (c=1, c=4) and two
    repeats per rate, every Poisson run's chunks ``poisson_gap`` s apart."""
    def run(starts, gap):
        return {**_result(starts, 0.1, gap, 24), "completed": len(starts), "failed": 0, "request_throughput": 1.0,
                "median_ttft_ms": 100.0, "median_tpot_ms": gap * 1000, "output_lens": [24] * len(starts)}

    for method in ("none", "ngram"):
        for c, gap in ((1, 0.040), (4, 0.050)):
            (folder / f"embedded-{method}-profile-c{c}.json").write_text(json.dumps(run([0.0, 0.5], gap)))
        for r in rates:
            for i in range(2):
                starts = [j / r for j in range(8)]
                (folder / f"embedded-{method}-r{r:g}-s{i}.json").write_text(json.dumps(run(starts, poisson_gap)))


def test_a_replay_without_retimings_predicts_from_the_calibration(lm, tmp_path, capsys):
    _kept_folder(tmp_path, [1.0, 2.0])
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, replay=True)
    base, spec = lm.run_server("embedded", s)
    assert [row["rate"] for row in base.rows] == [1.0, 2.0] and base.rows[0]["speeds"] == [None, None]
    assert spec.rows[0]["pred"].tpot_ms_p50 == pytest.approx(lm.predict(spec.arm_model, 1.0, 24).tpot_ms_p50)
    out = lm.report("embedded", base, spec, s)
    printed = capsys.readouterr().out
    assert "not re-timed" in printed and "(calibration alone" not in printed  # no second figure beside
    assert out["machine_time_vs_calibration"] == {"none": None, "ngram k=4": None}


def test_no_latency_or_throughput_measured_at_a_rate_reaches_its_prediction(lm, tmp_path):
    predicted = []
    for gap in (0.06, 0.6):  # the same runs, ten times slower
        folder = tmp_path / f"gap{gap}"
        folder.mkdir()
        _kept_folder(folder, [1.0, 2.0], poisson_gap=gap)
        s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                     rate_window_s=20.0, work=folder, replay=True)
        base, spec = lm.run_server("embedded", s)
        assert base.rows[0]["meas"].tpot_ms_p50 == pytest.approx(gap * 1000)
        predicted.append([row["pred"] for a in (base, spec) for row in a.rows])
    assert predicted[0] == predicted[1]


def test_a_run_that_completed_nothing_has_no_tpot_and_does_not_read_as_a_win(lm):
    failed = lm.measured({"completed": 0, "failed": 8, "median_tpot_ms": 0.0, "median_ttft_ms": 0.0,
                          "output_throughput": 0.0, "request_throughput": 0.0})
    assert failed.tpot_ms_p50 is None and failed.ttft_ms_p50 is None
    served = lm.Measured(completed=8, failed=0, tpot_ms_p50=50.0, ttft_ms_p50=100.0, tokens_per_s=20.0,
                         requests_per_s=1.0)
    assert lm.verdict({"meas": served}, {"meas": failed}) == "loss"
    assert lm.verdict({"meas": failed}, {"meas": served}) == "win"


def test_a_report_of_a_run_that_measured_no_rate_says_so(lm, tmp_path, capsys):
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path, replay=True)
    base, spec = (lm.ArmResult(server="embedded", arm=a, arm_model=_arm(lm)) for a in ("none", "ngram k=4"))
    out = lm.report("embedded", base, spec, s)
    printed = capsys.readouterr().out
    sat = f"{lm.saturation_rate(_arm(lm), 24):.3g}"
    assert f"saturation, none: predicted {sat}/s; measured nothing (no rate was measured)" in printed
    assert "measured nothing (no rate was measured) (NOT within one measured step)" in printed
    assert out["saturation"]["none"]["measured_between"] == [None, None] and not out["crossover"]["within_one_step"]


def test_a_poisson_run_sends_every_prompt_equally_often(lm, tmp_path):
    s = lm.Setup(quick=True, output_len=24, capacity=8, k=4, threads=2, profile_concurrency=[1, 4],
                 rate_window_s=20.0, work=tmp_path)
    sizes = [lm.rate_size(s, r) for r in (0.1, 0.9, 2.0, 3.0, 50.0)]
    assert sizes == [8, 16, 40, 48, 48] and all(n % len(lm.PROMPTS) == 0 for n in sizes)
