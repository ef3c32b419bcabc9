"""TrafficProfile from built logs: the real tokenizer, measured acceptance against a plain replay, the
shape figures, and what the planner does with them."""

from __future__ import annotations

import datetime
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


def test_every_request_is_replayed_and_the_plain_replay_agrees(tmp_path, monkeypatch) -> None:
    pytest.importorskip("numpy")
    from specplug.traffic import profile
    from specplug.traffic.replay import PyReplay

    rng = random.Random(5)
    words = [f"w{i}" for i in range(40)]
    recs = [{"prompt": " ".join(rng.choices(words, k=12)), "completion": " ".join(rng.choices(words, k=20))} for _ in range(2500)]
    path = logs.write(tmp_path / "big.jsonl", recs)
    fast = load_traffic(path, NO_TOKENIZER)  # three tokenizer batches, the last one partial
    assert fast.replayed == fast.requests == 2500 > 2 * profile.BATCH
    monkeypatch.setattr(profile, "_replayer", lambda k, lo, hi: PyReplay(k, lo, hi))  # as without numpy
    plain = load_traffic(path, NO_TOKENIZER)
    assert plain.summary() == fast.summary()
    for m in ("ngram", "suffix"):
        assert vars(plain.tallies[m]) == vars(fast.tallies[m])


def test_bleu4_is_measured_beside_the_overlap(smollm2_tokenizer_folder, tmp_path) -> None:
    from tokenizers import Tokenizer

    recs = logs.build("code-edit", 6, seed=2) + logs.build("chat", 6, seed=2, words=60)
    path = logs.write(tmp_path / "mixed.jsonl", recs)
    prof = load_traffic(path, get_model(str(smollm2_tokenizer_folder)))
    tok = Tokenizer.from_file(str(smollm2_tokenizer_folder / "tokenizer.json"))
    ids = [(tok.encode(r["prompt"], add_special_tokens=False).ids, tok.encode(r["completion"], add_special_tokens=False).ids)
           for r in recs]
    assert prof.bleu4 == pytest.approx(sum(naive.bleu4(p, o) for p, o in ids) / len(ids))
    edit = [naive.bleu4(p, o) for p, o in ids[:6]]
    chat = [naive.bleu4(p, o) for p, o in ids[6:]]
    assert min(edit) > 0.6 > 0.05 > max(chat)  # code edits copy their prompt; free chat does not
    text = prof.shape_text()
    assert f"BLEU-4 {prof.bleu4:.2f}" in text and f"{prof.overlap:.0%} of 4-grams" in text
    assert prof.summary()["bleu4"] == round(prof.bleu4, 4)


def test_a_progress_bar_follows_the_file(tmp_path) -> None:
    import io

    from rich.console import Console

    from specplug.commands._progress import TrafficBar

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    recs = [{"prompt": f"p{i} " * 50, "completion": f"c{i} " * 50} for i in range(3000)]
    path = logs.write(tmp_path / "big.jsonl", recs)
    assert path.stat().st_size > 1 << 20
    load_traffic(path, NO_TOKENIZER, progress=TrafficBar(console))
    drawn = out.getvalue()
    assert "replaying traffic" in drawn and "MB" in drawn


def test_malformed_lines_are_reported_with_their_numbers(tmp_path) -> None:
    good = json.dumps({"prompt": "a b c", "completion": "d e f"})
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([good, "{oops", good, "[]", good]) + "\n", encoding="utf-8")
    prof = load_traffic(path, NO_TOKENIZER)
    assert prof.malformed_text() == "2 malformed lines skipped (lines 2, 4)"
    path.write_text("\n".join(["x"] * 25 + [good]) + "\n", encoding="utf-8")
    assert load_traffic(path, NO_TOKENIZER).malformed_text().startswith("25 malformed lines skipped (lines 1, 2, 3,")
    assert load_traffic(path, NO_TOKENIZER).malformed_text().endswith("19, 20, ...)")


def test_recommend_picks_copying_on_code_edit_and_not_on_chat(code_edit_log, chat_log) -> None:
    import specplug

    edit = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(code_edit_log))
    chat = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(chat_log))
    assert edit.speculation.method in ("ngram", "suffix")
    assert chat.speculation.method not in ("ngram", "suffix")


