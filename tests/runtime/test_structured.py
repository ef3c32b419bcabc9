"""Structured output in the engine (specplug.runtime.structured) on the packaged SmolLM2: a JSON schema masks the
target at every verified position, so greedy output is valid JSON and token-identical with and without
speculation; logprobs come from the verify pass and equal plain decoding's."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}, "city": {"type": "string", "maxLength": 20}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
ASK = "Give me a JSON object describing a person named Alice who is 30 and lives in Paris."


@pytest.fixture(scope="module")
def engines(smollm2_folder, device):
    from specplug.runtime.engine import SpeculativeEngine
    from specplug.runtime.models import load_model
    from specplug.runtime.proposers import NgramProposer

    target, tok = load_model(str(smollm2_folder), device, torch.float32)
    plain = SpeculativeEngine(target, tok, None, device=device)
    ngram = SpeculativeEngine(target, tok, lambda: NgramProposer(1, 4), k=4, device=device)
    return plain, ngram, tok


def _prompt(tok, text: str = ASK) -> list[int]:
    chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    return tok(chat, add_special_tokens=False)["input_ids"]


def _run(engine, prompt: list[int], params) -> tuple[list[int], str | None, list]:
    batch = engine.start()
    rid = batch.add(prompt, params)
    logprobs: list = []
    for outs in batch:
        for o in outs:
            if o.request_id == rid and o.logprobs:
                logprobs.extend(o.logprobs)
    res = batch.result(rid)
    return res.tokens, res.finish_reason, logprobs


def _compiler(engine, tok):
    from specplug.runtime.structured import GrammarCompiler

    return GrammarCompiler(tok, sorted(engine.eos_token_ids))


def test_schema_greedy_is_valid_json_and_identical_with_ngram_speculation(engines):
    from specplug.runtime.engine import GenerationParams

    plain, ngram, tok = engines
    grammar = _compiler(plain, tok).compile("json_schema", SCHEMA)
    params = GenerationParams(max_new_tokens=80, grammar=grammar)
    prompt = _prompt(tok)
    base, reason, _ = _run(plain, prompt, params)
    spec, spec_reason, _ = _run(ngram, prompt, params)
    assert base == spec
    assert reason == spec_reason == "stop"  # the grammar completed: no EOS pass needed
    value = json.loads(tok.decode(base, skip_special_tokens=True))
    jsonschema.validate(value, SCHEMA)
    # The unconstrained answer is not this JSON: the mask did the work.
    free, _, _ = _run(plain, prompt, GenerationParams(max_new_tokens=len(base)))
    assert free != base


def test_json_object_and_a_forbidden_draft_is_rejected(engines):
    from specplug.runtime.engine import GenerationParams

    plain, ngram, tok = engines
    grammar = _compiler(plain, tok).compile("json_schema", {"type": "object"})
    # A prompt full of text the n-gram drafter copies, most of which the grammar forbids at the output's start.
    prompt = _prompt(tok, "Repeat: the cat sat on the mat. the cat sat on the mat. Answer as a JSON object.")
    params = GenerationParams(max_new_tokens=48, grammar=grammar)
    base, _, _ = _run(plain, prompt, params)
    spec, _, _ = _run(ngram, prompt, params)
    assert base == spec
    assert tok.decode(base, skip_special_tokens=True).lstrip().startswith("{")


def test_logprobs_equal_with_and_without_speculation(engines):
    from specplug.runtime.engine import GenerationParams

    plain, ngram, tok = engines
    prompt = tok("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n")["input_ids"]
    params = GenerationParams(max_new_tokens=24, logprobs=3)
    base, _, base_lp = _run(plain, prompt, params)
    spec, _, spec_lp = _run(ngram, prompt, params)
    assert base == spec and len(base_lp) == len(base) == len(spec_lp)
    assert ngram.spec_steps["on"] > 0  # speculation did run, so the logprobs came from verify passes
    for b, s, t in zip(base_lp, spec_lp, base, strict=True):
        assert b.token == s.token == t
        assert abs(b.logprob - s.logprob) < 1e-4
        assert [i for i, _ in b.top] == [i for i, _ in s.top] and len(b.top) == 3
        assert all(abs(x - y) < 1e-4 for (_, x), (_, y) in zip(b.top, s.top, strict=True))
        assert b.top[0][0] == t  # greedy takes the likeliest
        assert b.logprob <= 0


def test_draft_model_drafts_only_what_the_grammar_allows(smollm2_folder, device):
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine
    from specplug.runtime.models import load_model
    from specplug.runtime.proposers import DraftModelProposer

    target, tok = load_model(str(smollm2_folder), device, torch.float32)
    # The target drafting for itself: every draft it proposes under the mask is what it would then emit.
    engine = SpeculativeEngine(target, tok, lambda: DraftModelProposer(target, device), k=3, device=device)
    plain = SpeculativeEngine(target, tok, None, device=device)
    grammar = _compiler(plain, tok).compile("json_schema", SCHEMA)
    params = GenerationParams(max_new_tokens=80, grammar=grammar)
    base, _, _ = _run(plain, _prompt(tok), params)
    batch = engine.start()
    rid = batch.add(_prompt(tok), params)
    for _ in batch:
        pass
    res = batch.result(rid)
    assert res.tokens == base
    assert res.stats.drafted and res.stats.accepted == res.stats.drafted


def test_bad_grammars_are_grammar_errors(engines):
    from specplug.runtime.structured import GrammarError

    plain, _, tok = engines
    compiler = _compiler(plain, tok)
    for fmt, spec in (("json_schema", {"type": "wizard"}), ("regex", "(unclosed"), ("choice", []), ("grammar", "start: ???")):
        with pytest.raises(GrammarError):
            compiler.compile(fmt, spec)
    assert compiler.compile("choice", ["yes", "no"]).grammar


def test_constrained_and_free_rows_share_a_batch(engines):
    """A grammar masks only its own row: each request in a mixed batch gives what it gives alone."""
    from specplug.runtime.engine import GenerationParams

    plain, ngram, tok = engines
    grammar = _compiler(plain, tok).compile("json_schema", SCHEMA)
    prompts = [_prompt(tok), _prompt(tok, "Name three colours.")]
    params = [GenerationParams(max_new_tokens=60, grammar=grammar), GenerationParams(max_new_tokens=24)]
    alone = [_run(plain, p, q)[0] for p, q in zip(prompts, params, strict=True)]
    together = ngram.generate(prompts, params)
    assert [r.tokens for r in together] == alone


def test_sampling_under_a_grammar_stays_valid(engines):
    from specplug.runtime.engine import GenerationParams
    from specplug.runtime.sampling import SamplingParams

    plain, ngram, tok = engines
    grammar = _compiler(plain, tok).compile("json_schema", SCHEMA)
    for engine in (plain, ngram):
        for seed in (1, 2):
            params = GenerationParams(max_new_tokens=80, grammar=grammar, sampling=SamplingParams(0.8, top_p=0.95, seed=seed))
            tokens, reason, _ = _run(engine, _prompt(tok), params)
            if reason == "stop":
                jsonschema.validate(json.loads(tok.decode(tokens, skip_special_tokens=True)), SCHEMA)
            else:  # cut at max_tokens: still a prefix the grammar allows
                assert tok.decode(tokens, skip_special_tokens=True).lstrip().startswith("{")
