"""Plans over the whole catalog: physical schedules and curves, and the 2026 flagships as users type them.

Published figures the flagship ranges come from are rows of benchmarks/data/extra_results.csv (ids quoted).
"""

from __future__ import annotations

import pytest

import specplug
from specplug.catalog import models
from specplug.errors import SpecplugError

MOE = [m for m in models() if m.is_moe]


def _plan(name: str, **kw):
    try:
        return specplug.recommend(name, stack="vllm", **kw)
    except SpecplugError as exc:
        # The only acceptable refusal with hardware left open: nothing in the GPU counts holds it.
        assert "does not fit even on" in exc.message, exc
        return None


@pytest.mark.parametrize("model", [m.hf_id for m in models()])
def test_every_schedule_never_grows_k_with_batch_and_stays_off_once_off(model: str) -> None:
    p = _plan(model, gpu="h200", batch_size=1)
    if p is None or not p.speculation.schedule:
        return
    ks = [e.num_speculative_tokens for e in p.speculation.schedule]
    assert ks == sorted(ks, reverse=True), ks
    assert all(k == 0 for k in ks[ks.index(0):]) if 0 in ks else True


@pytest.mark.parametrize("model", [m.hf_id for m in MOE])
def test_moe_predicted_curve_does_not_rise_with_batch(model: str) -> None:
    p = _plan(model, gpu="h200", batch_size=1)
    if p is None or not p.prediction.curve:
        return
    gains = [pt.speedup for pt in p.prediction.curve]
    assert all(b <= a for a, b in zip(gains, gains[1:], strict=False)), gains


@pytest.mark.parametrize(
    "model,method,gpus",
    [("deepseek-r1", "mtp", 8), ("llama-4-maverick", "eagle3", 8), ("gpt-oss-120b", "eagle3", 1)],
)
def test_moe_cost_model_itself_loses_gain_from_batch_1_to_128(model: str, method: str, gpus: int) -> None:
    # The raw cost model (no curve cap). Published series fall overall (DeepSeek MTP 2.11x at 1 to 1.25x at 64,
    # 5033-5039; gpt-oss EAGLE-3 on 8 x H200 1.97x to 1.00x at 128, TRTSA) but not always step by step
    # (1.31x at 8, 1.44x at 64 on one H100, 5091-5092): no step may gain more than 10%.
    gains = [
        specplug.estimate(model, method, gpu="h200", num_gpus=gpus, batch_size=b, stack="vllm").speedup
        for b in (1, 4, 16, 64, 128)
    ]
    assert all(b <= a * 1.10 for a, b in zip(gains, gains[1:], strict=False)), gains
    assert gains[-1] < gains[0], gains


def test_deepseek_v3_on_8_h200_fits_in_fp8_and_runs_mtp_in_the_published_range() -> None:
    for name in ("deepseek-v3", "deepseek-r1"):
        p = specplug.recommend(name, gpu="h200", num_gpus=8, batch_size=1, stack="sglang")
        assert p.model.weight_format == "fp8" and p.memory is not None and p.memory.fits
        assert p.speculation.method == "mtp"
        # Published at batch 1: 1.8x on 8 x H200 in SGLang (5014), 1.63x in vLLM (5016), 1.78-2.28x on 8 x B200
        # in TensorRT-LLM (5001-5005).
        assert 1.5 <= p.prediction.speedup <= 2.4
    p32 = specplug.recommend("deepseek-v3", gpu="h200", num_gpus=8, batch_size=32, stack="sglang")
    assert p32.speculation.method == "mtp" and p32.prediction.speedup < p.prediction.speedup
    # One MTP token (the published runs' setting) at larger batches: 1.5x at batch 32 on 8 x H200 (5015) and on
    # Gaudi (5020), 1.35x at 128 and none at 256 (5021-5022): within the model's 25%.
    # Scored as the published runs ran (require_fit=False): at the batch they ran, their running-request cap raised.
    k1 = {b: specplug.estimate("deepseek-v3", "mtp", gpu="h200", num_gpus=8, batch_size=b, stack="sglang",
                               num_speculative_tokens=1, require_fit=False).speedup for b in (32, 128, 256)}
    assert 1.2 <= k1[32] <= 1.88 and 1.08 <= k1[128] <= 1.69 and k1[256] <= 1.15


