import json

import pytest

from specplug.catalog import get_model, models, search_models
from specplug.errors import CatalogError


def test_alias_resolves_to_instruct_model_with_facts():
    m = get_model("llama-3.1-70b")
    assert m.hf_id == "meta-llama/Llama-3.1-70B-Instruct"
    assert m.num_layers == 80 and m.vocab_size == 128256
    assert m.num_kv_heads == 8 and m.head_dim == 128


def test_hf_id_is_case_insensitive():
    assert get_model("META-LLAMA/llama-3.1-8b-instruct").hf_id == "meta-llama/Llama-3.1-8B-Instruct"


def test_catalog_covers_the_families_users_ask_for():
    assert len(models()) >= 40
    ids = " ".join(m.hf_id.lower() for m in models())
    for needle in ["llama-2-7b", "llama-3-8b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.3-70b", "vicuna-7b",
                   "vicuna-13b", "vicuna-33b", "qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "deepseek-v3",
                   "deepseek-r1", "r1-distill", "mistral-7b", "mixtral-8x7b", "gpt-oss-20b", "gemma-2-9b",
                   "gemma-3-27b"]:
        assert needle in ids, needle


def test_moe_models_have_active_params_and_mtp():
    v3 = get_model("deepseek-v3")
    assert v3.is_moe and v3.active_params_b < v3.params_b and v3.mtp_layers == 1
    assert v3.uses_mla


def test_known_drafters_are_attached():
    methods = {d.method for d in get_model("vicuna-7b").known_drafters()}
    assert {"eagle", "medusa"} <= methods


def test_unknown_model_did_you_mean():
    with pytest.raises(CatalogError) as exc:
        get_model("llama-3.1-7b")
    assert "llama-3.1-70b" in str(exc.value) or "llama-3.1-8b" in str(exc.value)


def test_search_matches_every_word():
    found = {m.hf_id for m in search_models("qwen3 coder")}
    assert "Qwen/Qwen3-Coder-480B-A35B-Instruct" in found
    assert all("qwen3-coder" in h.lower() for h in found)


def _write_local_model(folder, vocab):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": len(vocab), "max_position_embeddings": 2048, "tie_word_embeddings": True,
    }))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": []}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))


def test_local_folder_is_read_offline(tmp_path):
    _write_local_model(tmp_path / "tiny", {"a": 0, "b": 1, "</s>": 2})
    m = get_model(str(tmp_path / "tiny"))
    assert m.local_path and m.num_layers == 4 and m.num_kv_heads == 2 and m.head_dim == 32
    assert m.tokenizer_family.startswith("local:") and m.special_tokens["eos_token"] == "</s>"
    assert m.params_b > 0


def test_local_folders_with_different_vocab_get_different_fingerprints(tmp_path):
    _write_local_model(tmp_path / "a", {"a": 0, "b": 1})
    _write_local_model(tmp_path / "b", {"a": 1, "b": 0})
    assert get_model(str(tmp_path / "a")).tokenizer_family != get_model(str(tmp_path / "b")).tokenizer_family


def test_folder_without_config_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError, match="config.json"):
        get_model(str(tmp_path / "empty"))


def _write_gguf(path, arch="llama", n_tokens=5):
    """A minimal GGUF v3 header (no tensors) with the architecture keys llama.cpp writes."""
    import struct

    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    kvs = [
        (s("general.architecture"), struct.pack("<I", 8) + s(arch)),
        (s(f"{arch}.block_count"), struct.pack("<I", 4) + struct.pack("<I", 6)),
        (s(f"{arch}.embedding_length"), struct.pack("<I", 4) + struct.pack("<I", 128)),
        (s(f"{arch}.feed_forward_length"), struct.pack("<I", 4) + struct.pack("<I", 256)),
        (s(f"{arch}.attention.head_count"), struct.pack("<I", 4) + struct.pack("<I", 4)),
        (s(f"{arch}.attention.head_count_kv"), struct.pack("<I", 4) + struct.pack("<I", 2)),
        (s(f"{arch}.context_length"), struct.pack("<I", 4) + struct.pack("<I", 2048)),
        (s("tokenizer.ggml.tokens"), struct.pack("<I", 9) + struct.pack("<I", 8) + struct.pack("<Q", n_tokens)
         + b"".join(s(f"t{i}") for i in range(n_tokens))),
    ]
    body = b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0) + struct.pack("<Q", len(kvs))
    path.write_bytes(body + b"".join(k + v for k, v in kvs))


def test_gguf_file_is_read_from_its_header(tmp_path):
    f = tmp_path / "tiny.gguf"
    _write_gguf(f)
    m = get_model(str(f))
    assert (m.num_layers, m.hidden_size, m.num_kv_heads, m.head_dim, m.vocab_size) == (6, 128, 2, 32, 5)
    assert m.max_position_embeddings == 2048 and m.local_path


def test_missing_or_broken_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(CatalogError, match="does not exist"):
        get_model(str(tmp_path / "nope.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE")
    with pytest.raises(CatalogError, match="GGUF"):
        get_model(str(bad))


def test_sliding_window_layers_cache_only_their_window() -> None:
    m = get_model("gpt-oss-120b")
    assert (m.sliding_window, m.sliding_layers, m.num_layers) == (128, 18, 36)
    assert m.kv_share(128) == 1.0
    assert m.kv_share(131072) == pytest.approx(0.5, abs=0.001)
    assert get_model("llama-3.1-8b").kv_share(131072) == 1.0


def test_a_local_config_says_which_layers_slide(tmp_path):
    _write_local_model(tmp_path / "swa", {"a": 0, "</s>": 1})
    cfg_path = tmp_path / "swa" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(sliding_window=64, layer_types=["sliding_attention", "full_attention"] * 2)
    cfg_path.write_text(json.dumps(cfg))
    m = get_model(str(tmp_path / "swa"))
    assert (m.sliding_window, m.sliding_layers) == (64, 2)
    assert m.kv_share(2048) == pytest.approx(1 - 0.5 * (1 - 64 / 2048))


def test_catalog_draft_models_are_models():
    """A catalog drafter that is a whole model (PARD) resolves to a model with its size and tokenizer, so planning
    neither guesses its size nor warns that its vocabulary is unknown."""
    from specplug.catalog import get_model

    pard = get_model("amd/PARD-Llama-3.2-1B")
    target = get_model("meta-llama/Llama-3.1-8B-Instruct")
    assert pard.hf_id == "amd/PARD-Llama-3.2-1B" and pard.params_b == 1.24
    assert pard.tokenizer_family == target.tokenizer_family and pard.vocab_size == 128256
    assert pard.basis_of("num_layers").startswith("catalog: meta-llama/Llama-3.2-1B-Instruct")
    assert get_model("amd/pard-qwen3-0.6b").vocab_size == 151936
