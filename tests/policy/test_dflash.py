"""DFlash block-diffusion drafters: one draft forward per step, the drafter's depth from its folder, the prior from
the published chat results, and plans only where the stack version ships the method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specplug
from specplug.config import Config
from specplug.errors import SpecplugError
from specplug.planning import estimate
from specplug.policy import load_policy, perf
from specplug.policy.perf import Arch, Device, Shape

DFLASH = "z-lab/Qwen3-8B-DFlash-b16"
UNLISTED = "example/qwen3-dflash-b16"  # not in the catalog: on a target with no listed DFlash drafter, the prior
QWEN3_8B = Arch(8.2, 8.2, 36, 4096, 151936, 36 * 2 * 8 * 128 * 2.0)
H100 = Device(bw_gbs=3350, tflops=989, memory_gb=80, link_gbs=450)


def _draft_ms(method: str, k: int) -> float:
    pol = load_policy()
    sf = pol.stack("vllm")
    return perf.step_cost(pol, pol.prior(method), method, Shape(k), QWEN3_8B, None, H100, sf, 1, 1, 2048).draft_ms


def test_a_dflash_block_costs_one_draft_forward_whatever_its_length() -> None:
    # 15 draft tokens from one forward cost little more than 1; an autoregressive head pays per token.
    assert _draft_ms("dflash", 15) < 1.5 * _draft_ms("dflash", 1)
    assert _draft_ms("eagle3", 15) > 8 * _draft_ms("eagle3", 1)


def test_the_drafter_is_several_layers_at_the_targets_width() -> None:
    d = perf.draft_arch("dflash", QWEN3_8B, None)
    assert d is not None and d.layers == perf.DFLASH_LAYERS and d.hidden == QWEN3_8B.hidden
    # Its KV cache covers its own layers only, at the target's per-layer shape.
    assert d.kv_bytes_per_token == pytest.approx(QWEN3_8B.kv_bytes_per_token / QWEN3_8B.layers * d.layers)


def _folder(tmp_path: Path, layers: int) -> str:
    folder = tmp_path / f"dflash-{layers}"
    folder.mkdir()
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": layers, "block_size": 16,
           "dflash_config": {"target_layer_ids": list(range(layers)), "mask_token_id": 151669}}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return str(folder)


def test_a_local_drafters_depth_is_read_from_its_config(tmp_path: Path) -> None:
    kw = {"gpu": "h100", "batch_size": 1, "stack": "vllm", "stack_version": "0.32.0", "num_speculative_tokens": 15}
    shallow = estimate("qwen3-8b", "dflash", drafter=_folder(tmp_path, 2), **kw)
    deep = estimate("qwen3-8b", "dflash", drafter=_folder(tmp_path, 12), **kw)
    assert shallow.acceptance_length == pytest.approx(deep.acceptance_length)
    assert shallow.speedup > deep.speedup  # same acceptance, a deeper drafter costs more per block


def test_the_prior_gives_the_published_median_chat_acceptance_at_block_16() -> None:
    e = estimate("qwen3-14b", "dflash", drafter=UNLISTED, gpu="h100", batch_size=1, stack="vllm", stack_version="0.32.0",
                 num_speculative_tokens=15, workload="chat")
    assert e.acceptance_length == pytest.approx(2.36, abs=0.05)
    math = estimate("qwen3-14b", "dflash", drafter=UNLISTED, gpu="h100", batch_size=1, stack="vllm", stack_version="0.32.0",
                    num_speculative_tokens=15, workload="math")
    assert math.acceptance_length > 2 * e.acceptance_length  # GSM8K-style text drafts far better than chat
    assert e.speedup > 1.0


def _cfg(version: str) -> Config:
    return Config.model_validate({"model": "qwen3-8b", "stack": {"name": "vllm", "version": version},
                                  "hardware": {"gpu": "h100", "num_gpus": 1},
                                  "speculation": {"method": "dflash", "drafter": DFLASH}})


def test_recommend_plans_dflash_where_the_stack_ships_it_and_agrees_with_estimate() -> None:
    p = specplug.recommend(config=_cfg("0.32.0"), batch_size=1)
    assert p.speculation.method == "dflash" and p.speculation.drafter == DFLASH
    e = estimate("qwen3-8b", "dflash", drafter=DFLASH, gpu="h100", batch_size=1, stack="vllm", stack_version="0.32.0",
                 num_speculative_tokens=p.speculation.num_speculative_tokens)
    assert e.speedup == pytest.approx(p.prediction.speedup, abs=0.01)


def test_a_version_without_dflash_is_refused_with_what_works_there() -> None:
    with pytest.raises(SpecplugError) as err:
        specplug.recommend(config=_cfg("0.19.0"), batch_size=1)
    assert "needs vLLM 0.20.0" in str(err.value) and "eagle3" in str(err.value)  # the hint lists what runs there


def test_auto_planning_scores_a_catalog_dflash_drafter_and_rules_dflash_out_without_one() -> None:
    p = specplug.recommend("qwen3-8b", gpu="h100", num_gpus=1, batch_size=1, stack="vllm", stack_version="0.32.0")
    dflash = [c for c in p.candidates if c.method == "dflash"]
    assert [c.drafter for c in dflash] == [DFLASH] and dflash[0].ruled_out is None and (dflash[0].speedup or 0) > 1.0
    # Its published acceptance (2.93 at k=8 on MT-Bench) sets its prediction, not the method's prior.
    assert dflash[0].acceptance_length > 2.5
    other = specplug.recommend("qwen3-14b", gpu="h100", num_gpus=1, batch_size=1, stack="vllm", stack_version="0.32.0")
    none = [c for c in other.candidates if c.method == "dflash"]
    assert none and all(c.ruled_out and "--drafter" in c.ruled_out for c in none)
