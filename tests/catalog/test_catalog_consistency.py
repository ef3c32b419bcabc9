"""Whole-catalog checks on models.csv: formats, base models, MoE facts and parameter counts against the dims."""

from __future__ import annotations

import pytest

from specplug.catalog import get_model, models, search_models
from specplug.catalog._csv import norm, read_rows
from specplug.catalog.precision import weight_formats
from specplug.errors import CatalogError

ROWS = read_rows("models.csv")
BY_ID = {r["hf_id"].lower(): r for r in ROWS}


def _f(r: dict[str, str], key: str) -> float | None:
    v = r.get(key, "")
    return float(v) if v.strip() else None


def _extra(r: dict[str, str]) -> dict[str, float]:
    """The dims_extra cell: config.json keys the columns do not hold (MLA ranks, shared experts, dense layers)."""
    out: dict[str, float] = {}
    for part in r.get("dims_extra", "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = float(v)
    return out


def dims_params(r: dict[str, str]) -> tuple[float, float | None]:
    """Billions of (total, active) parameters implied by a row's dims, the rule params_basis names: embeddings
    (+ an untied LM head) + attention (q/k/v/o, or MLA's low-rank projections) + gated MLP or routed experts
    (+ shared experts and the router); norms and biases ignored. Active is None for dense models."""
    h, layers, vocab = _f(r, "hidden_size"), _f(r, "num_layers"), _f(r, "vocab_size")
    inter, heads = _f(r, "intermediate_size") or 0.0, _f(r, "num_attention_heads")
    assert h and layers and vocab and heads, r["hf_id"]
    kv_heads = _f(r, "num_kv_heads") or heads
    head_dim = _f(r, "head_dim") or h / heads
    x = _extra(r)
    emb = vocab * h * (1 if r["tie_word_embeddings"].strip().lower() == "true" else 2)
    if "kv_lora_rank" in x:
        nope, rope, v_dim, kv_rank = x["qk_nope_head_dim"], x["qk_rope_head_dim"], x["v_head_dim"], x["kv_lora_rank"]
        q_rank = x.get("q_lora_rank", 0)
        q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank * heads * (nope + rope)
        attn = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * h
    else:
        attn = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
    mats = x.get("mlp_matrices", 3)  # gate/up/down; 2 for a plain (non-gated) MLP
    experts = _f(r, "moe_num_experts")
    if not experts:
        return (emb + layers * (attn + mats * h * inter)) / 1e9, None
    top_k = _f(r, "moe_experts_per_token") or 1
    expert_inter = _f(r, "moe_intermediate_size") or inter
    shared = x.get("n_shared_experts", 0) * x.get("shared_expert_intermediate_size", expert_inter)
    dense_layers = x.get("first_k_dense_replace", 0)
    common = emb + layers * attn + dense_layers * mats * h * inter

    def with_experts(n: float) -> float:
        return common + (layers - dense_layers) * (n * mats * h * expert_inter + mats * h * shared + h * experts)

    return with_experts(experts) / 1e9, with_experts(top_k) / 1e9


def _computed(r: dict[str, str]) -> bool:
    return r["params_basis"].startswith("computed from config dims")


def test_catalog_is_large_and_ids_are_unique():
    assert len(ROWS) >= 125
    assert len(BY_ID) == len(ROWS)


def test_names_resolve_to_one_model_each():
    owners: dict[str, set[str]] = {}
    for m in models():
        for key in {norm(x) for x in [m.hf_id, m.hf_id.split("/", 1)[-1], *m.aliases]}:
            owners.setdefault(key, set()).add(m.hf_id)
    assert not {k: v for k, v in owners.items() if len(v) > 1}


def test_every_weight_format_is_a_known_format():
    known = {f.name for f in weight_formats()}
    bad = [(r["hf_id"], r["weight_format"]) for r in ROWS if r["weight_format"] not in known]
    assert not bad


def test_every_row_says_where_its_weight_format_comes_from():
    assert not [r["hf_id"] for r in ROWS if "weight format" not in r["source"].lower()]


def test_base_models_exist_and_share_the_vocabulary():
    for r in ROWS:
        if not r["base_model"]:
            continue
        base = BY_ID.get(r["base_model"].lower())
        assert base is not None, (r["hf_id"], r["base_model"])
        assert not base["base_model"], f"{r['hf_id']}: base {base['hf_id']} is itself a derivative"
        assert r["vocab_size"] == base["vocab_size"], r["hf_id"]
        assert r["weight_format"] != "bf16" or base["weight_format"] != "bf16", r["hf_id"]
    for m in models():
        if m.base_model:
            assert m.tokenizer_family == get_model(m.base_model).tokenizer_family, m.hf_id


def test_one_tokenizer_family_means_vocab_sizes_that_differ_only_by_padding():
    sizes: dict[str, set[int]] = {}
    for r in ROWS:
        if r["tokenizer_family"] and r["vocab_size"]:
            sizes.setdefault(r["tokenizer_family"], set()).add(int(r["vocab_size"]))
    wide = {fam: s for fam, s in sizes.items() if max(s) - min(s) > 1024}
    assert not wide


def test_moe_rows_are_coherent():
    for r in ROWS:
        experts = _f(r, "moe_num_experts")
        if not experts:
            continue
        top_k, total, active = _f(r, "moe_experts_per_token"), _f(r, "params_b"), _f(r, "active_params_b")
        assert top_k and top_k <= experts, r["hf_id"]
        assert total and active and active < total, r["hf_id"]
        assert r["moe_intermediate_size"], r["hf_id"]


@pytest.mark.parametrize("row", [r for r in ROWS if _computed(r)], ids=lambda r: r["hf_id"])
def test_parameter_counts_match_the_dims(row):
    total, active = dims_params(row)
    assert _f(row, "params_b") == pytest.approx(total, rel=0.06)
    if active is not None:
        assert _f(row, "active_params_b") == pytest.approx(active, rel=0.06)


def test_rows_not_computed_from_dims_say_what_they_rest_on():
    for r in ROWS:
        if not _computed(r):
            assert r["params_basis"].strip(), r["hf_id"]


def test_formula_reproduces_published_totals():
    v3_total, v3_active = dims_params(BY_ID["deepseek-ai/deepseek-v3"])
    assert v3_total == pytest.approx(671, rel=0.01) and v3_active == pytest.approx(37, rel=0.03)
    assert dims_params(BY_ID["meta-llama/llama-3.1-8b-instruct"])[0] == pytest.approx(8.03, rel=0.01)
    assert dims_params(BY_ID["qwen/qwen3-30b-a3b"])[1] == pytest.approx(3.3, rel=0.03)


def test_checkpoint_formats_of_well_known_models():
    assert get_model("deepseek-v3").weight_format == "fp8"
    assert get_model("deepseek-r1").weight_format == "fp8"
    assert get_model("kimi-k2").weight_format == "fp8"
    assert get_model("gpt-oss-120b").weight_format == "mxfp4"
    assert get_model("gpt-oss-20b").weight_format == "mxfp4"
    assert get_model("llama-3.1-8b").weight_format == "bf16"


@pytest.mark.parametrize(
    ("typed", "base", "fmt"),
    [
        ("llama-3.1-70b-awq", "meta-llama/Llama-3.1-70B-Instruct", "int4-awq"),
        ("LLAMA-3.1-70B-AWQ-INT4", "meta-llama/Llama-3.1-70B-Instruct", "int4-awq"),
        ("qwen3-8b-int4", "Qwen/Qwen3-8B", "int4-gptq"),
        ("qwen2.5-7b-gptq", "Qwen/Qwen2.5-7B-Instruct", "int4-gptq"),
        ("llama-3.1-8b-w4a16", "meta-llama/Llama-3.1-8B-Instruct", "int4-gptq"),
        ("deepseek-r1-nvfp4", "deepseek-ai/DeepSeek-R1", "nvfp4"),
        ("gpt-oss-20b-fp4", "openai/gpt-oss-20b", "nvfp4"),
        ("llama-3.1-8b-int8", "meta-llama/Llama-3.1-8B-Instruct", "int8"),
        ("llama-3.1-8b-w8a8", "meta-llama/Llama-3.1-8B-Instruct", "int8"),
        ("mistral-7b-fp8", "mistralai/Mistral-7B-Instruct-v0.3", "fp8"),
    ],
)
def test_quantized_suffixes_resolve_to_the_base_model(typed, base, fmt):
    m = get_model(typed)
    assert m.base_model == base and m.weight_format == fmt
    assert m.hf_id.startswith(base + "-") and m.aliases == [typed]
    assert "inferred from the name" in m.notes and m.confirmed == "inferred"
    assert m.tokenizer_family == get_model(base).tokenizer_family


def test_suffixed_hf_id_keeps_the_typed_id():
    m = get_model("RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic")
    assert m.hf_id == "RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic"
    assert m.base_model == "meta-llama/Llama-3.1-8B-Instruct" and m.weight_format == "fp8"


def test_suffix_on_a_quantized_row_points_at_the_original_release():
    m = get_model("nvidia/Llama-3.1-70B-Instruct-FP8-w8a8")
    assert m.base_model == "meta-llama/Llama-3.1-70B-Instruct" and m.weight_format == "int8"


def test_unknown_stem_with_a_suffix_is_still_an_unknown_model():
    with pytest.raises(CatalogError):
        get_model("no-such-model-7b-awq")


def test_quantized_rows_resolve_by_their_own_id():
    m = get_model("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4")
    assert m.weight_format == "int4-awq" and m.base_model == "meta-llama/Llama-3.1-70B-Instruct"
    assert get_model("qwen3-235b-a22b-fp8").hf_id == "Qwen/Qwen3-235B-A22B-FP8"
    assert get_model("nvidia/DeepSeek-R1-FP4").weight_format == "nvfp4"


def test_inferred_variant_keeps_the_base_models_drafters():
    base = get_model("llama-3.1-8b")
    variant = get_model("llama-3.1-8b-fp8")
    assert {d.drafter_hf_id for d in base.known_drafters()} <= {d.drafter_hf_id for d in variant.known_drafters()}


def test_quantized_rows_inherit_drafters_of_their_base():
    for m in models():
        if m.base_model:
            base_ids = {d.drafter_hf_id for d in get_model(m.base_model).known_drafters()}
            assert base_ids <= {d.drafter_hf_id for d in m.known_drafters()}, m.hf_id


@pytest.mark.parametrize(("text", "needle"), [("kimi", "kimi"), ("Qwen3-Coder", "qwen3-coder"), ("glm", "glm")])
def test_search_finds_families(text, needle):
    found = search_models(text)
    assert found and all(needle in m.hf_id.lower() or needle in m.family.lower() for m in found[:3])


def test_search_ranks_exact_names_first_and_folds_separators():
    assert search_models("qwen3-8b")[0].hf_id == "Qwen/Qwen3-8B"
    assert search_models("Qwen/Qwen3-8B")[0].hf_id == "Qwen/Qwen3-8B"
    assert search_models("deepseek-v3")[0].hf_id == "deepseek-ai/DeepSeek-V3"
    assert {m.hf_id for m in search_models("qwen3coder")} == {m.hf_id for m in search_models("qwen3 coder")}
    assert search_models("gpt_oss 120b")[0].hf_id == "openai/gpt-oss-120b"
    assert search_models("zzz-not-a-model") == []
