"""The proposer replays against plain, independent implementations, and on hand-built cases."""

from __future__ import annotations

import random

import pytest

from specplug.traffic.replay import NgramReplay, SuffixReplay
from tests.traffic import naive


def _s(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def _cases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        vocab = rng.choice([2, 3, 5, 12, 60])
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 45))]
        out = [rng.randrange(vocab) for _ in range(rng.randrange(1, 45))]
        if prompt and rng.random() < 0.5:  # copy a stretch of the prompt, then go on freely
            out = prompt[rng.randrange(len(prompt)):] + out[: rng.randrange(8)]
        yield prompt, out


@pytest.mark.parametrize(("nmin", "nmax"), [(2, 4), (1, 1), (3, 5), (5, 5)])
def test_ngram_matches_a_plain_replay_at_every_k(nmin, nmax) -> None:
    for prompt, out in _cases(nmin * 10 + nmax, 250):
        r = NgramReplay(8, nmin, nmax)
        r.add(_s(prompt), _s(out))
        for k in (1, 2, 5, 8):
            assert (r.tally.steps[k], r.tally.tokens[k]) == naive.replay(prompt, out, k, nmin, nmax), (prompt, out, k)
        trials, accepts = naive.position_counts(prompt, out, 8, nmin, nmax)
        assert r.tally.trials == trials and r.tally.accepts == accepts, (prompt, out)


def test_suffix_local_drafts_match_a_plain_search() -> None:
    for prompt, out in _cases(7, 300):
        for depth in (3, 24):
            r = SuffixReplay(8, depth=depth)
            assert r.confirmed(_s(prompt), _s(out)) == naive.suffix_confirmed_local(prompt, out, 8, depth), (prompt, out)


def test_copying_the_prompt_accepts_nearly_everything() -> None:
    prompt = list(range(1000, 1300))
    for replay in (NgramReplay(8), SuffixReplay(8)):
        replay.add(_s(prompt), _s(prompt[40:240]))
        rates = replay.tally.position_rates()
        assert rates[0] > 0.95 and min(rates) > 0.85
        assert replay.tally.acceptance_length(8) > 7.0
        assert replay.tally.acceptance_length(1) == pytest.approx(2.0, abs=0.02)


def test_free_text_accepts_almost_nothing() -> None:
    rng = random.Random(0)
    prompt = [rng.randrange(50_000) for _ in range(300)]
    out = [rng.randrange(50_000) for _ in range(300)]
    for replay in (NgramReplay(8), SuffixReplay(8)):
        replay.add(_s(prompt), _s(out))
        assert replay.tally.position_rates()[0] < 0.02
        assert replay.tally.acceptance_length(4) < 1.02


def test_no_match_counts_as_a_position_one_rejection() -> None:
    r = NgramReplay(4)
    r.add(_s([1, 2, 3]), _s([7, 8, 9, 10]))
    assert r.tally.trials[1] == 3 and r.tally.accepts[1] == 0 and r.tally.trials[2] == 0
    assert r.tally.acceptance_length(4) == 1.0


def test_ngram_takes_the_earliest_occurrence() -> None:
    # [5, 6] occurs twice before the end: vLLM's proposer continues the first one (7), not the later one (8).
    prompt = [5, 6, 7, 1, 5, 6, 8, 2, 5]
    r = NgramReplay(1, 2, 2)
    assert r.confirmed(_s(prompt), _s([6, 7])) == [0, 1]
    assert r.confirmed(_s(prompt), _s([6, 8])) == [0, 0]


def test_suffix_learns_from_earlier_outputs_in_the_file() -> None:
    rng = random.Random(1)
    answer = [rng.randrange(50_000) for _ in range(120)]
    r = SuffixReplay(8)
    r.add(_s([1, 2, 3]), _s(answer))
    first = r.tally.acceptance_length(8)
    r.add(_s([4, 5, 6]), _s(answer))  # the same answer again, to a different prompt
    n_first = len(answer) - 1
    steps_second = r.tally.steps[8] - n_first
    assert first == pytest.approx(1.0)
    assert (len(answer) - 1) / steps_second > 5.0  # copied from the global index
    # n-gram decoding sees one request at a time: nothing to copy.
    ng = NgramReplay(8)
    ng.add(_s([4, 5, 6]), _s(answer))
    assert ng.tally.acceptance_length(8) == pytest.approx(1.0)


