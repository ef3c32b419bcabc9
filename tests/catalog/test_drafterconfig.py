"""Drafters read from their config.json on the fake Hub: the method, format, draft vocabulary and trained target
each kind's files state, and the error for a head named under another method."""

from __future__ import annotations

import json

import pytest

from specplug.catalog.drafterconfig import check_method, classify, read_drafter
from specplug.errors import CatalogError
from tests.catalog.hubfake import DRAFTERS

KINDS = {
    "specforge/llama3-8B-eagle3": ("eagle3", "eagle3", 32000, "meta-llama/Meta-Llama-3.1-8B"),
    "specforge/qwen3-30B-A3B-eagle3.1": ("eagle3", "eagle3.1", 32000, "Qwen/Qwen3-30B-A3B"),
    "specforge/qwen3-8b-dflash": ("dflash", "dflash", None, "Qwen/Qwen3-8B"),
    "specforge/qwen3-8b-dspark": ("dspark", "dspark", None, "Qwen/Qwen3-8B"),
    "specforge/qwen3-8b-peagle": ("p_eagle", "p_eagle", 32000, "Qwen/Qwen3-8B"),
    "safeailab/vicuna-7B-eagle": ("eagle", "eagle1", None, ""),
    "safeailab/llama3-8B-eagle3": ("eagle3", "eagle3", 32000, ""),
    "FasterDecoding/medusa-vicuna-7b-v1.3": ("medusa", "medusa", None, "lmsys/vicuna-7b-v1.3"),
    "RedHatAI/gemma-4-31B-it-speculator.eagle3": ("eagle3", "speculators", 32000, "google/gemma-4-31B-it"),
}


def test_every_drafter_fixture_has_a_source():
    sources = (DRAFTERS / "SOURCES.md").read_text(encoding="utf-8")
    folders = [p.name for p in DRAFTERS.iterdir() if p.is_dir()]
    assert len(folders) >= 5 and all(f"`{f}`" in sources for f in folders)
    assert {repo.replace("/", "--", 1) for repo in KINDS} == set(folders)


@pytest.mark.parametrize("repo", sorted(KINDS))
def test_each_drafters_files_say_what_it_is(fake_hub, repo):
    method, fmt, draft_vocab, target = KINDS[repo]
    info = read_drafter(repo)
    assert (info.method, info.format, info.draft_vocab_size, info.trained_for) == (method, fmt, draft_vocab, target)
    assert info.basis.startswith("config.json ") and info.source.startswith(f"config.json of {repo} at revision ")


def test_speculators_vocabularies_and_verifier():
    info = classify(json.loads((DRAFTERS / "RedHatAI--gemma-4-31B-it-speculator.eagle3" / "config.json").read_text()))
    assert (info.vocab_size, info.draft_vocab_size, info.layers) == (262144, 32000, 1)
    assert info.trained_for_basis == "speculators_config.verifier.name_or_path"


def test_an_eagle3_head_named_as_eagle_is_an_error_naming_eagle3(fake_hub):
    info = read_drafter("specforge/llama3-8B-eagle3")
    with pytest.raises(CatalogError) as exc:
        check_method(info, "eagle")
    text = str(exc.value)
    assert "EAGLE-3 head" in text and "--method eagle3" in text and "accepts almost no" in text
    check_method(info, "eagle3")  # the right method passes


@pytest.mark.parametrize("repo,wrong", [("safeailab/vicuna-7B-eagle", "eagle3"), ("specforge/qwen3-8b-dflash", "eagle3"),
                                        ("FasterDecoding/medusa-vicuna-7b-v1.3", "draft_model")])
def test_other_heads_under_the_wrong_method(fake_hub, repo, wrong):
    info = read_drafter(repo)
    with pytest.raises(CatalogError, match=f"--method {info.method}"):
        check_method(info, wrong)


def test_mlp_speculator_and_plain_lm_configs():
    # The keys vLLM's MLPSpeculatorConfig reads; no verbatim IBM config was found to copy.
    mlp = classify({"architectures": ["MLPSpeculatorPreTrainedModel"], "model_type": "mlp_speculator", "n_predict": 3,
                    "vocab_size": 128256, "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"})
    assert (mlp.method, mlp.trained_for) == ("mlp_speculator", "meta-llama/Llama-3.1-8B-Instruct")
    lm = classify({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 28})
    assert lm.method == "draft_model"


def test_a_local_drafter_folder_reads_the_same(tmp_path):
    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "config.json").write_bytes((DRAFTERS / "specforge--qwen3-8b-dflash" / "config.json").read_bytes())
    assert read_drafter(str(folder)).method == "dflash"
    with pytest.raises(CatalogError, match="no config.json"):
        read_drafter(str(tmp_path))


def test_an_unknown_config_is_a_clear_error():
    with pytest.raises(CatalogError, match="names no architecture"):
        classify({"hello": 1}, "x/y")


def test_every_format_the_reader_gives_belongs_to_its_method_in_the_method_table():
    from specplug.methods import BY_NAME

    for arch, fmt in (("DFlash2DraftModel", "dflash2"), ("LiLiCorrDraftModel", "lilicorr"), ("DFlashDraftModel", "dflash")):
        info = classify({"architectures": [arch], "model_type": "qwen3", "block_size": 16})
        assert info.format == fmt and fmt in BY_NAME[info.method].formats
    dflash = BY_NAME["dflash"]
    assert dflash.stacks_for_format("lilicorr") == {"vllm": "0.32", "sglang": "0.5.23"}
    assert dflash.stacks_for_format("dflash") == {}
    assert (BY_NAME["ngram"].drafts_by, BY_NAME["draft_model"].drafts_by, BY_NAME["eagle3"].drafts_by) == ("copy", "model", "learned")
    assert BY_NAME["eagle3"].needs_drafter and not BY_NAME["mtp"].needs_drafter
    assert "p_eagle" not in BY_NAME  # no stack here runs P-EAGLE checkpoints: the reader says so instead


@pytest.mark.parametrize("arch,method", [
    # Class names from the vLLM and SGLang registries that no fixed list named: per-target heads arrive monthly.
    ("Qwen3DSparkModel", "dspark"), ("Gemma4DSparkForCausalLM", "dspark"), ("DFlashQwen3ForCausalLM", "dflash"),
    ("EagleMistralForCausalLM", "eagle"), ("LlamaForCausalLMEagle", "eagle"), ("Qwen2ForCausalLMEagle", "eagle"),
    ("Eagle3MiniMaxM2ForCausalLM", "eagle3"), ("Qwen3NextForCausalLMMTP", "mtp"), ("DeepseekV3ForCausalLMNextN", "mtp"),
])
def test_drafter_classes_the_stacks_register_are_read_by_their_names(arch, method):
    assert classify({"architectures": [arch], "model_type": "qwen3", "num_hidden_layers": 1}).method == method


def test_a_target_model_is_not_mistaken_for_a_drafter_by_its_name():
    for arch in ("MiMoV2FlashForCausalLM", "LongcatFlashForCausalLM", "DeepseekV3ForCausalLM"):
        assert classify({"architectures": [arch], "model_type": "x", "num_hidden_layers": 4}).method == "draft_model"
