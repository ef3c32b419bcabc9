"""Renders checked by the real SGLang 0.5.23: ServerArgs parsing and resolve_once() validation."""

from __future__ import annotations

import shlex

import pytest

from specplug.rendering import render

from .conftest import run_helper

pytestmark = pytest.mark.sglang

VERSION = "0.5.23"


@pytest.fixture(scope="module")
def checked(sglang_env, tiny_model, run_cli_module):
    m = str(tiny_model)
    common = dict(model=m, gpu="h100", num_gpus=1, stack_version=VERSION, port=30001)
    cases = {
        "ngram": (render("sglang", method="ngram", num_speculative_tokens=4, **common).spec.argv, True),
        "eagle3": (render("sglang", method="eagle3", drafter=m, num_speculative_tokens=3, **common).spec.argv, True),
        "standalone": (render("sglang", method="draft_model", drafter=m, num_speculative_tokens=2, **common).spec.argv,
                       True),
    }
    res = run_cli_module("launch", "sglang", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--stack-version", VERSION, "--dry-run")
    assert res.exit_code == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("command: "))
    cases["done_means_70b"] = (shlex.split(line.removeprefix("command: ")), False)
    payload = [{"name": n, "argv": a, "resolve": r} for n, (a, r) in cases.items()]
    return run_helper(sglang_env / "bin" / "python", "sglang_check.py", payload)


def test_ngram_resolves_with_ngram_algorithm(checked):
    r = checked["ngram"]
    assert r["ok"], r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "NGRAM"
    assert r["resolved"]["speculative_num_draft_tokens"] == 4
    assert r["parsed"]["max_running_requests"] == 48  # explicit, not SGLang's silent cap
    assert r["parsed"]["host"] == "127.0.0.1" and r["parsed"]["port"] == 30001


def test_eagle3_resolves_with_all_three_knobs_and_steps_plus_one(checked, tiny_model):
    r = checked["eagle3"]
    assert r["ok"], r.get("error")
    got = r["resolved"]
    assert got["speculative_algorithm"] == "EAGLE3"
    assert got["speculative_draft_model_path"] == str(tiny_model)
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (3, 1, 4)


def test_draft_model_is_standalone(checked):
    r = checked["standalone"]
    assert r["ok"], r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "STANDALONE"
    assert r["resolved"]["speculative_num_draft_tokens"] == 3


def test_done_means_launch_dry_run_for_70b_on_4_h100_parses(checked):
    r = checked["done_means_70b"]
    assert r["ok"], r.get("error")
    assert r["parsed"]["model_path"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert r["parsed"]["tp_size"] == 4
