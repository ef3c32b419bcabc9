"""DSpark block drafters: planned from DeepSeek's published drafters, acceptance read at its published temperature."""

from __future__ import annotations

import specplug
from specplug.catalog.drafters import find_drafter
from specplug.policy import perf
from specplug.policy.data import load_policy
from specplug.policy.engine import basis_temperature

DSPARK = "deepseek-ai/dspark_qwen3_8b_block7"


def test_qwen3_8b_lists_deepseeks_dspark_drafter_with_its_published_block() -> None:
    p = specplug.recommend("qwen3-8b", gpu="h100", num_gpus=1, batch_size=1, stack="vllm", stack_version="0.32.0")
    ds = next(c for c in p.candidates if c.method == "dspark")
    assert ds.drafter == DSPARK and ds.ruled_out is None and ds.num_speculative_tokens == 7
    assert ds.speedup is not None and ds.speedup > 1.5
    # Stacks without DSpark rule it out with the reason.
    trt = specplug.recommend("qwen3-8b", gpu="h100", num_gpus=1, batch_size=1, stack="trtllm", stack_version="1.3.0rc8")
    assert "needs TensorRT-LLM 1.3.0rc22" in next(c for c in trt.candidates if c.method == "dspark").ruled_out


def test_a_published_acceptance_measured_at_temperature_1_is_read_back_to_greedy() -> None:
    row = find_drafter(DSPARK)
    assert basis_temperature(row.acceptance_basis) == 1.0
    prior = load_policy().prior("dspark")
    raw = perf.solve_alpha(row.acceptance_length, 7, prior.decay)
    greedy = specplug.estimate("qwen3-8b", "dspark", drafter=DSPARK, gpu="h100", num_speculative_tokens=7, temperature=0.0)
    hot = specplug.estimate("qwen3-8b", "dspark", drafter=DSPARK, gpu="h100", num_speculative_tokens=7, temperature=1.0)
    # At the published temperature the estimate gives back the published acceptance; greedy accepts more.
    assert abs(hot.acceptance_length - row.acceptance_length) < 0.05
    assert greedy.acceptance_length > hot.acceptance_length and greedy.acceptance_rate > raw


def test_dsparks_prior_is_dflashs_moved_by_the_published_gain_and_a_plan_names_its_acceptance_source() -> None:
    pol = load_policy()
    ds, df = pol.prior("dspark"), pol.prior("dflash")
    assert ds.prior_from == "dflash" and ds.decay == df.decay and ds.draft_forwards == "one"
    assert all(ds.alpha_for(w) > df.alpha_for(w) for w in ("chat", "code", "math"))
    # A plan that uses a drafter's own published figure says so, with its basis (not the borrowed prior).
    p = specplug.recommend("qwen3-4b", gpu="h100", num_gpus=1, batch_size=1, stack="vllm", stack_version="0.32.0")
    assert p.speculation.method == "dspark"
    assert any("its own published figure, 3.64" in r and "temperature 1.0" in r for r in p.reasons)
    assert not any("no fitted prior" in r for r in p.reasons)
