"""The continuous-batching load model: Little's law holds, capacity caps the batch, and the rates it reports mean
what their names say."""

from __future__ import annotations

import dataclasses

import pytest

from specplug.policy import load as L


def linear_arm(base_ms: float, per_seq_ms: float, tokens: float = 1.0, prefill_ms: float = 30.0, capacity: int = 64) -> L.Arm:
    return L.Arm(lambda b: base_ms + per_seq_ms * b, lambda b: tokens, prefill_ms, capacity)


def test_the_running_batch_is_littles_law_at_the_predicted_tpot() -> None:
    arm = linear_arm(10.0, 0.05)
    p = L.predict(arm, 4.0, 256)
    # requests in decode = arrival rate x time each spends decoding
    assert p.running_batch == pytest.approx(4.0 * 256 * p.tpot_ms_p50 / 1000.0, rel=1e-3)
    assert not p.saturated and p.output_tokens_per_s == pytest.approx(4.0 * 256)


def test_tpot_and_ttft_grow_with_the_rate_and_p90_is_not_below_p50() -> None:
    arm = linear_arm(10.0, 0.05)
    points = [L.predict(arm, r, 256) for r in (0.5, 1, 2, 4, 8)]
    assert [p.tpot_ms_p50 for p in points] == sorted(p.tpot_ms_p50 for p in points)
    assert [p.ttft_ms_p50 for p in points] == sorted(p.ttft_ms_p50 for p in points)
    assert all(p.tpot_ms_p90 >= p.tpot_ms_p50 and p.ttft_ms_p90 >= p.ttft_ms_p50 for p in points)


def test_past_saturation_the_batch_is_the_capacity_and_requests_queue() -> None:
    arm = linear_arm(10.0, 0.05, capacity=32)
    sat = L.saturation_rate(arm, 256)
    below, above = L.predict(arm, sat * 0.9, 256), L.predict(arm, sat * 1.5, 256)
    assert below.running_batch < 32 and not below.saturated and below.ttft_ms_p50 is not None
    assert above.running_batch == 32 and above.saturated and above.ttft_ms_p50 is None
    # Throughput stops growing at saturation: the extra requests wait.
    assert above.output_tokens_per_s == pytest.approx(sat * 256)


def test_a_drafter_that_costs_more_per_request_loses_above_a_crossover_rate() -> None:
    base = linear_arm(10.0, 0.05, capacity=128)
    # Twice the tokens per step, but each request costs six times as much compute per step.
    spec = linear_arm(13.0, 0.3, tokens=2.0, capacity=128)
    cross = L.crossover_rate(base, spec, 256)
    assert cross is not None and 0 < cross < L.saturation_rate(spec, 256)
    assert L.predict(spec, cross * 0.8, 256).tpot_ms_p50 < L.predict(base, cross * 0.8, 256).tpot_ms_p50
    assert L.predict(spec, cross * 1.1, 256).tpot_ms_p50 > L.predict(base, cross * 1.1, 256).tpot_ms_p50


def test_a_drafter_that_fills_memory_loses_once_its_arm_saturates() -> None:
    base = linear_arm(10.0, 0.05, capacity=128)
    spec = linear_arm(13.0, 0.05, tokens=2.0, capacity=20)  # the drafter's memory leaves room for 20 requests
    cross = L.crossover_rate(base, spec, 256)
    assert cross == pytest.approx(L.saturation_rate(spec, 256), rel=1e-3)


def test_a_cheap_drafter_pays_up_to_the_baselines_saturation() -> None:
    base = linear_arm(10.0, 0.05)
    spec = linear_arm(11.0, 0.05, tokens=2.0)
    assert L.crossover_rate(base, spec, 256) is None
    assert L.saturation_rate(spec, 256) > L.saturation_rate(base, 256)


def test_the_rate_within_a_tpot_target_meets_it_and_a_bit_more_does_not() -> None:
    arm = linear_arm(10.0, 0.05)
    r = L.max_rate_within(arm, 256, 12.0, None)
    assert 0 < r < L.saturation_rate(arm, 256)
    assert L.predict(arm, r * 0.99, 256).tpot_ms_p90 <= 12.0
    assert L.predict(arm, r * 1.05, 256).tpot_ms_p90 > 12.0
    assert L.max_rate_within(arm, 256, 5.0, None) == 0.0  # not even one request alone meets 5 ms


def test_prefill_takes_its_share_of_the_gpu() -> None:
    light, heavy = linear_arm(10.0, 0.05, prefill_ms=1.0), linear_arm(10.0, 0.05, prefill_ms=100.0)
    assert L.predict(heavy, 4.0, 256).tpot_ms_p50 > L.predict(light, 4.0, 256).tpot_ms_p50 * 1.5
    assert L.saturation_rate(heavy, 256) < L.saturation_rate(light, 256)


def test_a_prefill_mixed_into_the_step_stalls_the_others_for_its_excess_only() -> None:
    own = linear_arm(40.0, 2.0, prefill_ms=100.0)
    mixed = L.Arm(own.step_ms, own.tokens_per_step, 100.0, own.capacity, mixes_prefill=True)
    assert own.stall_ms == 100.0
    assert mixed.stall_ms == pytest.approx(100.0 - 42.0)  # the step it rides in yields tokens too
    assert L.predict(mixed, 2.0, 64).tpot_ms_p50 < L.predict(own, 2.0, 64).tpot_ms_p50
    assert L.saturation_rate(mixed, 64) > L.saturation_rate(own, 64)
    # Its first token comes out of a step of the whole running batch: alone, both wait the same prefill; beside
    # others, the mixed one waits that whole step as well.
    lone = L.predict(mixed, 0.01, 64)
    assert lone.ttft_ms_p50 == pytest.approx(L.predict(own, 0.01, 64).ttft_ms_p50, rel=0.02)
    busy = L.predict(mixed, 2.0, 64)
    step = L._interp(mixed.step_ms, max(busy.running_batch, 1.0))
    assert busy.ttft_ms_p50 == pytest.approx(step + mixed.stall_ms + step / 2)
    # A speculative arm's prefill rides in the verification pass, not beside its drafting.
    spec = L.Arm(own.step_ms, own.tokens_per_step, 100.0, own.capacity, mixes_prefill=True, absorbed_ms=30.0)
    assert spec.stall_ms == pytest.approx(70.0)


def test_a_prefill_cheaper_than_a_step_stalls_nothing_and_yields_its_token_with_the_step() -> None:
    arm = L.Arm(lambda b: 50.0, lambda b: 1.0, 30.0, 8, mixes_prefill=True)
    assert arm.stall_ms == 0.0
    assert L.predict(arm, 0.01, 64).ttft_ms_p50 == pytest.approx(50.0 + 25.0)


def test_requests_that_speculate_unevenly_leave_the_median_request_slower_than_the_mean() -> None:
    even = linear_arm(40.0, 2.0, prefill_ms=50.0)
    uneven = dataclasses.replace(even, median_share=0.8)
    a, b = L.predict(even, 2.0, 64), L.predict(uneven, 2.0, 64)
    assert b.tpot_ms_p50 == pytest.approx(a.tpot_ms_p50 / 0.8)
    assert b.output_tokens_per_s == a.output_tokens_per_s and b.running_batch == a.running_batch
