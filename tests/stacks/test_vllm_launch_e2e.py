"""End to end on the CPU: `specplug launch vllm` with the tiny local model and n-gram speculation, a completion
over HTTP, the vllm:spec_decode_* metrics, then Ctrl-C and no process left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_launch_vllm_on_cpu_serves_speculates_and_stops_cleanly(vllm_env, tiny_model, tmp_path):
    port = _free_port()
    (tmp_path / "specplug.yaml").write_text(
        f"model: {tiny_model}\nstack: vllm\nserve: {{port: {port}, max_model_len: 512, dtype: float32}}\n"
        "speculation:\n  method: ngram\n  num_speculative_tokens: 4\n  prompt_lookup_max: 4\n"
        "  schedule: [{min_batch: 1, num_speculative_tokens: 4}]\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PATH=f"{vllm_env / 'bin'}{os.pathsep}{os.environ['PATH']}", VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    specplug = Path(sys.executable).with_name("specplug")
    proc = subprocess.Popen([str(specplug), "launch", "vllm", "--timeout", "400"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    pgid = None
    try:
        deadline = time.monotonic() + 420
        while not any(ln.startswith("endpoint:") for ln in lines):
            assert proc.poll() is None, "specplug exited early:\n" + "".join(lines)
            assert time.monotonic() < deadline, "not healthy in time:\n" + "".join(lines)
            time.sleep(1)
        text = "".join(lines)
        pgid = int(re.search(r"process group (\d+)", text).group(1))
        assert "vllm serve" in text and '"method":"ngram"' in text
        body = json.dumps({"model": str(tiny_model), "prompt": "the quick brown fox jumps the quick brown fox jumps "
                           "the quick brown fox", "max_tokens": 32, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            out = json.load(resp)
        assert out["choices"] and out["usage"]["completion_tokens"] > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        assert _metric(metrics, "vllm:spec_decode_num_drafts_total") > 0
        assert _metric(metrics, "vllm:spec_decode_num_draft_tokens_total") > 0
        assert "vllm:spec_decode_num_accepted_tokens_total" in metrics
    finally:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        try:
            proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert pgid is not None
    time.sleep(1)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # the server's whole process group is gone
