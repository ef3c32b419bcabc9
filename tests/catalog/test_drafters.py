"""The drafter catalog against the model catalog: targets exist, formats fit methods, vocabularies agree."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from specplug.catalog import get_model
from specplug.catalog.drafters import (
    STACK_NAMES,
    Drafter,
    drafters,
    drafters_for,
    find_drafter,
    parse_stacks,
)
from specplug.errors import CatalogError
from specplug.methods import FORMATS_BY_METHOD

# Targets whose rows were added with the drafter refresh while models.csv gains them in a parallel change,
# and older rows whose targets models.csv never had. Each is reported by name (xfail) until models.csv has it.
PENDING_TARGETS = {
    "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-ai/DeepSeek-R1-0528",
    "deepseek-ai/DeepSeek-V3-0324", "moonshotai/Kimi-K2-Thinking", "moonshotai/Kimi-K2-Instruct-0905",
    "zai-org/GLM-4.6", "MiniMaxAI/MiniMax-M2", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-235B-A22B-Thinking-2507", "Qwen/Qwen3-Next-80B-A3B-Thinking", "Qwen/QwQ-32B",
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
    "mistralai/Mistral-Large-Instruct-2411", "mistralai/Devstral-Small-2507", "mistralai/Magistral-Small-2506",
    "mistralai/Mistral-Nemo-Instruct-2407", "nvidia/Llama-3.3-Nemotron-Super-49B-v1",
    "nvidia/Llama-3.1-Nemotron-Nano-8B-v1", "ibm-granite/granite-3.3-8b-instruct", "google/gemma-3n-E4B-it",
    "microsoft/Phi-4-reasoning", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
    "Qwen/Qwen2.5-Coder-0.5B-Instruct", "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}
LEGACY_MISSING_TARGETS = {
    "Qwen/Qwen2-72B-Instruct", "lmsys/vicuna-33b-v1.5", "mistralai/Mistral-7B-Instruct-v0.2",
    "codellama/CodeLlama-34b-Instruct-hf", "ibm-granite/granite-3b-code-instruct", "ibm-granite/granite-8b-code-instruct",
    "ibm-granite/granite-7b-instruct", "ibm-granite/granite-20b-code-instruct",
}

# Notes that say a stack bridges a vocabulary-size difference (padding-only ids, or an explicit translation).
_VOCAB_BRIDGE_WORDS = ("use_heterogeneous_vocab", "translat")


def _model_or_none(hf_id: str):
    try:
        return get_model(hf_id)
    except CatalogError:
        return None


def _targets() -> list[str]:
    return sorted({d.target_hf_id for d in drafters()})


def test_catalog_is_large_and_rows_unique() -> None:
    rows = drafters()
    assert len(rows) >= 185
    keys = [(d.target_hf_id, d.method, d.drafter_hf_id) for d in rows]
    assert len(keys) == len(set(keys))


def test_every_row_names_a_source_and_a_confirmation() -> None:
    for d in drafters():
        assert d.source.strip(), d.drafter_hf_id
        assert d.confirmed in {"yes", "partial", "no"}, (d.drafter_hf_id, d.confirmed)


@pytest.mark.parametrize("target", _targets())
def test_every_drafter_targets_a_catalog_model(target: str) -> None:
    if _model_or_none(target) is not None:
        return
    if target in PENDING_TARGETS:
        pytest.xfail(f"{target} is promised to models.csv by the parallel model-catalog change and has not landed yet")
    if target in LEGACY_MISSING_TARGETS:
        pytest.xfail(f"{target} has drafter rows from before the refresh but no models.csv row")
    pytest.fail(f"drafter target {target} is not in the model catalog")


def test_method_and_format_pairs_are_valid() -> None:
    for d in drafters():
        assert d.method in FORMATS_BY_METHOD, (d.drafter_hf_id, d.method)
        assert d.format in FORMATS_BY_METHOD[d.method], (d.drafter_hf_id, d.method, d.format)


def test_stacks_parse_and_name_known_stacks() -> None:
    for row in csv.DictReader(resources.files("specplug.catalog").joinpath("data", "drafters.csv").open(encoding="utf-8")):
        parsed = parse_stacks(row["stacks"])
        assert set(parsed) <= STACK_NAMES, (row["drafter_hf_id"], parsed)
    with pytest.raises(ValueError):
        parse_stacks("vllm>0.9")


def test_draft_models_share_the_target_vocabulary() -> None:
    checked, problems = 0, []
    for d in drafters():
        if d.method != "draft_model":
            continue
        target = _model_or_none(d.target_hf_id)
        if target is None:
            continue  # reported by test_every_drafter_targets_a_catalog_model
        draft = _model_or_none(d.drafter_hf_id)
        bridged = any(w in d.notes for w in _VOCAB_BRIDGE_WORDS)
        if draft is not None and target.tokenizer_family and draft.tokenizer_family != target.tokenizer_family and not bridged:
            problems.append(f"{d.drafter_hf_id} for {d.target_hf_id}: tokenizer {draft.tokenizer_family} vs {target.tokenizer_family}")
        vocab = draft.vocab_size if draft is not None and draft.vocab_size else d.vocab_size
        assert vocab is not None, f"{d.drafter_hf_id}: no vocabulary size in either catalog"
        if d.vocab_size is not None and draft is not None and draft.vocab_size is not None:
            assert d.vocab_size == draft.vocab_size, f"{d.drafter_hf_id}: row vocab_size disagrees with models.csv"
        if vocab != target.vocab_size and not bridged:
            problems.append(f"{d.drafter_hf_id} for {d.target_hf_id}: vocab {vocab} vs {target.vocab_size}, and the notes name no stack that bridges it")
        checked += 1
    assert not problems, problems
    assert checked >= 60


def test_eagle3_draft_vocabulary_fits_in_the_target_vocabulary() -> None:
    for d in drafters():
        if d.method != "eagle3" or d.draft_vocab_size is None:
            continue
        assert d.vocab_size is not None and d.draft_vocab_size <= d.vocab_size, d.drafter_hf_id
        target = _model_or_none(d.target_hf_id)
        if target is not None and target.vocab_size:
            assert d.draft_vocab_size <= target.vocab_size, d.drafter_hf_id


def test_heads_output_the_target_vocabulary() -> None:
    for d in drafters():
        if d.method == "draft_model" or d.vocab_size is None:
            continue
        target = _model_or_none(d.target_hf_id)
        if target is not None and target.vocab_size:
            assert d.vocab_size == target.vocab_size, (d.drafter_hf_id, d.vocab_size, target.vocab_size)


def test_mtp_rows_draft_with_the_target_itself() -> None:
    for d in drafters():
        if d.method == "mtp":
            assert d.drafter_hf_id == d.target_hf_id


def test_published_acceptance_comes_with_its_conditions() -> None:
    with_numbers = [d for d in drafters() if d.acceptance_length is not None]
    assert len(with_numbers) >= 15
    # shared/data/README.md's kept-aside sources (the vLLM blog on DSpark adaptive verification, not DeepSeek's paper)
    kept_aside = ("2503.01840", "2601.11580", "SpecDecode-Bench", "P-EAGLE", "EAGLE 3.1", "adaptive verification",
                  "vLLM blog", "Tengyunw")
    for d in with_numbers:
        assert 1.0 <= d.acceptance_length <= 10.0, d.drafter_hf_id
        assert d.acceptance_basis, d.drafter_hf_id
        assert not any(k in d.acceptance_basis for k in kept_aside), (d.drafter_hf_id, d.acceptance_basis)
    assert find_drafter("Tengyunw/qwen3_8b_eagle3").acceptance_length is None


def test_loads_in_reads_first_versions() -> None:
    head = find_drafter("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert head is not None and head.stacks["vllm"] == "0.8.5"
    assert head.loads_in("vllm", "0.8.4") is False
    assert head.loads_in("vllm", "0.10.1") is True
    assert head.loads_in("vLLM") is True
    assert head.loads_in("trtllm", "1.0") is True and head.loads_in("trtllm", "1.0.0rc2") is False
    assert head.loads_in("sglang", "0.4.4.post1") is True
    assert head.loads_in("llamacpp", "b9700") is True and head.loads_in("llamacpp", "b9000") is False
    assert head.loads_in("tgi") is None
    unversioned = Drafter(target_hf_id="t", method="eagle", drafter_hf_id="d", stacks={"sglang": None})
    assert unversioned.loads_in("sglang") is True and unversioned.loads_in("sglang", "0.5.0") is None


def test_llama_3_1_70b_has_a_usable_eagle_head_and_says_what_it_was_trained_on() -> None:
    target = get_model("llama-3.1-70b").hf_id
    usable = drafters_for(target, "eagle")
    assert [d.drafter_hf_id for d in usable] == ["yuhuili/EAGLE-LLaMA3-Instruct-70B"]
    head = usable[0]
    # The pairing comes from a stack's docs (AWS NxD Inference, vLLM's Neuron example); the head was trained on
    # Llama-3-70B-Instruct, and the row says so instead of borrowing that target's published acceptance.
    assert head.cross_target and head.trained_for == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert "aws-neuron-sdk" in head.source and "neuron_eagle.py" in head.source
    assert head.acceptance_length is None and "none published for this pairing" in head.acceptance_basis
    assert head.loads_in("vllm") is True
    # The ids third-party guides name stay placeholders: planners never pick them.
    named = {d.drafter_hf_id for d in drafters_for(target, "eagle", include_unconfirmed=True) if d.confirmed == "no"}
    assert named == {"lmzheng/sglang-EAGLE-LLaMA3.1-Instruct-70B", "yuhuili/EAGLE-LLaMA3.1-Instruct-70B"}


def test_cross_target_heads_name_a_catalog_model_with_the_same_shape() -> None:
    crossed = [d for d in drafters() if d.trained_for]
    assert crossed
    for d in crossed:
        assert d.cross_target, f"{d.drafter_hf_id}: trained_for repeats its own target"
        trained, target = get_model(d.trained_for), get_model(d.target_hf_id)
        # A head reads the target's hidden states and writes its vocabulary: both must be those it was trained on.
        assert (trained.hidden_size, trained.vocab_size, trained.tokenizer_family) == (
            target.hidden_size, target.vocab_size, target.tokenizer_family), d.drafter_hf_id
        assert d.acceptance_length is None, f"{d.drafter_hf_id}: a published figure belongs to the head's own target"
        own = [x for x in drafters_for(d.trained_for, d.method) if x.drafter_hf_id == d.drafter_hf_id]
        assert own, f"{d.drafter_hf_id} is not listed for {d.trained_for}, the target it was trained on"


def test_placeholders_stay_out_of_drafters_for() -> None:
    placeholders = [d for d in drafters() if d.confirmed == "no"]
    assert placeholders
    for d in placeholders:
        assert d not in drafters_for(d.target_hf_id)
        assert not d.stacks, f"{d.drafter_hf_id}: a placeholder cannot be shown loading anywhere"


def test_required_families_are_present() -> None:
    ids = {d.drafter_hf_id for d in drafters()}
    for want in [
        "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B",
        "yuhuili/EAGLE3-Vicuna1.3-13B", "lmsys/SGLang-EAGLE3-Llama-4-Scout-17B-16E-Instruct-SpecForge", "AQ-MedAI/Kimi-K2-Instruct-eagle3",
        "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3", "RedHatAI/gpt-oss-120b-speculator.eagle3", "nvidia/gpt-oss-120b-Eagle3",
        "nvidia/Llama-3.3-70B-Instruct-Eagle3", "amd/PARD-Llama-3.2-1B", "amd/PARD-Qwen2.5-0.5B", "amd/PARD-DeepSeek-R1-Distill-Qwen-1.5B",
        "amd/PARD-Qwen3-0.6B",
    ]:
        assert want in ids, want
    formats = {d.format for d in drafters()}
    assert formats >= {"eagle1", "eagle3", "speculators", "specforge", "medusa", "mlp_speculator", "mtp", "pard", "draft_model"}
    assert all(d.format == "pard" for d in drafters() if d.drafter_hf_id.startswith("amd/PARD-"))
    mtp_targets = {d.target_hf_id for d in drafters() if d.method == "mtp"}
    assert {"deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-R1-0528", "zai-org/GLM-4.6", "zai-org/GLM-4.5"} <= mtp_targets


def test_mtp_targets_in_the_catalog_have_mtp_layers() -> None:
    for d in drafters():
        if d.method != "mtp" or d.confirmed == "no":
            continue
        m = _model_or_none(d.target_hf_id)
        if m is None or m.confirmed == "no":
            continue
        assert m.mtp_layers >= 1, f"{d.target_hf_id} has an MTP drafter row but models.csv records no MTP layers"


def test_rows_hash_by_identity() -> None:
    # Callers put drafters in sets and dict keys; the parsed stacks dict must not make a row unhashable.
    assert len(set(drafters())) == len(drafters())