def test_global_index_memory_is_bounded(monkeypatch) -> None:
    from specplug.traffic import replay

    monkeypatch.setattr(replay, "GEN_REQUESTS", 3)
    r = SuffixReplay(4)
    rng = random.Random(2)
    for _ in range(50):
        r.remember(_s([rng.randrange(50_000) for _ in range(60)]))
        assert len(r._new) <= 3 * 57 and len(r._old) <= 3 * 57  # at most two generations of 3 answers


def test_an_answer_two_generations_back_is_forgotten(monkeypatch) -> None:
    from specplug.traffic import replay

    monkeypatch.setattr(replay, "GEN_REQUESTS", 2)
    answer = _s(list(range(5000, 5100)))
    r = SuffixReplay(8)
    r.remember(answer)  # generation 0
    r.remember(_s([1, 2, 3, 4, 5]))  # generation 0 closes
    assert r.confirmed("", answer)[50] == 8  # generation 1 still sees generation 0
    r.remember(_s([6, 7, 8, 9, 10]))
    r.remember(_s([11, 12, 13, 14, 15]))  # generation 1 closes
    assert r.confirmed("", answer)[50] == 0  # generation 2 does not


def test_suffix_with_earlier_outputs_matches_a_plain_search() -> None:
    rng = random.Random(4)
    for _ in range(120):
        vocab = rng.choice([3, 6, 20])
        r, earlier = SuffixReplay(8), []
        for _ in range(4):
            prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 20))]
            out = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
            if earlier and rng.random() < 0.6:  # repeat part of an earlier answer
                o = rng.choice(earlier)
                out = o[rng.randrange(len(o)):] + out[:6]
            assert r.confirmed(_s(prompt), _s(out)) == naive.suffix_confirmed(prompt, out, earlier), (prompt, out, earlier)
            r.remember(_s(out))
            earlier.append(out)


def _requests(seed: int, n: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out: list[tuple[list[int], list[int]]] = []
    for _ in range(n):
        vocab = rng.choice([2, 3, 5, 12, 60, 5000])
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 45))]
        answer = [rng.randrange(vocab) for _ in range(rng.randrange(1, 45))]
        r = rng.random()
        if prompt and r < 0.4:  # copy a stretch of the prompt
            answer = prompt[rng.randrange(len(prompt)):] + answer[: rng.randrange(8)]
        elif out and r < 0.7:  # repeat part of an earlier answer
            o = rng.choice(out)[1]
            answer = o[rng.randrange(len(o)):] + answer[: rng.randrange(8)]
        out.append((prompt, answer))
    return out


@pytest.mark.parametrize(("nmin", "nmax", "depth"), [(2, 4, 24), (1, 1, 3), (3, 5, 24), (5, 5, 6), (2, 4, 2)])
def test_vectorised_replay_equals_the_plain_one(monkeypatch, nmin, nmax, depth) -> None:
    pytest.importorskip("numpy")
    from specplug.traffic import fastreplay, replay

    # Small generations and batches so that rotations and batch edges fall inside the file.
    for mod in (replay, fastreplay):
        monkeypatch.setattr(mod, "GEN_REQUESTS", 7)
    monkeypatch.setattr(fastreplay, "MAX_BATCH_TOKENS", 300)
    reqs = _requests(nmin * 100 + nmax * 10 + depth, 120)
    ng, sf = NgramReplay(8, nmin, nmax), SuffixReplay(8, depth=depth)
    fast = fastreplay.FastReplay(8, nmin, nmax, depth=depth)
    for prompt, out in reqs:
        ng.add(_s(prompt), _s(out))
        sf.add(_s(prompt), _s(out))
    for i in range(0, len(reqs), 25):  # several add calls, as load_traffic makes
        fast.add([_s(p) for p, _ in reqs[i:i + 25]], [_s(o) for _, o in reqs[i:i + 25]])
    for plain, vec in ((ng.tally, fast.ngram), (sf.tally, fast.suffix)):
        assert (vec.steps, vec.tokens, vec.trials, vec.accepts) == (plain.steps, plain.tokens, plain.trials, plain.accepts)


