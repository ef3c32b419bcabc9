"""A deployment, not a step: capacity bounds every batch the plan speaks of, a request rate decides the batch, a
batch above capacity queues, and estimate follows the same rules as recommend."""

from __future__ import annotations

import pytest

import specplug
from specplug.catalog import models
from specplug.errors import SpecplugError
from specplug.plan import Plan

LOAD_KEYS = {"request_rate", "capacity_requests", "baseline", "speculative", "crossover_request_rate",
             "saturation_request_rate"}
ARM_KEYS = {"running_batch", "tpot_ms_p50", "ttft_ms_p50", "output_tokens_per_s"}


@pytest.mark.parametrize("gpu,concurrency", [("h100", 64), ("l4", 8)])
def test_no_curve_point_schedule_entry_or_breakeven_lies_beyond_capacity(gpu: str, concurrency: int) -> None:
    planned = 0
    for m in models():
        if m.local_path:
            continue
        try:
            p = specplug.recommend(m.hf_id, gpu=gpu, concurrency=concurrency)
        except SpecplugError:
            continue  # does not fit on any count of this GPU: nothing to bound
        planned += 1
        cap = p.capacity_requests
        assert cap is not None and cap >= 1, m.hf_id
        assert all(c.batch_size <= cap for c in p.prediction.curve), (m.hf_id, cap)
        assert all(e.min_batch <= cap for e in p.speculation.schedule), (m.hf_id, cap)
        assert p.prediction.breakeven_batch_size is None or p.prediction.breakeven_batch_size <= cap, m.hf_id
        # The planned batch is what runs without speculation; a drafter that leaves fewer slots queues the rest.
        assert p.prediction.batch_size is not None and p.prediction.batch_size <= p.capacity_requests_without_drafter
        assert p.capacity_requests_without_drafter >= cap or p.speculation.method == "none", m.hf_id
    assert planned > 100


def test_a_batch_above_capacity_queues_instead_of_failing() -> None:
    # Llama-3.1-8B on one L4 holds about 20 requests of 1280 tokens: 256 concurrent requests start and queue.
    p = specplug.recommend("llama-3.1-8b", gpu="l4", num_gpus=1, concurrency=256)
    assert p.capacity_requests_without_drafter < 40
    assert p.prediction.batch_size == p.capacity_requests_without_drafter
    assert any("the rest queue" in w for w in p.warnings)
    assert p.prediction.curve[-1].batch_size <= p.capacity_requests


def test_the_drafters_price_is_stated_in_requests() -> None:
    p = specplug.recommend("llama-3.1-70b", gpu="h100", num_gpus=2)
    assert p.speculation.enabled and p.capacity_requests < p.capacity_requests_without_drafter
    text = next(r for r in p.reasons if r.startswith("Capacity:"))
    assert f"{p.capacity_requests} requests" in text and f"{p.capacity_requests_without_drafter} without the drafter" in text


def test_a_request_rate_sets_the_planned_batch_and_predicts_both_arms() -> None:
    low = specplug.recommend("qwen3-8b", gpu="h100", request_rate=0.5, input_len=2048, output_len=256)
    high = specplug.recommend("qwen3-8b", gpu="h100", request_rate=8, input_len=2048, output_len=256)
    assert low.prediction.batch_size < high.prediction.batch_size
    for p in (low, high):
        load = p.load.model_dump()
        assert load.keys() >= LOAD_KEYS and load["baseline"].keys() >= ARM_KEYS and load["speculative"].keys() >= ARM_KEYS
        # The planned batch is the baseline's running batch at the rate.
        assert p.prediction.batch_size == max(1, round(load["baseline"]["running_batch"]))
    assert high.load.baseline.tpot_ms_p50 > low.load.baseline.tpot_ms_p50
    assert high.load.baseline.output_tokens_per_s == pytest.approx(8 * 256)


def test_slo_targets_give_the_highest_rate_each_arm_sustains() -> None:
    p = specplug.recommend("qwen3-8b", gpu="h100", request_rate=8, input_len=2048, output_len=256, slo_tpot_ms=20)
    within = p.load.max_request_rate_within_slo
    assert within is not None and 0 < within.baseline <= p.load.saturation_request_rate.baseline
    assert 0 < within.speculative <= p.load.saturation_request_rate.speculative
    assert p.load.crossover_request_rate is None or p.load.crossover_request_rate > 0


def test_estimate_chooses_the_gpu_count_recommend_chooses() -> None:
    for model in ("llama-3.1-70b", "qwen3-8b", "llama-3.1-405b"):
        rec = specplug.recommend(model, gpu="h100", concurrency=8)
        est = specplug.estimate(model, "ngram", gpu="h100", batch_size=8)
        assert est.num_gpus == rec.hardware.num_gpus, model


def test_estimate_answers_a_batch_vllm_would_queue() -> None:
    # Before: refused because 256 full contexts do not fit at once; vLLM starts with one and queues the rest.
    e = specplug.estimate("llama-3.1-8b", "ngram", gpu="l4", num_gpus=1, batch_size=256)
    assert e.fits and e.capacity_requests_without_drafter < 256
    assert any("the rest queue" in w for w in e.warnings)


def test_estimate_takes_the_load_flags() -> None:
    e = specplug.estimate("qwen3-8b", "eagle3", gpu="h100", request_rate=8, input_len=2048, output_len=256, slo_tpot_ms=20)
    assert e.load is not None and e.load.max_request_rate_within_slo is not None
    assert e.batch_size == max(1, round(e.load.baseline.running_batch))