def _log(path, prompt_words: list[int]):
    rng = random.Random(7)
    words = [f"w{i}" for i in range(500)]
    lines = [json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(n)),
                         "completion": " ".join(rng.choice(words) for _ in range(64))}) for n in prompt_words]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_logs_context_lengths_drive_a_learned_drafters_acceptance(tmp_path) -> None:
    import specplug

    short = _log(tmp_path / "short.jsonl", [300] * 20)
    mixed = _log(tmp_path / "mixed.jsonl", [300] * 10 + [30000] * 10)
    prof = load_traffic(mixed, NO_TOKENIZER)
    assert len(prof.contexts) == 10 and prof.contexts[0] < 2048 < prof.contexts[-1]
    assert prof.summary()["context_tenths"] == [round(x) for x in prof.contexts]
    a = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, method="eagle3", traffic=str(short))
    b = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, method="eagle3", traffic=str(mixed))
    assert b.prediction.acceptance_rate < a.prediction.acceptance_rate - 0.1
    assert any("Over the traffic's contexts" in r for r in b.reasons)


# Arrival times: a log that says when each request came gives the request rate the load model plans for.
def _timed(path, recs, times, where="created"):
    lines = []
    for r, t in zip(recs, times, strict=True):
        if where == "created":  # an OpenAI response's own timestamp
            lines.append({"request": {"model": "m", "prompt": r["prompt"]},
                          "response": {"created": t, "choices": [{"text": r["completion"]}]}})
        else:
            lines.append({**r, where: t})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_arrival_times_give_the_request_rate_and_how_bursty_it_is(tmp_path) -> None:
    recs = logs.build("chat", n=200, words=20)
    rng = random.Random(1)
    t, times = 1_764_900_000.0, []
    for _ in recs:
        t += rng.expovariate(2.0)  # Poisson at 2 requests/s
        times.append(round(t, 3))
    prof = load_traffic(_timed(tmp_path / "a.jsonl", recs, times), NO_TOKENIZER)
    assert prof.timed == 200 and prof.request_rate == pytest.approx(2.0, rel=0.15)
    assert prof.arrival_cv == pytest.approx(1.0, abs=0.2)
    # ISO 8601 in a field of the log's own, and milliseconds: the same rate.
    iso = [datetime.datetime.fromtimestamp(x, datetime.UTC).isoformat() for x in times]
    assert load_traffic(_timed(tmp_path / "b.jsonl", recs, iso, "timestamp"), NO_TOKENIZER).request_rate == pytest.approx(
        prof.request_rate)
    ms = [x * 1000 for x in times]
    assert load_traffic(_timed(tmp_path / "c.jsonl", recs, ms, "time"), NO_TOKENIZER).request_rate == pytest.approx(
        prof.request_rate)
    # Bursts: ten at once, then a pause.
    bursty = [1_764_900_000.0 + (i // 10) * 5 + (i % 10) * 0.01 for i in range(200)]
    assert load_traffic(_timed(tmp_path / "d.jsonl", recs, bursty), NO_TOKENIZER).arrival_cv > 2
    # Untimed logs have no rate.
    assert load_traffic(logs.write(tmp_path / "e.jsonl", recs), NO_TOKENIZER).request_rate is None


def test_the_plan_takes_the_logs_request_rate_and_says_where_it_came_from(tmp_path) -> None:
    import specplug

    recs = logs.build("chat", n=120, words=20)
    times = [1_764_900_000.0 + i * 0.25 for i in range(120)]  # 4 requests/s, evenly
    log = _timed(tmp_path / "timed.jsonl", recs, times)
    plan = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(log))
    assert plan.load is not None and plan.load.request_rate == pytest.approx(4.0, rel=0.01)
    assert any("from the traffic log's arrival times (120 of 120 requests timed" in r for r in plan.reasons)
    # A rate the user gives wins over the log's.
    given = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(log), request_rate=1.0)
    assert given.load.request_rate == 1.0 and not any("arrival times" in r for r in given.reasons)
    bursty = _timed(tmp_path / "bursty.jsonl", recs, [1_764_900_000.0 + (i // 20) * 10 for i in range(120)])
    b = specplug.recommend(model="qwen3-8b", gpu="h100", num_gpus=1, traffic=str(bursty))
    assert any("bursts queue longer than predicted" in r for r in b.reasons)
