"""specplug bench against real vLLM on the CPU: the tiny local model with n-gram speculation on and off.

Proves the bench reads vLLM's own spec-decode counters (acceptance > 0 with speculation, nothing drafted
without) and writes the full record; speed on this CPU is not the point.
"""

from __future__ import annotations

import io
import json
import os
import socket

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path, tiny_model, name: str, speculation: str):
    from specplug.launcher import launch

    folder = tmp_path / name
    folder.mkdir()
    port = _free_port()
    cfg = folder / "specplug.yaml"
    cfg.write_text(
        f"model: {tiny_model}\nstack: vllm\nserve: {{port: {port}, max_model_len: 512, dtype: float32}}\n{speculation}",
        encoding="utf-8",
    )
    res = launch("vllm", config_path=str(cfg), timeout=400, wait=False, run_dir=str(folder / "run"), out=io.StringIO())
    assert res.server is not None
    return res.server, f"http://127.0.0.1:{port}"


def test_bench_reads_real_vllm_acceptance_with_ngram_on_and_off(vllm_env, tiny_model, tmp_path, monkeypatch, run_cli):
    monkeypatch.setenv("PATH", f"{vllm_env / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for var, value in {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}.items():
        monkeypatch.setenv(var, value)
    servers = []
    try:
        spec_server, spec_url = _start(
            tmp_path, tiny_model, "spec",
            "speculation:\n  method: ngram\n  num_speculative_tokens: 4\n  prompt_lookup_max: 4\n"
            "  schedule: [{min_batch: 1, num_speculative_tokens: 4}]\n",
        )
        servers.append(spec_server)
        base_server, base_url = _start(tmp_path, tiny_model, "base", "speculation: {method: none}\n")
        servers.append(base_server)
        out = tmp_path / "bench"
        # Short, repetitive prompts: the tiny model's context is 512 tokens, and n-gram needs repeats to draft.
        prompts = tmp_path / "prompts.jsonl"
        prompts.write_text("".join(
            json.dumps({"prompt": f"{w} the quick brown fox jumps over the lazy dog; " * 6}) + "\n"
            for w in ("one", "two")
        ))
        r = run_cli("bench", "--endpoint", spec_url, "--baseline", base_url, "--prompts", str(prompts),
                    "--concurrency", "1", "--num-prompts", "2", "--max-tokens", "24", "--api", "completions",
                    "-o", str(out))
        assert r.exit_code == 0, r.stdout + r.stderr
        data = json.loads((out / "bench.json").read_text())
        (level,) = data["levels"]
        spec, base = level["speculative"], level["baseline"]
        assert spec["failed"] == 0 and base["failed"] == 0 and spec["requests"] == 2
        acc = spec["acceptance"]
        assert acc["drafts"] > 0 and acc["draft_tokens"] > 0 and acc["mean_acceptance_length"] >= 1.0
        assert base["acceptance"] is None or not base["acceptance"]["drafts"]
        assert level["speedup"] > 0
    finally:
        for s in servers:
            s.stop()