def test_a_long_context_lowers_a_learned_drafters_acceptance() -> None:
    short = specplug.recommend("qwen3-8b", gpu="h100", method="eagle3", input_len=2048)
    long = specplug.recommend("qwen3-8b", gpu="h100", method="eagle3", input_len=32768)
    assert long.prediction.acceptance_rate < short.prediction.acceptance_rate * 0.5
    assert any("accepts less" in r for r in long.reasons)
    # Copy methods have no published context effect: unchanged.
    a = specplug.estimate("qwen3-8b", "ngram", gpu="h100", num_gpus=1, input_len=2048)
    b = specplug.estimate("qwen3-8b", "ngram", gpu="h100", num_gpus=1, input_len=32768)
    assert a.acceptance_rate == b.acceptance_rate


def test_an_embedded_plan_without_a_gpu_is_made_for_this_machines_cpu(monkeypatch) -> None:
    from specplug import hostcpu
    from specplug.probe import ProbeResult

    files = {"/proc/cpuinfo": "model name\t: Test CPU\nflags\t\t: fpu avx2 avx512f\ncpu MHz\t\t: 3000.0\n" * 8,
             "/proc/meminfo": "MemTotal:       67108864 kB\n"}
    monkeypatch.setattr(hostcpu, "_read", files.__getitem__)
    monkeypatch.setattr(hostcpu.os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)
    none = ProbeResult(available=False, message="No NVIDIA driver found; no GPU probed.")
    p = specplug.recommend("smollm2-135m", stack="embedded", probed=none)
    assert p.hardware.source == "host" and p.hardware.num_gpus == 1 and p.hardware.memory_gb == 64
    # 8 cores x 7.5 GB/s of float32 weights, halved for the 16-bit bytes the plan counts; 8 x 3 GHz x 32 FLOPs.
    assert p.hardware.gpu == "memory_gib=64,bandwidth_gbs=30,bf16_tflops=0.768,name=CPU x8"
    text = " ".join(p.reasons)
    assert "planned for this machine's CPU (Test CPU, 8 cores, 64 GiB)" in text and "H100" not in text
    # A CPU turns compute-bound at small batches: the plan stops drafting long before an H100's would.
    h100 = specplug.recommend("smollm2-135m", stack="embedded", gpu="h100")
    assert p.prediction.breakeven_batch_size is not None
    assert p.prediction.breakeven_batch_size < (h100.prediction.breakeven_batch_size or 10**6)
    # A GPU stack on the same machine plans for the default GPU and says so.
    v = specplug.recommend("smollm2-135m", stack="vllm", probed=none)
    assert any("Planning for the default GPU" in r for r in v.reasons)


@pytest.mark.parametrize("gpu,cap", [("l4", 256), ("a100-80gb", 256), ("h100", 1024)])
def test_vllms_default_request_cap_follows_the_gpu(gpu: str, cap: int) -> None:
    # vLLM's max_num_seqs default: 1024 on 70 GiB GPUs other than A100s, 256 elsewhere; a small model fills it first.
    p = specplug.recommend("llama-3.2-1b", gpu=gpu, num_gpus=1, stack="vllm")
    assert p.capacity_requests_without_drafter == cap
    assert any(f"cap of {cap} running requests" in r for r in p.reasons)
    # serve.max_num_seqs sets it.
    from specplug.config import Config

    q = specplug.recommend(config=Config.model_validate({"model": "llama-3.2-1b", "stack": "vllm",
                                                         "hardware": {"gpu": gpu, "num_gpus": 1},
                                                         "serve": {"max_num_seqs": 64}}))
    assert q.capacity_requests_without_drafter == 64


def plan(stack: str, extra: list[str]) -> Plan:
    """qwen3-8b on one H100 at 8 requests/s on ``stack``, with ``extra`` in serve.extra_args."""
    from specplug.config import Config

    return specplug.recommend(config=Config.model_validate({
        "model": "qwen3-8b", "stack": stack, "hardware": {"gpu": "h100", "num_gpus": 1},
        "workload": {"request_rate": 8, "input_len": 2048, "output_len": 256}, "serve": {"extra_args": extra}}))


def test_sglangs_mixed_chunk_flag_makes_a_joining_prefill_ride_in_the_step() -> None:
    own, mixed = plan("sglang", []), plan("sglang", ["--enable-mixed-chunk"])
    assert "a pass of its own" in own.load.basis and "mixes a joining prefill" in mixed.load.basis
    assert mixed.load.baseline.tpot_ms_p50 < own.load.baseline.tpot_ms_p50
    assert "mixes a joining prefill" in specplug.recommend("qwen3-8b", gpu="h100", request_rate=8).load.basis  # vLLM


@pytest.mark.parametrize(("stack", "off"), [("llamacpp", ["--no-cont-batching"]), ("llamacpp", ["-nocb"]),
                                            ("embedded", ["--prefill-chunk", "0"]),
                                            ("embedded", ["--prefill-chunk=0"]),
                                            ("embedded", ["--prefill-chunk", "00"])])
def test_a_flag_that_turns_prefill_mixing_off_makes_a_prefill_a_pass_of_its_own(stack: str, off: list[str]) -> None:
    assert "mixes a joining prefill" in plan(stack, []).load.basis
    assert "a pass of its own" in plan(stack, off).load.basis
    assert "mixes a joining prefill" in plan(stack, ["--prefill-chunk", "256"] if stack == "embedded" else ["-cb"]).load.basis


@pytest.mark.parametrize(("args", "mixes"), [(["-nocb", "-cb"], True), (["--cont-batching", "--no-cont-batching"], False),
                                             (["-cb", "-nocb", "--cont-batching"], True)])
def test_of_llamacpps_batching_flags_the_last_one_counts(args: list[str], mixes: bool) -> None:
    basis = plan("llamacpp", args).load.basis
    assert ("mixes a joining prefill" in basis) is mixes and ("a pass of its own" in basis) is not mixes