def test_gpt_oss_120b_fits_one_h100_in_mxfp4() -> None:
    p = specplug.recommend("gpt-oss-120b", gpu="h100", num_gpus=1, batch_size=1)
    assert p.model.weight_format == "mxfp4" and p.memory is not None and p.memory.fits
    assert p.memory.target_weights_gb < 70  # about 65 GB of weights, not 234 GB of bf16
    # Published for gpt-oss-120b with EAGLE-3 on one GPU: 1.34x on an H100 in SGLang (5090), about 1.21x on an H200
    # in vLLM (RHGPTOSS); the plan speculates and lands within the model's 25% of that range.
    assert p.speculation.method != "none" and 1.21 / 1.25 <= p.prediction.speedup <= 1.34 * 1.25


def test_kimi_k2_fits_16_h200_in_fp8() -> None:
    p = specplug.recommend("kimi-k2", gpu="h200", num_gpus=16, batch_size=1)
    assert p.memory is not None and p.memory.fits and p.model.weight_format == "fp8"
    assert p.parallelism.tensor_parallel_size * p.parallelism.pipeline_parallel_size == 16


def test_tensor_parallel_size_divides_the_attention_heads() -> None:
    # 6 GPUs of a 64-head model: tensor 2 x pipeline 3, not tensor 6.
    p = specplug.recommend("llama-3.1-70b", gpu="h100", num_gpus=6, batch_size=1)
    tp = p.parallelism.tensor_parallel_size
    assert 64 % tp == 0 and tp * p.parallelism.pipeline_parallel_size == 6


def test_fp8_kv_cache_halves_the_cache_and_quantization_shrinks_weights() -> None:
    a = specplug.recommend("llama-3.1-70b", gpu="h100", num_gpus=4, batch_size=64, input_len=4096)
    b = specplug.recommend("llama-3.1-70b", gpu="h100", num_gpus=4, batch_size=64, input_len=4096, kv_cache_dtype="fp8")
    c = specplug.recommend("llama-3.1-70b", gpu="h100", num_gpus=4, batch_size=64, input_len=4096, quantization="fp8")
    assert a.memory and b.memory and c.memory
    assert b.memory.kv_cache_gb == pytest.approx(a.memory.kv_cache_gb / 2, rel=0.01)
    assert c.memory.target_weights_gb == pytest.approx(a.memory.target_weights_gb / 2, rel=0.05)
    assert c.serve.quantization == "fp8"


STACKS = [("vllm", "0.32.0"), ("sglang", "0.5.23"), ("trtllm", "1.3.0rc22"), ("llamacpp", "b10576"), ("tgi", "3.3.7")]


@pytest.mark.parametrize("stack,version", STACKS)
def test_recommend_never_plans_what_its_own_validator_refuses(stack: str, version: str) -> None:
    # Across the catalog: a plan recommend returns renders (the validator behind render and check agrees with the
    # planner), e.g. no schedule that is off at every batch and no drafter the stack cannot shard. Batch 64 over the
    # whole catalog, batch 1 over every fourth model, to keep the run short.
    from specplug.rendering import render_plan

    for i, m in enumerate(models()):
        for batch in (1, 64) if i % 4 == 0 else (64,):
            try:
                p = specplug.recommend(m.hf_id, stack=stack, stack_version=version, batch_size=batch)
            except SpecplugError as exc:
                assert "does not fit" in exc.message, (m.hf_id, batch, exc.message)
                continue
            if p.speculation.method != "none":
                render_plan(p)  # raises InvalidPlan on any refusal
