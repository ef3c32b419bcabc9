"""The decode loop on tiny random models: greedy output is token-identical to the target's own greedy decoding
(and to transformers ``generate``) for every proposer, batch 1 and batch > 1; streaming, cancellation, joining
mid-flight; stop conditions; and an end-to-end sampling check against exact sequence probabilities."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
stats = pytest.importorskip("scipy.stats")

from specplug.runtime.engine import GenerationParams, SpeculativeEngine  # noqa: E402
from specplug.runtime.proposers import DraftModelProposer, NgramProposer  # noqa: E402
from specplug.runtime.sampling import RowWarper, SamplingParams, warp_probs  # noqa: E402
from specplug.runtime.tiny import layer_subset, tiny_llama  # noqa: E402

PROMPTS = [
    [5, 6, 7, 8, 5, 6, 7, 9, 5, 6],
    [10, 11, 12, 13, 14, 10, 11, 12, 13, 14, 10, 11],
    [3],
    [20, 21, 22, 20, 21, 40, 41, 42, 43, 44, 45, 46, 47, 20, 21, 22],
]
N_NEW = 40


@pytest.fixture(scope="module")
def target(device):
    return tiny_llama(layers=3, seed=0).to(device)


@pytest.fixture(scope="module")
def reference(target):
    out = []
    for p in PROMPTS:
        ids = target.generate(torch.tensor([p], device=target.device), max_new_tokens=N_NEW, do_sample=False, eos_token_id=None, pad_token_id=1)
        out.append(ids[0, len(p) :].tolist())
    return out


def _own_greedy(model, prompt: list[int], n: int) -> list[int]:
    """The target's plain greedy decoding without any cache: one full forward per token."""
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq], device=model.device)).logits[0, -1].argmax()))
    return seq[len(prompt) :]


def _proposers(target):
    dev = target.device
    other = tiny_llama(layers=1, seed=5).to(dev)  # unrelated drafter: almost everything rejected
    return {
        "none": None,
        "ngram": lambda: NgramProposer(1, 3),
        "ngram2-4": lambda: NgramProposer(2, 4),
        "draft-self": lambda: DraftModelProposer(target, dev),  # everything accepted
        "draft-subset": lambda: DraftModelProposer(layer_subset(target, (0, 2)), dev),
        "draft-unrelated": lambda: DraftModelProposer(other, dev),
        # Drafts only from every other token id: the rest of the target's choices are never drafted.
        "draft-vocab": lambda: DraftModelProposer(target, dev, vocab=list(range(0, target.config.vocab_size, 2))),
    }


def test_reference_is_own_greedy(target, reference):
    assert _own_greedy(target, PROMPTS[0], 12) == reference[0][:12]


@pytest.mark.parametrize(
    "name", ["none", "ngram", "ngram2-4", "draft-self", "draft-subset", "draft-unrelated", "draft-vocab"]
)
@pytest.mark.parametrize("k,adaptive,paced", [(1, False, False), (4, True, False), (5, False, True)])
def test_greedy_identical_batch_1_and_4(target, reference, name, k, adaptive, paced):
    factory = _proposers(target)[name]
    eng = SpeculativeEngine(target, proposer_factory=factory, k=k, adaptive=adaptive, eos_token_ids=[], paced=paced)
    params = GenerationParams(max_new_tokens=N_NEW)
    alone = [eng.generate([p], params)[0] for p in PROMPTS]
    together = eng.generate(PROMPTS, params)
    for got_alone, got_together, want in zip(alone, together, reference, strict=True):
        assert got_alone.tokens == want
        assert got_together.tokens == want
        st = got_together.stats
        assert st.new_tokens == N_NEW
        assert st.target_passes * 1 <= N_NEW
        assert st.accepted == N_NEW - st.target_passes
    if name == "draft-self":
        assert all(r.stats.accepted == r.stats.drafted for r in together)
        assert paced or all(r.stats.drafted > 0 for r in together)  # pacing may find a self-draft too dear
    if name == "draft-vocab" and not paced:
        # The target drafting for itself from the even ids only: kept where its choice is even, refused elsewhere.
        assert 0 < sum(r.stats.accepted for r in together) < sum(r.stats.drafted for r in together)
    if name == "ngram" and not paced:  # (pacing may judge this random model's matches not worth a wider pass)
        assert sum(r.stats.accepted for r in together) > 0  # the repetitive prompts do get drafts accepted


