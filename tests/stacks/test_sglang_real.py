"""Renders checked by the real SGLang 0.5.23: ServerArgs parsing and resolve_once() validation."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specplug.rendering import render, render_plan, write_rendered

from .conftest import run_helper

pytestmark = pytest.mark.sglang

VERSION = "0.5.23"
REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"  # a commit: the plan pins the one it read


def _written(r, folder: Path) -> list[str]:
    """The rendered argv with its files written to ``folder`` and named by absolute path (as the script's $HERE)."""
    write_rendered(r, str(folder))
    return [str(folder / a) if a in r.files else a for a in r.spec.argv]


def _config(folder: Path, model: Path, speculation: str) -> str:
    folder.mkdir()
    p = folder / "specplug.yaml"
    p.write_text(f"model: {model}\nstack: {{name: sglang, version: '{VERSION}'}}\nhardware: {{gpu: h100, num_gpus: 1}}\n"
                 f"serve: {{port: 30001}}\nspeculation:\n{speculation}", encoding="utf-8")
    return str(p)


SCHEDULE = ("  schedule:\n    - {min_batch: 1, max_batch: 8, num_speculative_tokens: 4}\n"
            "    - {min_batch: 9, max_batch: 32, num_speculative_tokens: 2}\n    - {min_batch: 33, num_speculative_tokens: 0}\n")


@pytest.fixture(scope="module")
def checked(sglang_env, tiny_model, drafters, run_cli_module, tmp_path_factory):
    m = str(tiny_model)
    d = {k: str(v) for k, v in drafters.items()}
    tmp = tmp_path_factory.mktemp("sglang")
    common = dict(model=m, gpu="h100", num_gpus=1, stack_version=VERSION, port=30001)
    cases = {
        "ngram": (render("sglang", method="ngram", num_speculative_tokens=4, **common).spec.argv, True),
        "eagle3": (render("sglang", method="eagle3", drafter=d["eagle3"], num_speculative_tokens=3, **common).spec.argv, True),
        "standalone": (render("sglang", method="draft_model", drafter=m, num_speculative_tokens=2, **common).spec.argv,
                       True),
    }
    # NGRAM with its trie breadth; EAGLE-3 with the plan's per-batch schedule as adaptive steps.
    ngram = _config(tmp / "ngram", tiny_model, "  method: ngram\n  num_speculative_tokens: 6\n"
                    "  tree: {steps: 6, topk: 4, num_draft_tokens: 12}\n")
    cases["ngram_tree"] = (render("sglang", config_path=ngram).spec.argv, True)
    adaptive = render("sglang", config_path=_config(tmp / "adaptive", tiny_model,
                                                    f"  method: eagle3\n  drafter: {d['eagle3']}\n  num_speculative_tokens: 4\n{SCHEDULE}"))
    assert adaptive.files, "the schedule should render an adaptive config"
    cases["eagle3_adaptive"] = (_written(adaptive, tmp / "adaptive-out"), True)
    cases["eagle"] = (render("sglang", method="eagle", drafter=d["eagle"], num_speculative_tokens=3, **common).spec.argv, True)
    # DFLASH resolves on CUDA/NPU/XPU only: the check's CPU device stops inside SGLang's own DFLASH handler.
    cases["dflash"] = (render("sglang", method="dflash", drafter=d["dflash"], num_speculative_tokens=15, **common).spec.argv, True)
    block = _config(tmp / "block", tiny_model, f"  method: eagle3\n  drafter: {d['eagle3']}\n  num_speculative_tokens: 3\n"
                    "  verification: block\n  draft_sampling: probabilistic\n")
    cases["eagle3_block"] = (render("sglang", config_path=block).spec.argv, True)
    cases["dspark"] = (render("sglang", method="dspark", drafter=d["dspark"], num_speculative_tokens=7, **common).spec.argv, True)
    # Before 0.5.23 the render keeps python3 -m sglang.launch_server, which 0.5.23 still runs (with a warning).
    cases["eagle3_0522"] = (render("sglang", method="eagle3", drafter=d["eagle3"], num_speculative_tokens=3,
                                   **{**common, "stack_version": "0.5.22"}).spec.argv, True)
    # specplug refuses NGRAM and STANDALONE with DP attention; the same argv with it added shows SGLang does too.
    dp = ["--enable-dp-attention", "--tp-size", "2", "--dp-size", "2"]
    cases["ngram_dp_attention"] = (cases["ngram"][0] + dp, True)
    cases["standalone_dp_attention"] = (cases["standalone"][0] + dp, True)
    cases["eagle3_dp_attention"] = (cases["eagle3"][0] + dp, True)
    # A target quantized at load: the EAGLE-3 drafter keeps its own checkpoint's format (SGLang would inherit fp8).
    fp8 = _config(tmp / "fp8", tiny_model, f"  method: eagle3\n  drafter: {d['eagle3']}\n  num_speculative_tokens: 3\n")
    Path(fp8).write_text(Path(fp8).read_text(encoding="utf-8").replace("serve: {port: 30001}",
                                                                       "serve: {port: 30001, quantization: fp8}"), encoding="utf-8")
    cases["eagle3_fp8_target"] = (render("sglang", config_path=fp8).spec.argv, True)
    assert "--speculative-draft-model-quantization" in cases["eagle3_fp8_target"][0]
    cases["eagle3_fp8_target_without_the_flag"] = (
        [a for a in cases["eagle3_fp8_target"][0] if a not in ("--speculative-draft-model-quantization", "unquant")], True)
    mtp = render("sglang", model="deepseek-v3", gpu="h200", num_gpus=8, method="mtp", num_speculative_tokens=1,
                 stack_version=VERSION)
    cases["mtp"] = (mtp.spec.argv, False)
    pinned = mtp.plan.model_copy(update={"model": mtp.plan.model.model_copy(update={"revision": REVISION})})
    cases["revision"] = (render_plan(pinned, checked=True).spec.argv, False)
    head = mtp.plan.speculation.model_copy(update={"method": "eagle3", "drafter": "org/eagle3-head@v2"})
    cases["drafter_revision"] = (render_plan(mtp.plan.model_copy(update={"speculation": head}), checked=True).spec.argv,
                                 False)
    res = run_cli_module("launch", "sglang", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--stack-version", VERSION, "--dry-run")
    assert res.exit_code == (1 if "would fail: " in res.stdout else 0), res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("command: "))
    cases["done_means_70b"] = (shlex.split(line.removeprefix("command: ")), False)
    payload = [{"name": n, "argv": a, "resolve": r} for n, (a, r) in cases.items()]
    return run_helper(sglang_env / "bin" / "python", "sglang_check.py", payload)


def test_ngram_resolves_with_ngram_algorithm(checked):
    r = checked["ngram"]
    assert r["ok"], r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "NGRAM"
    # k=4 drafted after the trie's root (the last token): 5 tokens verified per step.
    assert r["resolved"]["speculative_num_draft_tokens"] == 5
    # SGLang's default trie depth (18) holds the plan's longest match (4) and its k=4 drafts: left as it is.
    assert r["resolved"]["speculative_ngram_max_trie_depth"] == 18
    assert r["parsed"]["max_running_requests"] == 48  # explicit, not SGLang's silent cap
    assert r["parsed"]["host"] == "127.0.0.1" and r["parsed"]["port"] == 30001


def test_eagle3_resolves_with_all_three_knobs_and_steps_plus_one(checked, drafters):
    r = checked["eagle3"]
    assert r["ok"], r.get("error")
    got = r["resolved"]
    assert got["speculative_algorithm"] == "EAGLE3"
    assert got["speculative_draft_model_path"] == str(drafters["eagle3"])
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


def test_ngram_renders_its_trie_breadth(checked):
    r = checked["ngram_tree"]
    assert r["ok"], r.get("error")
    got = r["resolved"]
    assert got["speculative_algorithm"] == "NGRAM"
    assert got["speculative_ngram_max_bfs_breadth"] == 4
    assert got["speculative_num_draft_tokens"] == 12


def test_schedule_becomes_adaptive_steps_that_sglang_accepts(checked, tmp_path_factory):
    r = checked["eagle3_adaptive"]
    assert r["ok"], r.get("error")
    parsed = r["parsed"]
    assert parsed["speculative_adaptive"] is True
    cfg = json.loads(Path(parsed["speculative_adaptive_config"]).read_text(encoding="utf-8"))
    assert cfg == {"1": {"candidate_steps": [0, 2, 4]}, "9": {"candidate_steps": [0, 2]}, "33": {"candidate_steps": [0]}}
    got = r["resolved"]
    # resolve_once read the file: steps is one of its candidates, draft tokens steps + 1, topk 1.
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (4, 1, 5)


def test_a_model_named_at_a_revision_reaches_sglang_as_its_revision(checked):
    r = checked["revision"]
    assert r["ok"], r.get("error")
    assert r["parsed"]["revision"] == REVISION and checked["mtp"]["parsed"]["revision"] is None
    # The MTP draft is the target's repository: without its own revision SGLang would load it at "main".
    assert r["parsed"]["speculative_draft_model_path"] == "deepseek-ai/DeepSeek-V3"
    assert r["parsed"]["speculative_draft_model_revision"] == REVISION


def test_a_drafter_named_at_a_revision_reaches_sglang_as_the_drafts_revision(checked):
    r = checked["drafter_revision"]
    assert r["ok"], r.get("error")
    assert r["parsed"]["speculative_draft_model_path"] == "org/eagle3-head"
    assert r["parsed"]["speculative_draft_model_revision"] == "v2" and r["parsed"]["revision"] is None


def test_mtp_parses_as_eagle(checked):
    r = checked["mtp"]
    assert r["ok"], r.get("error")
    assert r["parsed"]["speculative_algorithm"] == "EAGLE"
    assert (r["parsed"]["speculative_num_steps"], r["parsed"]["speculative_eagle_topk"]) == (1, 1)
    assert r["parsed"]["tp_size"] == 8


def test_eagle_resolves(checked):
    r = checked["eagle"]
    assert r["ok"], r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "EAGLE"


@pytest.mark.parametrize("case,needle", [("ngram_dp_attention", "ngram speculative decoding does not support dp attention"),
                                         ("standalone_dp_attention", "standalone speculative decoding does not support dp attention")])
def test_sglang_itself_refuses_what_specplug_refuses_with_dp_attention(checked, case, needle):
    r = checked[case]
    assert not r["ok"] and needle in r["error"], r
    # EAGLE-3 is not refused for DP attention: whatever stops it here is not that rule.
    assert "does not support dp attention" not in (checked["eagle3_dp_attention"].get("error") or "")


def test_dflash_parses_as_sglangs_dflash_algorithm_with_its_block(checked, drafters):
    r = checked["dflash"]
    assert r["parsed"]["speculative_algorithm"] == "DFLASH"
    assert r["parsed"]["speculative_draft_model_path"] == str(drafters["dflash"])
    # The anchor plus k=15 masks (one z-lab b16 block) as DFLASH's own flag, which _handle_dflash copies to
    # speculative_num_draft_tokens; the alias is left unset so the two cannot disagree.
    assert r["parsed"]["speculative_dflash_block_size"] == 16
    assert r["parsed"]["speculative_num_draft_tokens"] is None
    # Resolution reached SGLang's DFLASH handler (the algorithm and flags were accepted) and stopped at the device.
    assert not r["ok"] and "DFLASH speculative decoding is not supported" in r["error"], r.get("error")


def test_dspark_parses_as_sglangs_dspark_algorithm_with_its_block(checked, drafters):
    r = checked["dspark"]
    assert r["parsed"]["speculative_algorithm"] == "DSPARK"
    assert r["parsed"]["speculative_draft_model_path"] == str(drafters["dspark"])
    assert r["parsed"]["speculative_dspark_block_size"] == 7
    # steps, topk and draft tokens are left to SGLang, which forces them (an explicit different value is an error).
    assert r["parsed"]["speculative_num_draft_tokens"] is None and r["parsed"]["speculative_num_steps"] is None
    assert not r["ok"] and "DSpark speculative decoding only supports CUDA" in r["error"], r.get("error")


def test_block_verification_reaches_sglangs_own_rule(checked):
    r = checked["eagle3_block"]
    assert r["parsed"]["speculative_use_block_verification"] is True
    assert r["parsed"]["speculative_use_rejection_sampling"] is True
    # SGLang accepted the flag for EAGLE3 and stopped only at its CUDA/ROCm requirement (this check runs on a CPU).
    assert not r["ok"] and "block-verification only supports CUDA or ROCm" in r["error"], r.get("error")


def test_0_5_23_renders_start_through_sglang_serve_as_an_llm(checked):
    # Every 0.5.23 render runs `sglang serve --model-type llm`: serve's own argv handling strips the backend
    # choice (no diffusion probe on the Hub) and ServerArgs parses the rest.
    for name in ("ngram", "eagle3", "standalone", "ngram_tree", "eagle3_adaptive", "eagle", "dflash", "dspark", "mtp",
                 "done_means_70b"):
        assert checked[name]["entry"] == {"command": "sglang serve", "model_type": "llm"}, name
        assert "parsed" in checked[name], checked[name].get("error")


def test_before_0_5_23_renders_keep_launch_server_which_0_5_23_still_accepts(checked, drafters):
    r = checked["eagle3_0522"]
    assert r["entry"]["command"] == "python3 -m sglang.launch_server"
    assert r["ok"], r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "EAGLE3"


def test_a_target_quantized_at_load_leaves_the_drafter_in_its_own_format(checked):
    r = checked["eagle3_fp8_target"]
    assert r["ok"], r.get("error")
    assert r["parsed"]["quantization"] == "fp8"
    # 'unquant' resolves to no draft quantization: the draft checkpoint's own config decides (not the target's fp8).
    assert r["decided"]["speculative_draft_model_quantization"] is None
    # Without the flag SGLang hands the drafter the target's fp8 (what the render prevents).
    bare = checked["eagle3_fp8_target_without_the_flag"]
    assert bare["ok"], bare.get("error")
    assert bare["decided"]["speculative_draft_model_quantization"] == "fp8"
