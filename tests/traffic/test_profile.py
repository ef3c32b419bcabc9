"""TrafficProfile from built logs: the real tokenizer, measured acceptance against a plain replay, the
shape figures, and what the planner does with them."""

from __future__ import annotations

import json
import random

import pytest

from specplug.catalog import Model, get_model
from specplug.traffic import load_traffic
from tests.traffic import logs, naive

NO_TOKENIZER = Model(hf_id="test/no-tokenizer-here")


def test_real_tokenizer_is_used_and_named(smollm2_tokenizer_folder, code_edit_log) -> None:
    prof = load_traffic(code_edit_log, get_model(str(smollm2_tokenizer_folder)))
    assert "tokenizer (local folder" in prof.tokenizer and not prof.tokenizer.startswith("proxy")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(smollm2_tokenizer_folder / "tokenizer.json"))
    recs = [json.loads(line) for line in code_edit_log.read_text(encoding="utf-8").splitlines()]
    mean_out = sum(len(tok.encode(r["completion"], add_special_tokens=False).ids) for r in recs) / len(recs)
    assert prof.output_len == pytest.approx(mean_out)


def test_proxy_is_stated_when_the_tokenizer_is_not_here(code_edit_log) -> None:
    prof = load_traffic(code_edit_log, NO_TOKENIZER)
    assert prof.tokenizer.startswith("proxy:") and "not available offline" in prof.tokenizer


def test_hugging_face_cache_is_found(tmp_path, monkeypatch, smollm2_tokenizer_folder, chat_log) -> None:
    snap = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_bytes((smollm2_tokenizer_folder / "tokenizer.json").read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    prof = load_traffic(chat_log, Model(hf_id="acme/tiny"))
    assert prof.tokenizer.startswith("acme/tiny tokenizer (Hugging Face cache")


@pytest.mark.parametrize("kind", ["code-edit", "chat"])
def test_measured_ngram_acceptance_equals_a_plain_replay(tmp_path, smollm2_tokenizer_folder, kind) -> None:
    from tokenizers import Tokenizer

    recs = logs.build(kind, 5, seed=3, words=60)  # short chat answers: the plain replay is quadratic
    path = logs.write(tmp_path / f"{kind}.jsonl", recs, "chat-pair")
    prof = load_traffic(path, get_model(str(smollm2_tokenizer_folder)))
    tok = Tokenizer.from_file(str(smollm2_tokenizer_folder / "tokenizer.json"))
    enc = [(tok.encode(r["prompt"], add_special_tokens=False).ids, tok.encode(r["completion"], add_special_tokens=False).ids)
           for r in recs]
    for k in (1, 4, 8):
        steps = tokens = 0
        for prompt, out in enc:
            s, t = naive.replay(prompt, out, k)
            steps, tokens = steps + s, tokens + t
        assert prof.acceptance_length("ngram", k) == pytest.approx(tokens / steps, rel=1e-9)
    trials, accepts = [0] * 9, [0] * 9
    for prompt, out in enc:
        tr, ac = naive.position_counts(prompt, out, 8)
        trials = [a + b for a, b in zip(trials, tr, strict=True)]
        accepts = [a + b for a, b in zip(accepts, ac, strict=True)]
    assert prof.position_rates("ngram") == pytest.approx([a / t if t else 0.0 for a, t in zip(accepts[1:], trials[1:], strict=True)])


def test_code_edit_copies_and_chat_does_not(code_edit_log, chat_log) -> None:
    edit, chat = load_traffic(code_edit_log, NO_TOKENIZER), load_traffic(chat_log, NO_TOKENIZER)
    assert edit.overlap > 0.8 and chat.overlap < 0.1
    assert edit.acceptance_length("ngram", 4) > 3.0 > 1.3 > chat.acceptance_length("ngram", 4)
    assert edit.acceptance_length("suffix", 4) > 3.0 > 1.3 > chat.acceptance_length("suffix", 4)
    assert edit.position_rates("ngram")[0] > 0.6 > 0.15 > chat.position_rates("ngram")[0]
    assert edit.position_rates("eagle3") is None and edit.acceptance_length("eagle3", 4) is None
    assert edit.acceptance_length("ngram", 9) is None  # beyond k_max
    assert 0.0 < edit.workload_shift() <= 0.6 and abs(chat.workload_shift()) < 0.15
    s = edit.summary()
    assert s["requests"] == 36 and s["digest"] == edit.digest and len(s["ngram"]["acceptance_length"]) == 8
    json.dumps(s)  # plain figures


def test_acceptance_grows_with_k_on_copied_text(code_edit_log) -> None:
    prof = load_traffic(code_edit_log, NO_TOKENIZER)
    taus = [prof.acceptance_length("ngram", k) for k in range(1, 9)]
    assert taus == sorted(taus) and taus[0] <= 2.0


def test_large_files_replay_evenly_spaced_blocks(tmp_path) -> None:
    from specplug.traffic import profile

    rng = random.Random(5)
    words = [f"w{i}" for i in range(40)]
    recs = [{"prompt": " ".join(rng.choices(words, k=12)), "completion": " ".join(rng.choices(words, k=20))} for _ in range(1200)]
    path = logs.write(tmp_path / "big.jsonl", recs)
    full = load_traffic(path, NO_TOKENIZER, max_replay=None)
    part = load_traffic(path, NO_TOKENIZER, max_replay=600)
    assert full.replayed == full.requests == part.requests == 1200
    assert profile.BATCH == 256  # stride 2 over blocks of 256: blocks 0, 2 and 4 (records 1024-1199)
    assert part.replayed == 256 + 256 + 176
    assert part.acceptance_length("ngram", 4) == pytest.approx(full.acceptance_length("ngram", 4), abs=0.05)


def test_recommend_picks_copying_on_code_edit_and_not_on_chat(code_edit_log, chat_log) -> None:
    import inspect

    import specplug

    if "traffic" not in inspect.signature(specplug.recommend).parameters:
        pytest.skip("specplug.recommend(traffic=...) is not wired in yet")
    edit = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(code_edit_log))
    chat = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(chat_log))
    assert edit.speculation.method in ("ngram", "suffix")
    assert chat.speculation.method not in ("ngram", "suffix")