def test_a_draft_vocabulary_drafts_only_its_tokens_with_q_zero_elsewhere(target):
    # Sampled drafts over a third of the ids: every drafted token is one of them, q sums to one over them and is
    # zero on the rest, and the lean decoder (which multiplies only their head rows) proposes what the
    # transformers forward (whose logits the proposer cuts) does.
    dev = target.device
    size = target.config.vocab_size
    vocab = list(range(1, size, 3))
    outside = torch.ones(size, dtype=torch.bool, device=dev)
    outside[vocab] = False
    warp = RowWarper([SamplingParams(temperature=1.0)] * 2, dev)
    drafts = []
    for lean in (True, False):
        prop = DraftModelProposer(target, dev, min_confidence=0.0, lean=lean, vocab=vocab)
        prop.start([PROMPTS[0], PROMPTS[1]])
        draft = prop.propose([PROMPTS[0], PROMPTS[1]], [3, 3], warp, torch.Generator(device=dev).manual_seed(0))
        assert set(draft.tokens.flatten().tolist()) <= set(vocab)
        assert draft.probs.shape == (2, 3, size)
        torch.testing.assert_close(draft.probs.sum(-1), torch.ones(2, 3, device=dev))
        assert not draft.probs[..., outside].any()
        drafts.append(draft)
    assert torch.equal(drafts[0].tokens, drafts[1].tokens)
    torch.testing.assert_close(drafts[0].probs, drafts[1].probs, rtol=1e-4, atol=1e-6)
    for bad in ([], [0, 0], [size]):
        with pytest.raises(ValueError, match="distinct token ids"):
            DraftModelProposer(target, dev, vocab=bad)


def test_step_stream_cancel_and_join(target, reference):
    eng = SpeculativeEngine(target, proposer_factory=lambda: DraftModelProposer(layer_subset(target, (0,)), target.device), k=3,
                            eos_token_ids=[])
    batch = eng.start()
    params = GenerationParams(max_new_tokens=N_NEW)
    a = batch.add(PROMPTS[0], params)
    b = batch.add(PROMPTS[1], params)
    streamed: dict[int, list[int]] = {a: [], b: []}
    for out in batch.step() + batch.step():
        streamed[out.request_id].extend(out.new_tokens)
    batch.cancel(b)
    c = batch.add(PROMPTS[3], params)  # joins while a is mid-way, with a longer prompt
    streamed[c] = []
    finished = {}
    for outs in batch:
        for out in outs:
            streamed[out.request_id].extend(out.new_tokens)
            if out.finished:
                finished[out.request_id] = out.finish_reason
    assert finished == {b: "cancelled", a: "length", c: "length"}
    assert streamed[a] == reference[0] == batch.result(a).tokens
    assert streamed[c] == reference[3]
    assert reference[1][: len(streamed[b])] == streamed[b] and len(streamed[b]) < N_NEW


def test_a_lone_request_runs_without_a_mask_until_another_joins(target, reference):
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=2, eos_token_ids=[])
    batch = eng.start()
    params = GenerationParams(max_new_tokens=N_NEW)
    a = batch.add(PROMPTS[0], params)
    batch.step()
    batch.step()
    assert not batch.kv.holes  # the plain causal path: no mask is built or applied
    c = batch.add(PROMPTS[3], params)  # a longer prompt: the first row gets left padding
    batch.step()
    assert batch.kv.holes
    for _ in batch:
        pass
    assert batch.result(a).tokens == reference[0] and batch.result(c).tokens == reference[3]


def test_released_results_are_not_kept(target, reference):
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=2, eos_token_ids=[])
    batch = eng.start()
    params = GenerationParams(max_new_tokens=8)
    a, b = batch.add(PROMPTS[0], params), batch.add(PROMPTS[1], params)
    batch.release(a)  # before it finishes: dropped when it does
    for _ in batch:
        pass
    with pytest.raises(KeyError):
        batch.result(a)
    assert batch.result(b).tokens == reference[1][:8]
    batch.release(b)  # after: dropped at once
    with pytest.raises(KeyError):
        batch.result(b)


