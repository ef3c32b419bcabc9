"""How verify tells numeric noise from a broken speculative path, on token/text pairs."""

from __future__ import annotations

from specplug.bench.client import Completion
from specplug.bench.verify import classify


def _toks(words: list[str], top: list[dict[str, float]] | None = None) -> Completion:
    return Completion(text="".join(words), tokens=words, top=top)


BASE = [f" w{i}" for i in range(60)]


def test_identical_tokens():
    d = classify("p", _toks(BASE), _toks(list(BASE)), late_after=32, tie_margin=0.5)
    assert d.identical and d.kind == "identical" and d.unit == "token"


def test_near_tie_anywhere_is_noise():
    spec = BASE[:5] + [" other"] + BASE[6:]
    top = [{t: -0.1} for t in BASE]
    top[5] = {" w5": -0.69, " other": -0.70}
    d = classify("p", _toks(BASE, top), _toks(spec), late_after=32, tie_margin=0.5)
    assert d.kind == "near-tie" and d.position == 5 and abs(d.margin - 0.01) < 1e-9
    assert d.baseline_text.startswith(" w5") and d.speculative_text.startswith(" other")


def test_early_clear_preference_is_systematic():
    spec = BASE[:3] + [" other"] + BASE[4:]
    top = [{t: -0.01} for t in BASE]
    top[3] = {" w3": -0.01, " alt": -5.0}  # the speculative token is not even in the baseline's top-2
    d = classify("p", _toks(BASE, top), _toks(spec), late_after=32, tie_margin=0.5)
    assert d.kind == "systematic" and d.margin >= 4.9


def test_late_divergence_without_logprobs_is_noise_early_is_not():
    late = Completion(text="".join(BASE[:50]) + " x")
    early = Completion(text=" w0 x")
    base = Completion(text="".join(BASE))
    assert classify("p", base, late, 32, 0.5).kind == "late"
    d = classify("p", base, early, 32, 0.5)
    assert d.kind == "systematic" and d.unit == "char" and d.position == 4


def test_one_output_stopping_early_is_a_difference():
    d = classify("p", _toks(BASE), _toks(BASE[:10]), 32, 0.5)
    assert not d.identical and d.position == 10 and d.kind == "systematic"


def test_errors_are_reported_not_compared():
    d = classify("p", Completion(text="", error="HTTP 500: boom"), _toks(BASE), 32, 0.5)
    assert d.kind == "error" and "boom" in d.error