def test_vectorised_suffix_matches_a_plain_search_with_earlier_outputs() -> None:
    pytest.importorskip("numpy")
    from specplug.traffic.fastreplay import FastReplay

    reqs = _requests(11, 60)
    fast = FastReplay(8)
    fast.add([_s(p) for p, _ in reqs], [_s(o) for _, o in reqs])
    steps = tokens = 0
    earlier: list[list[int]] = []
    for prompt, out in reqs:
        m = naive.suffix_confirmed(prompt, out, earlier)
        p = 1
        while p < len(out):  # the k = 8 walk over the plain search's confirmed counts
            steps += 1
            p += min(m[p], 8) + 1
        tokens += p - 1 if len(out) > 1 else 0
        earlier.append(out)
    assert (fast.suffix.steps[8], fast.suffix.tokens[8]) == (steps, tokens)


def test_bleu4_against_the_direct_formula() -> None:
    from specplug.traffic.replay import bleu4

    # Hand-computed: precisions 4/6, 3/5, 2/4, 1/3, equal lengths (no brevity penalty).
    assert bleu4(_s([1, 2, 3, 4, 5, 6]), _s([1, 2, 3, 4, 9, 9])) == pytest.approx((4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    assert bleu4(_s([1, 2, 3, 4, 5]), _s([1, 2, 3, 4, 5])) == pytest.approx(1.0)
    assert bleu4(_s([1, 2, 3, 4, 5]), _s([6, 7, 8, 9, 10])) == 0.0
    for prompt, out in _requests(3, 300):
        assert bleu4(_s(prompt), _s(out)) == pytest.approx(naive.bleu4(prompt, out), abs=1e-12), (prompt, out)


def test_vectorised_shape_and_bleu_equal_the_plain_ones() -> None:
    pytest.importorskip("numpy")
    from specplug.traffic.fastreplay import FastReplay
    from specplug.traffic.replay import PyReplay

    reqs = _requests(21, 150)
    fast, plain = FastReplay(8), PyReplay(8)
    for r in (fast, plain):
        r.add([_s(p) for p, _ in reqs], [_s(o) for _, o in reqs])
    a, b = fast.shape, plain.shape
    assert (a.grams, a.overlap, a.repeated, a.bleu_requests) == (b.grams, b.overlap, b.repeated, b.bleu_requests)
    assert a.bleu_sum == pytest.approx(b.bleu_sum, abs=1e-9)
    assert b.bleu_sum == pytest.approx(sum(naive.bleu4(p, o) for p, o in reqs), abs=1e-9)


@pytest.mark.parametrize("threaded", [True, False])
def test_vectorised_replay_stays_exact_when_window_hashes_collide(monkeypatch, threaded) -> None:
    pytest.importorskip("numpy")
    from specplug.traffic import fastreplay, replay

    # 3 hash bits: nearly every cross-request lookup first lands on another 4-gram with the same hash.
    monkeypatch.setattr(fastreplay, "HASH_BITS", 3)
    for mod in (replay, fastreplay):
        monkeypatch.setattr(mod, "GEN_REQUESTS", 9)
    monkeypatch.setattr(fastreplay, "MAX_BATCH_TOKENS", 400)
    reqs = _requests(23, 150)
    plain = replay.PyReplay(8)
    plain.add([_s(p) for p, _ in reqs], [_s(o) for _, o in reqs])
    fast = fastreplay.FastReplay(8, threaded=threaded)
    for i in range(0, len(reqs), 30):
        fast.add([_s(p) for p, _ in reqs[i:i + 30]], [_s(o) for _, o in reqs[i:i + 30]])
    for m in ("ngram", "suffix"):
        assert vars(getattr(fast, m)) == vars(getattr(plain, m)), m
    fast.close()