def test_eos_and_max_tokens(target, reference):
    eos = reference[0][7]
    eng = SpeculativeEngine(target, proposer_factory=lambda: DraftModelProposer(target, target.device), k=4, eos_token_ids=[eos])
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=N_NEW))[0]
    assert res.finish_reason == "stop"
    assert res.tokens == reference[0][: reference[0].index(eos)]
    # The EOS is not in the text, but a pass made it: plain decoding yields exactly one token per pass.
    plain = SpeculativeEngine(target, eos_token_ids=[eos]).generate([PROMPTS[0]], GenerationParams())[0]
    assert plain.stats.eos_tokens == 1 and plain.stats.mean_acceptance_length == 1.0
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=N_NEW, ignore_eos=True))[0]
    assert res.stats.eos_tokens == 0
    assert res.tokens == reference[0]
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=3, ignore_eos=True))[0]
    assert (res.tokens, res.finish_reason) == (reference[0][:3], "length")


class _Letters:
    """A tokenizer for the tiny models: token i is one character."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(0x100 + i) for i in ids)


def test_a_stop_string_ends_the_streamed_tokens_with_the_one_that_completed_it(target, reference):
    # The drafter is the target itself, so each step accepts 4 drafts and can run past the stop string.
    text = _Letters().decode(reference[0])
    stop = text[11:13]
    end = text.find(stop) + len(stop)  # the tokens up to the one that completes the stop string
    assert (end - 1) % 5, "the stop string should complete inside a step (prefill 1 token, then 5 a step)"
    eng = SpeculativeEngine(target, _Letters(), lambda: DraftModelProposer(target, target.device), k=4, eos_token_ids=[])
    batch = eng.start()
    rid = batch.add(PROMPTS[0], GenerationParams(max_new_tokens=N_NEW, stop=(stop,)))
    streamed, sent = [], ""
    for outs in batch:
        for o in outs:
            streamed += o.new_tokens
            sent += o.text_delta
    res = batch.result(rid)
    assert res.finish_reason == "stop"
    assert streamed == res.tokens == reference[0][:end]
    assert sent == res.text == text[: end - len(stop)]
    assert res.stats.new_tokens == end


def test_ngram_lookup_prefers_longest_latest_match():
    prop = NgramProposer(1, 3)
    prop.start([[0]])
    hist = [1, 2, 3, 9, 1, 2, 3, 4, 5, 7, 3]
    # "3" last occurred followed by 4, 5, 7 (latest match wins).
    assert prop.match(0, hist, 3) == (1, [4, 5, 7])
    hist = hist + [1, 2]
    # The longest match "3 1 2"... is absent; "1 2" -> latest is position 4 -> continues 3, 4.
    assert prop.match(0, hist, 2) == (2, [3, 4])


def test_ngram_keeps_copying_the_passage_it_copies():
    prop = NgramProposer(1, 2)
    passage, other = [1, 2, 3, 4, 5, 6, 7], [8, 4, 5, 9]
    hist = [*passage, *other, 0, 1, 2]
    prop.start([hist])
    assert prop.propose([hist], [2], None, None).tokens.tolist() == [[3, 4]]
    # Both drafts kept and the target's next token (5) continues the passage: the next draft follows it, though
    # the latest occurrence of "4 5" is in the other passage.
    hist += [3, 4, 5]
    assert prop.match(0, hist, 2) == (2, [9, 0])
    draft = prop.propose([hist], [2], None, None)
    assert (draft.tokens.tolist(), draft.match) == ([[6, 7]], [2])
    # The text leaves the passage (1 where it has 7): back to the latest match.
    hist += [6, 1]
    assert prop.propose([hist], [2], None, None).tokens.tolist() == [prop.match(0, hist, 2)[1]] == [[2, 3]]


def test_ngram_drafts_report_how_long_a_match_found_them():
    prop = NgramProposer(1, 3)
    hists = [[1, 2, 3, 4, 1, 2, 3], [7, 8, 9], [5, 6, 5]]
    prop.start(hists)
    draft = prop.propose(hists, [2, 2, 2], None, None)
    assert draft.match == [3, 0, 1]  # "1 2 3" -> 4, 1; nothing; "5" -> 6, 5
    assert draft.n.tolist() == [2, 0, 2]


def test_drafter_runs_only_when_asked_to_draft(target, reference):
    """A fresh batch's prompts reach the drafter with its first proposal, so a drafter the pacer keeps at width 0
    costs nothing; when drafting starts, the catch-up gives the same drafts an eager prefill would."""
    prop = DraftModelProposer(target, target.device, min_confidence=0.0)  # the target itself drafts its greedy tokens
    prompts = [PROMPTS[0], PROMPTS[1]]
    prop.start(prompts)
    hist = [list(p) for p in prompts]
    for step in range(3):  # width 0: nothing drafted, nothing fed
        draft = prop.propose(hist, [0, 0], lambda logits: None, None)
        assert draft.tokens.shape[1] == 0 and prop.kv.length == 0
        nxt = torch.tensor([reference[0][step], reference[1][step]], device=target.device)
        prop.commit(torch.zeros(2, dtype=torch.long, device=target.device), nxt)
        hist = [h + [int(t)] for h, t in zip(hist, nxt, strict=True)]
    draft = prop.propose(hist, [3, 3], lambda logits: None, None)
    assert draft.tokens.tolist() == [reference[0][3:6], reference[1][3:6]]
    assert draft.backlog  # the catch-up's time is not what drafting costs: pacing leaves it out
    nxt = torch.tensor([reference[0][6], reference[1][6]], device=target.device)
    with torch.inference_mode():  # as the engine's step runs
        prop.commit(torch.tensor([3, 3], device=target.device), nxt)
    hist = [h + r[3:7] for h, r in zip(hist, reference, strict=False)]
    draft = prop.propose(hist, [2, 2], lambda logits: None, None)
    assert draft.tokens.tolist() == [reference[0][7:9], reference[1][7:9]] and not draft.backlog


def test_a_drafter_idle_for_long_reads_only_the_latest_tokens_to_catch_up(target, reference, monkeypatch):
    """A drafter's backlog grows with every step it sits idle; past CATCH_UP_MAX it restarts from the latest
    tokens, so a probe after a long wait costs no more than one after a short one."""
    from specplug.runtime import proposers

    monkeypatch.setattr(proposers, "CATCH_UP_MAX", 6)
    prop = DraftModelProposer(target, target.device, min_confidence=0.0)
    prop.start([PROMPTS[0]])
    hist = [list(PROMPTS[0])]
    prop.propose(hist, [1], lambda logits: None, None)  # reads the prompt whole
    with torch.inference_mode():
        prop.commit(torch.tensor([1]), torch.tensor([reference[0][1]]))
    hist[0] += reference[0][:2]
    for step in range(2, 12):  # idle: 10 tokens pile up, past CATCH_UP_MAX
        prop.propose(hist, [0], lambda logits: None, None)
        prop.commit(torch.zeros(1, dtype=torch.long), torch.tensor([reference[0][step]]))
        hist[0].append(reference[0][step])
    draft = prop.propose(hist, [3], lambda logits: None, None)
    assert prop.kv.length == 6 + 2  # the latest 6 tokens, then 2 of the 3 drafts fed
    assert draft.backlog
    assert draft.tokens[0].tolist() == _own_greedy(target, hist[0][-6:], 3)


def test_drafter_stops_after_its_first_unconfident_token_and_keeps_it(target, reference):
    """As transformers' assistant_confidence_threshold: the token where the drafter's confidence fell is still
    verified (a column of a pass that runs anyway), and nothing is drafted after it."""
    prop = DraftModelProposer(target, target.device, min_confidence=1.01)  # no token is ever confident enough
    prop.start([PROMPTS[0], PROMPTS[1]])
    draft = prop.propose([list(PROMPTS[0]), list(PROMPTS[1])], [3, 3], lambda logits: None, None)
    assert draft.n.tolist() == [1, 1]
    assert draft.tokens[:, 0].tolist() == [reference[0][0], reference[1][0]]  # the target drafts its own greedy


@pytest.mark.parametrize("name", ["ngram", "draft-subset"])
def test_a_seeded_request_reproduces_on_a_paced_engine(target, name):
    """A step draws random numbers per column it verifies, and a paced width follows measured timings and what the
    engine learnt from earlier requests: a seeded request must still give the same tokens every time."""
    prompt = [2, 3, 4, 5] * 6
    params = GenerationParams(max_new_tokens=40, ignore_eos=True, sampling=SamplingParams(temperature=0.8, seed=7))
    eng = SpeculativeEngine(target, proposer_factory=_proposers(target)[name], k=4, paced=True)
    outs = []
    for costs in ({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}, {1: 1.0, 2: 5.0, 3: 5.0, 4: 5.0, 5: 5.0}, {}):
        for tokens, secs in costs.items():  # pass costs that make a paced width differ from one run to the next
            eng.pacer.observe_pass(tokens, secs)
            eng.pacer.observe_pass(tokens, secs)
        outs.append(eng.generate([prompt], params)[0].tokens)
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("name", ["none", "ngram", "draft-subset"])
def test_a_seeded_request_gives_the_same_text_alone_and_batched(target, name):
    """Each request draws from its own generator: a seeded sampled request is the same beside others (two copies
    of it, an unseeded sampled one and a greedy one, joining together and mid-flight) as alone."""
    seeded = GenerationParams(max_new_tokens=30, ignore_eos=True, sampling=SamplingParams(temperature=1.0, seed=11))
    other = GenerationParams(max_new_tokens=45, ignore_eos=True, sampling=SamplingParams(temperature=0.7, top_k=20))
    greedy = GenerationParams(max_new_tokens=12, ignore_eos=True)
    eng = SpeculativeEngine(target, proposer_factory=_proposers(target)[name], k=3)
    alone = eng.generate([PROMPTS[0]], seeded)[0].tokens
    batch = eng.start()
    first = [batch.add(PROMPTS[1], other), batch.add(PROMPTS[0], seeded), batch.add(PROMPTS[3], greedy)]
    batch.step()
    batch.step()
    late = batch.add(PROMPTS[0], seeded)  # joins a batch already decoding
    for _ in batch:
        pass
    assert batch.result(first[1]).tokens == alone
    assert batch.result(late).tokens == alone
    reseeded = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=30, ignore_eos=True,
                                                           sampling=SamplingParams(temperature=1.0, seed=12)))
    assert reseeded[0].tokens != alone  # the seed is what repeats it


def test_calibration_times_this_machine_and_speculation_turns_off_where_it_would_not_pay(target, reference):
    """``calibrate`` fills the pacer's cost table with this device's pass costs; with passes made to cost far more
    per drafted column than acceptance could repay, the paced engine drafts nothing, counts why, and stays
    lossless; with the measured costs of a tiny model (flat across widths) it drafts."""
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=4, paced=True)
    costs = eng.calibrate(max_batch=4)
    assert {1, 5, 4, 20} <= set(costs) and all(c > 0 for c in costs.values())
    assert not {32, 64} & set(costs)  # no batch past the largest asked for
    params = GenerationParams(max_new_tokens=N_NEW)
    for tokens in range(1, 41):  # every pass that drafts costs 50 times a plain one: drafting cannot pay
        eng.pacer.cost[tokens] = 1.0 if tokens <= 4 else 50.0
        eng.pacer.timed_at[tokens] = 10**9  # recently timed: no re-measuring in this test
    assert eng.pacer.shaped, "a packing target's costs are kept by rows as well"
    for rows, table in eng.pacer.shaped.items():  # and so priced by rows
        for tokens in range(rows, 41):
            table[tokens] = 1.0 if tokens == rows else 50.0
    got = eng.generate(PROMPTS, params)
    assert [r.tokens for r in got] == reference
    assert eng.spec_steps["on"] == 0 and eng.spec_steps["not_paying"] > 0
    assert sum(r.stats.drafted for r in got) == 0
    # On a tiny model a pass costs about the same at any width (overhead dominates): calibrated, drafting pays.
    cheap = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=4, paced=True)
    cheap.calibrate(max_batch=4)
    got = cheap.generate(PROMPTS, params)
    assert [r.tokens for r in got] == reference
    assert cheap.spec_steps["on"] > 0 and sum(r.stats.drafted for r in got) > 0
    assert SpeculativeEngine(target).calibrate(4) == {}  # nothing to pace without a proposer


def test_sampling_end_to_end_matches_exact_sequence_probabilities(device):
    """Three sampled tokens from a tiny model (the first from the prefill, the next two speculated): the joint
    distribution equals the model's exact one, with a draft model (scoring all tokens, and a subset) and with
    n-gram drafts. Chi-square over the
    vocab^3 cells (sparse cells pooled), alpha = 1e-3, fixed seeds."""
    vocab = 5
    model = tiny_llama(vocab_size=vocab, hidden_size=32, layers=2, seed=1, init_std=0.5).to(device)
    draft = tiny_llama(vocab_size=vocab, hidden_size=32, layers=1, seed=2, init_std=0.5).to(device)
    prompt = [2, 3, 4, 2, 3]
    sp = SamplingParams(temperature=0.9, top_k=4, seed=11)
    with torch.inference_mode():
        p1 = warp_probs(model(torch.tensor([prompt], device=device)).logits[0, -1], sp)
        p2 = warp_probs(model(torch.tensor([prompt + [a] for a in range(vocab)], device=device)).logits[:, -1], sp)
        pairs = [(a, b) for a in range(vocab) for b in range(vocab)]
        p3 = warp_probs(model(torch.tensor([prompt + [a, b] for a, b in pairs], device=device)).logits[:, -1], sp)
    exact = (p1.view(-1, 1, 1) * p2.view(vocab, vocab, 1) * p3.view(vocab, vocab, vocab)).flatten().double().cpu()
    n = 8000
    factories = (
        lambda: DraftModelProposer(draft, device),
        lambda: DraftModelProposer(draft, device, vocab=[3, 0, 2]),  # q is zero on tokens 1 and 4
        lambda: NgramProposer(1, 2),
    )
    for factory in factories:
        eng = SpeculativeEngine(model, proposer_factory=factory, k=2, eos_token_ids=[])
        # One seed per request: each request draws from its own generator, so equal seeds repeat a sequence.
        seeds = [GenerationParams(max_new_tokens=3, sampling=replace(sp, seed=sp.seed + i)) for i in range(n)]
        res = eng.generate([prompt] * n, seeds)
        cells = torch.tensor([(r.tokens[0] * vocab + r.tokens[1]) * vocab + r.tokens[2] for r in res])
        counts = torch.bincount(cells, minlength=vocab**3).double()
        assert counts[exact == 0].sum() == 0
        keep = exact * n >= 5
        obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
        exp = torch.cat([exact[keep], exact[~keep].sum().view(1)]) * n
        exp = exp / exp.sum() * obs.sum()
        assert stats.chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3
        assert sum(r.stats.accepted for r in res) > 0


def test_rejects_bad_parameters(target):
    from specplug.errors import SpecplugError

    with pytest.raises(SpecplugError):
        SamplingParams(temperature=-1)
    with pytest.raises(SpecplugError):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError):
        SpeculativeEngine(target, k=0)
    with pytest.raises(ValueError):
        SpeculativeEngine(target).start().add([], GenerationParams())


@pytest.mark.parametrize("name", ["ngram", "draft-self", "draft-unrelated"])
def test_min_tokens_holds_back_eos_and_stop_tokens_and_speculation_decodes_as_plain_does(target, reference, name):
    # EOS is the 8th greedy token: with min_tokens 12 the target must choose something else there (its logits are
    # masked), in plain decoding and in verification alike, so every proposer gives plain decoding's tokens.
    eos = reference[0][7]
    first = reference[0].index(eos)
    stop_tok = next(t for t in reference[0][first + 1 :] if t != eos)
    params = GenerationParams(max_new_tokens=N_NEW, min_tokens=12, stop_token_ids=(stop_tok,))
    plain = SpeculativeEngine(target, eos_token_ids=[eos]).generate([PROMPTS[0]], params)[0]
    assert plain.tokens[:first] == reference[0][:first]
    assert plain.tokens[first] != eos
    held = plain.tokens[:12]
    assert eos not in held and stop_tok not in held
    if plain.finish_reason == "stop" and plain.tokens and plain.tokens[-1] == stop_tok:
        assert len(plain.tokens) > 12  # the stop token ended it only once min_tokens were out
    else:
        assert len(plain.tokens) >= 12
    eng = SpeculativeEngine(target, proposer_factory=_proposers(target)[name], k=4, eos_token_ids=[eos])
    alone = eng.generate([PROMPTS[0]], params)[0]
    together = eng.generate(PROMPTS, [params] + [GenerationParams(max_new_tokens=N_NEW)] * 3)[0]
    assert alone.tokens == together.tokens == plain.tokens
    assert alone.finish_reason == together.finish_reason == plain.finish_reason
    if name == "draft-self":
        assert alone.stats.accepted > 0


def test_a_stop_token_ends_the_output_counted_but_not_in_the_text(target, reference):
    # The 6th greedy token is a stop token: the output ends with it (vLLM counts it), the text does not show it,
    # and EOS handling (ignore_eos) does not turn it off.
    tok = reference[0][5]
    end = reference[0].index(tok) + 1
    eng = SpeculativeEngine(target, _Letters(), lambda: DraftModelProposer(target, target.device), k=4, eos_token_ids=[])
    for ignore_eos in (False, True):
        batch = eng.start()
        rid = batch.add(PROMPTS[0], GenerationParams(max_new_tokens=N_NEW, stop_token_ids=(tok,), ignore_eos=ignore_eos))
        streamed, sent, last = [], "", None
        for outs in batch:
            for o in outs:
                streamed += o.new_tokens
                sent += o.text_delta
                last = o
        res = batch.result(rid)
        assert (res.finish_reason, last.stop_token_id) == ("stop", tok)
        assert streamed == res.tokens == reference[0][:end]
        assert res.stats.new_tokens == end and res.stats.eos_tokens == 0
        assert sent == res.text == _Letters().decode(reference[0][: end - 1])
    # A stop token past max_new_tokens: "length", no stop token reported.
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=end - 1, stop_token_ids=(tok,)))[0]
    assert (res.finish_reason, res.tokens) == ("length", reference[0][: end - 1])


def test_stop_strings_count_only_past_min_tokens(target, reference):
    text = _Letters().decode(reference[0])
    stop = text[2:4]
    assert text.find(stop) == 2
    later = text.find(stop, 8)  # the next occurrence ending past the 8th token's text, or none
    eng = SpeculativeEngine(target, _Letters(), lambda: NgramProposer(1, 3), k=4, eos_token_ids=[])
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=N_NEW, stop=(stop,), min_tokens=8))[0]
    if later < 0:
        assert (res.finish_reason, res.tokens) == ("length", reference[0])
    else:
        assert res.finish_reason == "stop" and res.text == text[:later]
    # Without min_tokens the first occurrence ends it.
    res = eng.generate([PROMPTS[0]], GenerationParams(max_new_tokens=N_NEW, stop=(stop,)))[0]
    assert res.text == text[:2]


def test_min_tokens_sampling_matches_exact_masked_probabilities(device):
    """As the end-to-end sampling check above, with min_tokens 2 and stop token 1: the first two tokens are
    drawn from the distribution with token 1's logit at -inf (then warped), the third from the plain one, and
    drafts that propose token 1 early (the n-gram, whose prompt makes it draft 1 next) are rejected exactly."""
    vocab = 5
    model = tiny_llama(vocab_size=vocab, hidden_size=32, layers=2, seed=1, init_std=0.5).to(device)
    draft = tiny_llama(vocab_size=vocab, hidden_size=32, layers=1, seed=2, init_std=0.5).to(device)
    prompt = [2, 1, 2, 1, 2]
    sp = SamplingParams(temperature=0.9, top_k=4, seed=12)

    def masked(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[..., 1] = float("-inf")
        return logits

    with torch.inference_mode():
        p1 = warp_probs(masked(model(torch.tensor([prompt], device=device)).logits[0, -1]), sp)
        p2 = warp_probs(masked(model(torch.tensor([prompt + [a] for a in range(vocab)], device=device)).logits[:, -1]), sp)
        pairs = [(a, b) for a in range(vocab) for b in range(vocab)]
        p3 = warp_probs(model(torch.tensor([prompt + [a, b] for a, b in pairs], device=device)).logits[:, -1], sp)
    exact = (p1.view(-1, 1, 1) * p2.view(vocab, vocab, 1) * p3.view(vocab, vocab, vocab)).flatten().double().cpu()
    assert exact.view(vocab, vocab, vocab)[1].sum() == 0 and exact.view(vocab, vocab, vocab)[:, 1].sum() == 0
    n = 6000
    params = GenerationParams(max_new_tokens=3, sampling=sp, min_tokens=2, stop_token_ids=(1,))
    for factory in (lambda: DraftModelProposer(draft, device), lambda: NgramProposer(1, 2)):
        eng = SpeculativeEngine(model, proposer_factory=factory, k=2, eos_token_ids=[])
        res = eng.generate([prompt] * n, [replace(params, sampling=replace(sp, seed=sp.seed + i)) for i in range(n)])
        assert all(len(r.tokens) == 3 for r in res)  # token 1 is allowed third, and then ends it as the third
        cells = torch.tensor([(r.tokens[0] * vocab + r.tokens[1]) * vocab + r.tokens[2] for r in res])
        counts = torch.bincount(cells, minlength=vocab**3).double()
        assert counts[exact == 0].sum() == 0
        keep = exact * n >= 5
        obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
        exp = torch.cat([exact[keep], exact[~keep].sum().view(1)]) * n
        exp = exp / exp.sum() * obs.sum()
        assert stats.chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3
        assert sum(r.stats.drafted for r in res) > sum(r.stats.accepted for r in res) > 0


@pytest.mark.parametrize("name", ["none", "ngram", "draft-subset", "draft-unrelated"])
@pytest.mark.parametrize("chunk", [512, 3])
def test_a_joining_prompt_rides_in_the_running_batchs_passes_and_changes_no_token(target, reference, name, chunk):
    eng = SpeculativeEngine(target, proposer_factory=_proposers(target)[name], k=3, eos_token_ids=[], paced=True,
                            prefill_chunk=chunk)
    batch = eng.start()
    params = GenerationParams(max_new_tokens=N_NEW)
    a = batch.add(PROMPTS[0], params)
    batch.step()
    c = batch.add(PROMPTS[3], params)  # 16 tokens: with chunk 3 it joins over six steps
    joining_steps = 0
    while True:
        outs = {o.request_id: o for o in batch.step()}
        joining_steps += 1
        assert outs[a].new_tokens  # the running request advances on every step its neighbour joins in
        if c in outs:
            assert len(outs[c].new_tokens) == 1  # the first token, from the pass that fed the prompt's end
            break
    assert joining_steps == -(-len(PROMPTS[3]) // min(chunk, len(PROMPTS[3])))
    for _ in batch:
        pass
    assert batch.result(a).tokens == reference[0] and batch.result(c).tokens == reference[3]


def _one_running(target, chunk: int):
    """A batch (n-gram, k=3) whose first request has run one step, with prompt chunks of ``chunk`` tokens."""
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=3, eos_token_ids=[],
                            prefill_chunk=chunk)
    batch = eng.start()
    a = batch.add(PROMPTS[0], GenerationParams(max_new_tokens=N_NEW))
    batch.step()
    return batch, a


def test_without_mixing_a_joining_prompt_is_a_pass_the_running_rows_wait_for(target, reference):
    batch, a = _one_running(target, 0)
    c = batch.add(PROMPTS[3], GenerationParams(max_new_tokens=N_NEW))
    assert [o.request_id for o in batch.step()] == [c]
    for _ in batch:
        pass
    assert batch.result(a).tokens == reference[0] and batch.result(c).tokens == reference[3]


def test_a_request_cancelled_while_its_prompt_joins_leaves_and_the_others_decode_on(target, reference):
    batch, a = _one_running(target, 4)
    params = GenerationParams(max_new_tokens=N_NEW)
    c = batch.add(PROMPTS[3], params)
    d = batch.add(PROMPTS[1], params)  # waits for c's chunks, then joins behind it
    batch.step()
    assert c in batch.pending and d in batch.pending
    batch.cancel(c)
    finished = {}
    for outs in batch:
        finished.update({o.request_id: o.finish_reason for o in outs if o.finished})
    assert finished == {c: "cancelled", a: "length", d: "length"}
    assert batch.result(a).tokens == reference[0] and batch.result(d).tokens == reference[1]
    assert batch.result(c).tokens == []


def test_a_prompt_joining_mid_flight_reuses_a_cached_prefix(target, reference):
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=3, eos_token_ids=[],
                            prefix_cache_bytes=1 << 24)
    long = PROMPTS[3] * 3  # 48 tokens: whole cache blocks to share
    solo = eng.generate([long], GenerationParams(max_new_tokens=8))[0].tokens
    batch = eng.start()
    a = batch.add(PROMPTS[0], GenerationParams(max_new_tokens=N_NEW))
    batch.step()
    c = batch.add(long, GenerationParams(max_new_tokens=8))
    for _ in batch:
        pass
    assert batch.result(c).stats.cached_prompt_tokens > 0
    assert batch.result(c).tokens == solo and batch.result(a).tokens == reference[0]


@pytest.mark.parametrize("chunk", [512, 4])
def test_a_prompt_joining_a_running_batch_widens_its_cache_by_no_more_than_its_steps(target, reference, chunk):
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=3, eos_token_ids=[],
                            prefill_chunk=chunk)
    batch = eng.start()
    params = GenerationParams(max_new_tokens=N_NEW)
    a = batch.add(PROMPTS[1], params)
    while batch.kv.length < 2 * len(PROMPTS[3]):
        batch.step()
    before = batch.kv.length
    c = batch.add(PROMPTS[3], params)
    steps = 0
    while c not in {o.request_id for o in batch.step()}:
        steps += 1
    # The prompt's columns sit where the running row's cache has room, not after it: the cache grew by what the
    # running row's own steps (one token and up to 3 drafts each) needed.
    assert batch.kv.length <= before + (steps + 1) * (1 + 3)
    for _ in batch:
        pass
    assert batch.result(a).tokens == reference[1] and batch.result(c).tokens == reference[3]
