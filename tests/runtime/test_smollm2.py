"""The real model: SmolLM2-135M with n-gram and draft-model speculation (the packaged distilled drafter)
decodes exactly what transformers' greedy ``generate`` decodes, alone and batched with prompts of different
lengths; the drafter's drafts are mostly accepted."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

PROMPTS = [
    "def area(r):\n    return 3.14159 * r * r\n\n# Same function, with a docstring:\ndef area(r):\n",
    "The capital of France is",
]
N_NEW = 16


@pytest.fixture(scope="module")
def loaded(smollm2_folder, device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specplug.runtime import smollm2
    from specplug.runtime.models import draft_vocab
    from specplug.runtime.proposers import DraftModelProposer

    tok = AutoTokenizer.from_pretrained(str(smollm2_folder))
    target = AutoModelForCausalLM.from_pretrained(str(smollm2_folder), dtype=torch.float32).to(device).eval()
    draft = AutoModelForCausalLM.from_pretrained(str(smollm2.ensure_draft()), dtype=torch.float32).to(device).eval()
    vocab = draft_vocab(smollm2.DRAFT_NAME)  # as build_engine gives the packaged drafter
    draft = functools.partial(DraftModelProposer, draft, device, vocab=vocab)
    ids = [tok(p, add_special_tokens=False).input_ids for p in PROMPTS]
    ref = [
        target.generate(torch.tensor([i], device=device), max_new_tokens=N_NEW, do_sample=False)[0, len(i) :].tolist() for i in ids
    ]
    return tok, target, draft, ids, ref


def test_draft_shares_vocabulary_and_is_smaller(loaded):
    _, target, draft, _, _ = loaded
    model = draft.args[0]
    assert model.config.vocab_size == target.config.vocab_size
    assert model.config.num_hidden_layers < target.config.num_hidden_layers
    # It drafts from the 8192 tokens the target's text uses most (distill_drafter.py's ``vocab`` stage), the
    # end-of-turn token among them.
    vocab = draft.keywords["vocab"]
    assert len(set(vocab)) == len(vocab) == 8192 and max(vocab) < model.config.vocab_size
    assert target.generation_config.eos_token_id in vocab


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_greedy_identical_to_transformers(loaded, method):
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine
    from specplug.runtime.proposers import NgramProposer

    tok, target, draft, ids, ref = loaded
    factory = (lambda: NgramProposer(2, 4)) if method == "ngram" else draft
    eng = SpeculativeEngine(target, tok, factory, k=4)
    params = GenerationParams(max_new_tokens=N_NEW, ignore_eos=True)
    together = eng.generate(ids, params)
    assert [r.tokens for r in together] == ref
    alone = eng.generate([ids[0]], params)[0]
    assert alone.tokens == ref[0]
    if method == "draft_model":
        assert alone.stats.accepted > 0
    assert alone.text == tok.decode(ref[0], skip_special_tokens=True)


def test_stop_string(loaded):
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine
    from specplug.runtime.proposers import NgramProposer

    tok, target, _, ids, ref = loaded
    full = tok.decode(ref[0], skip_special_tokens=True)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    eng = SpeculativeEngine(target, tok, lambda: NgramProposer(2, 4), k=4)
    res = eng.generate([ids[0]], GenerationParams(max_new_tokens=N_NEW, stop=(stop,), ignore_eos=True))[0]
    assert res.finish_reason == "stop"
    assert res.text == full[: full.find(stop)]


def test_the_packaged_drafter_drafts_what_the_target_then_accepts(loaded):
    """The distilled drafter, with its draft vocabulary, is worth running on a request it was not trained on: its
    first draft is accepted on a third of the steps and a pass yields 1.5 tokens (k = 3). The untrained 14-layer
    cut it replaced: 0.11 and 1.10; the distilled one: 0.34 and 1.52."""
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine

    tok, target, draft, _, _ = loaded
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Write a Python function that checks whether a word is a palindrome."}],
        add_generation_prompt=True, tokenize=False,
    )
    ids = tok(prompt, add_special_tokens=False).input_ids
    eng = SpeculativeEngine(target, tok, draft, k=3, paced=False)
    stats = eng.generate([ids], GenerationParams(max_new_tokens=64, ignore_eos=True))[0].stats
    assert stats.accepted_per_position[0] >= 0.25 * stats.drafted_per_position[0], stats.as_dict()
    assert stats.mean_acceptance_length >= 1.3, stats.as_dict()


def test_a_damaged_drafter_weights_file_is_a_clear_error(smollm2_folder, tmp_path):
    from specplug.errors import SpecplugError
    from specplug.runtime import smollm2

    bad = tmp_path / "draft.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(SpecplugError, match="Cannot read the drafter's weights"):
        smollm2.ensure_draft(bad)
    with pytest.raises(SpecplugError, match="are missing"):
        smollm2.ensure_draft(tmp_path / "absent.safetensors")
    from safetensors.torch import save_file

    alien = tmp_path / "alien.safetensors"  # a real safetensors file, but of another model's shapes
    save_file({"model.layers.0.mlp.up_proj.weight": torch.zeros(8, 4, dtype=torch.int8),
               "model.layers.0.mlp.up_proj.weight.scale": torch.ones(8)}, str(alien))
    with pytest.raises(SpecplugError, match="does not fit the target"):
        smollm2.ensure_draft(alien)
