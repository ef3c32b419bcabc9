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


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_schema_check_counts_parsed_valid_and_truncated():
    from specplug.bench.verify import check_schema

    outs = [
        ("a", Completion(text='{"n": 1}', finish_reason="stop")),
        ("b", Completion(text='{"n": "x"}', finish_reason="stop")),
        ("c", Completion(text='{"n": 1', finish_reason="length")),
        ("d", Completion(text="", error="HTTP 500")),
    ]
    c = check_schema("speculative", SCHEMA, outs)
    assert (c.outputs, c.parsed, c.valid, c.truncated, c.broken) == (3, 2, 1, 1, 1)
    assert c.first_problem.startswith("b: does not validate")


def test_load_schema_refuses_what_is_not_a_schema(tmp_path):
    import pytest

    from specplug.bench.verify import load_schema
    from specplug.errors import SpecplugError

    good = tmp_path / "s.json"
    good.write_text('{"type": "object"}')
    assert load_schema(str(good)) == {"type": "object"}
    for text, why in (("{", "not JSON"), ("[1]", "JSON object"), ('{"type": "wizard"}', "not a valid JSON schema")):
        good.write_text(text)
        with pytest.raises(SpecplugError, match=why):
            load_schema(str(good))
