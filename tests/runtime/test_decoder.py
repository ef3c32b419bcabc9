"""The lean Llama forward: bit-identical logits to transformers over the same weights in every shape the engine
feeds it (prefill, one-token decode, multi-token verification, left-padded batches with holes), a cache that
grows and rolls back correctly, and models it cannot run are left to transformers."""

from __future__ import annotations

import copy
import functools

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specplug.runtime import decoder  # noqa: E402
from specplug.runtime.cache import KVState  # noqa: E402
from specplug.runtime.decoder import GrowCache, LeanDecoder, lean, unsupported_reason  # noqa: E402
from specplug.runtime.engine import GenerationParams, SpeculativeEngine  # noqa: E402
from specplug.runtime.proposers import DraftModelProposer, NgramProposer  # noqa: E402
from specplug.runtime.tiny import layer_subset, tiny_llama  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model32():
    # float32 and the normal init: the dtype and value range where kernel differences would show.
    return tiny_llama(vocab_size=128, hidden_size=96, layers=3, heads=6, kv_heads=2, dtype=torch.float32,
                      init_std=0.05, seed=3)


def _feed(model, steps, batch_masks=None):
    """Feed the same token blocks through KVState over ``model``; returns the logits of every step."""
    dev = next(model.parameters()).device
    steps = [s.to(dev) for s in steps]
    kv = KVState(model, steps[0].shape[0], dev)
    out = []
    with torch.inference_mode():
        for i, tokens in enumerate(steps):
            mask = batch_masks[i] if batch_masks else None
            out.append(kv.forward(tokens, mask))
    return out, kv


@pytest.fixture(scope="module")
def qwen2_biased():
    # Biases on q/k/v (Qwen2's shape): the stacked projection must add each row's own bias.
    cfg = transformers.Qwen2Config(vocab_size=128, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=6, num_key_value_heads=2, attn_implementation="sdpa")
    torch.manual_seed(4)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.1)
    return model


def _lean_against_transformers(model, batch):
    """Logits of transformers over ``model`` as loaded, of a LeanDecoder over it, and of transformers again after
    (over the weights it now views), for a prefill then decode and verification steps of 1, 2, 4 and 5 tokens."""
    g = torch.Generator().manual_seed(0)
    steps = [torch.randint(0, 128, (batch, n), generator=g) for n in (17, 1, 2, 4, 5, 1)]
    return _feed(model, steps)[0], _feed(LeanDecoder(model), steps)[0], _feed(model, steps)[0]


@pytest.mark.parametrize("name", ["model32", "qwen2_biased"])
def test_logits_bit_identical_prefill_decode_verify(name, request, monkeypatch, device):
    # With the weights as loaded (no CPU re-layout), the decoder is transformers' arithmetic bit for bit on a
    # CPU, and the transformers model computes the same logits over the stacked weights it now views. On CUDA,
    # cuBLAS picks its kernel by shape, so a stacked product sums in another order than three separate ones:
    # the logits differ in the last bits there (at most 1.1e-6 on an H200 in float32), never in the argmax.
    monkeypatch.setattr(decoder, "CPU_LAYOUT", {})
    model = copy.deepcopy(request.getfixturevalue(name)).to(device)
    for want, got, again in zip(*_lean_against_transformers(model, 2), strict=True):
        assert torch.equal(want, again)
        if device.type == "cpu":
            assert torch.equal(want, got)
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_cpu_layout_moves_only_the_last_bits():
    # float32 on a CPU: weights laid out for MKL (CPU_LAYOUT); one row per pass uses the transposed copies,
    # more rows oneDNN's packs (or, without oneDNN, 2-3 rows torch's layout and 4-8 rows the MKL packs). Only
    # rounding may differ from the model as loaded.
    assert decoder.CPU_LAYOUT and decoder.PACKED_ROWS
    model = tiny_llama(vocab_size=128, hidden_size=96, layers=3, heads=6, kv_heads=2, dtype=torch.float32,
                       init_std=0.05, seed=9)
    for want, got, _ in zip(*_lean_against_transformers(model, 1), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_decoders_over_one_model_share_its_weights():
    # Stacking q/k/v and gate/up must not copy the model: its own parameters become views of the stacks, and
    # a second decoder (a second engine over the same target) reuses them.
    # On a CPU in float32 the weights are laid out as CPU_LAYOUT says, once, whatever the number of decoders.
    model = tiny_llama(layers=2, seed=5, dtype=torch.float32)
    first, second = LeanDecoder(model), LeanDecoder(model)
    layout = decoder.CPU_LAYOUT
    assert first.lm_head.data_ptr() == second.lm_head.data_ptr() == model.lm_head.weight.data_ptr()
    assert first.lm_head_t.data_ptr() == second.lm_head_t.data_ptr()
    assert first.lm_head_t.t().is_contiguous() == (layout["lm_head"] != "torch")
    # Where torch has oneDNN, batched passes multiply through its packs of every weight, and MKL's are not made.
    dnn = decoder._onednn_packing()
    packs = decoder._mkl_packing() and not dnn
    assert first.onednn == second.onednn == dnn
    assert (first.lm_head_p is not None) == ("lm_head" in decoder.CPU_PACKED and packs)
    assert first.lm_head_p is second.lm_head_p and first.lm_head_dnn is second.lm_head_dnn
    assert (first.lm_head_dnn is not None) == dnn
    for layer, a, b in zip(model.model.layers, first.weights, second.weights, strict=True):
        attn, mlp = layer.self_attn, layer.mlp
        assert a.qkv.data_ptr() == b.qkv.data_ptr() and a.gate_up.data_ptr() == b.gate_up.data_ptr()
        assert a.gate_up_t.data_ptr() == b.gate_up_t.data_ptr()
        assert a.packs.keys() == b.packs.keys() == (decoder.CPU_PACKED - {"lm_head"} if packs else set())
        assert all(a.packs[kind] is b.packs[kind] for kind in a.packs)
        assert a.dnn.keys() == b.dnn.keys() == ({"qkv", "o", "gate_up", "down"} if dnn else set())
        assert all(a.dnn[kind] is b.dnn[kind] for kind in a.dnn)
        assert a.o.data_ptr() == b.o.data_ptr() == attn.o_proj.weight.data_ptr()
        for kind, w in (("qkv", a.qkv), ("o", a.o), ("gate_up", a.gate_up), ("down", a.down)):
            assert w.t().is_contiguous() == (layout[kind] == "transposed"), kind
        for kind in ("qkv", "o", "gate_up"):  # the second layout, where CPU_LAYOUT keeps "both"
            w, alt = getattr(a, kind), getattr(a, f"{kind}_t")
            assert alt.data_ptr() == getattr(b, f"{kind}_t").data_ptr(), kind
            assert alt.t().is_contiguous() == (layout[kind] != "torch") and torch.equal(alt, w), kind
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            assert proj.weight.untyped_storage().data_ptr() == a.qkv.untyped_storage().data_ptr()
        for proj in (mlp.gate_proj, mlp.up_proj):
            assert proj.weight.untyped_storage().data_ptr() == a.gate_up.untyped_storage().data_ptr()


def test_a_vocabulary_subset_scores_just_its_tokens(model32):
    # A drafter's reduced vocabulary: column j of the logits is token vocab[j]'s logit, in every pass shape
    # (1, 2-3 and 4-8 rows take different stored forms of the head), and two decoders share the subset head.
    vocab = torch.tensor([5, 0, 77, 3, 127, 64, 9])
    full, sub = LeanDecoder(model32), LeanDecoder(model32, vocab)
    assert sub.lm_head.shape == (len(vocab), model32.config.hidden_size)
    assert LeanDecoder(model32, vocab).lm_head_t.data_ptr() == sub.lm_head_t.data_ptr()
    assert lean(full) is full and lean(sub).vocab is None and torch.equal(lean(full, vocab).vocab, vocab)
    steps = [torch.randint(0, 128, (1, 6)), torch.randint(0, 128, (1, 1)), torch.randint(0, 128, (1, 3)),
             torch.randint(0, 128, (1, 5)), torch.randint(0, 128, (2, 4))]
    for shape_steps in (steps[:4], [steps[4]]):
        for want, got in zip(_feed(full, shape_steps)[0], _feed(sub, shape_steps)[0], strict=True):
            torch.testing.assert_close(got, want[..., vocab], rtol=1e-5, atol=1e-5)


def _huge_kb(address: int) -> int:
    """AnonHugePages (kB) of the mapping of this process that holds ``address``."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def test_the_weights_a_step_streams_sit_in_huge_pages():
    # Where the kernel can move memory into 2 MB pages (Linux 6.1+ with THP not off), a CPU decoder's streamed
    # weights are moved there: fewer TLB misses per step. Its logits stay those of the model.
    probe = torch.ones(5 << 20, dtype=torch.uint8)  # touched, and holding at least one whole 2 MB page
    if decoder.huge_pages([probe]) == 0:
        pytest.skip("this kernel does not move memory into huge pages on request")
    model = tiny_llama(vocab_size=8192, hidden_size=256, layers=1, heads=4, kv_heads=2, dtype=torch.float32, seed=2)
    want = model(torch.tensor([[1, 2, 3]])).logits
    lean_model = LeanDecoder(model)
    ptr = lean_model.lm_head.data_ptr() + (2 << 20)  # inside the 8 MB head
    # A one-off generation does not wait for the move: it starts after HUGE_PAGES_AFTER forwards, in a thread.
    steps = [torch.tensor([[1, 2, 3]])] + [torch.tensor([[4]])] * (decoder.HUGE_PAGES_AFTER - 2)
    got = _feed(lean_model, steps)[0]
    assert lean_model.huge_job is None and _huge_kb(ptr) == 0
    _feed(lean_model, [torch.tensor([[5]])])
    lean_model.huge_job.join()
    assert _huge_kb(ptr) > 0
    assert LeanDecoder(model).huge_pages_now() is lean_model.huge_job  # one move per model
    # The 3-row prefill multiplies through oneDNN where torch has it: its sums run in another order.
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-4 if lean_model.onednn else 1e-5)


def test_copies_past_the_memory_budget_are_not_made(monkeypatch):
    # A model whose transposed copies and packs would add more than CPU_COPY_BUDGET keeps one layout of those
    # weights.
    monkeypatch.setattr(decoder, "CPU_COPY_BUDGET", 0)
    model = tiny_llama(layers=2, seed=6, dtype=torch.float32)
    lean_model = LeanDecoder(model)
    assert lean_model.lm_head_t is lean_model.lm_head and lean_model.lm_head_p is None
    assert not lean_model.onednn and lean_model.lm_head_dnn is None
    assert all(w.gate_up_t is w.gate_up and w.qkv_t is w.qkv and w.o_t is w.o and not w.packs and not w.dnn
               for w in lean_model.weights)
    assert lean_model.weights[0].qkv.t().is_contiguous() == (decoder.CPU_LAYOUT["qkv"] == "transposed")


def test_logits_bit_identical_with_holes(model32, monkeypatch):
    # A left-padded batch (rows of different lengths), then a verification step with padding in one row.
    monkeypatch.setattr(decoder, "CPU_LAYOUT", {})
    g = torch.Generator().manual_seed(1)
    steps = [torch.randint(0, 128, (3, 9), generator=g), torch.randint(0, 128, (3, 4), generator=g)]
    masks = [torch.tensor([[True] * 9, [False] * 4 + [True] * 5, [False] * 8 + [True]]),
             torch.tensor([[True] * 4, [True, True, False, False], [True] * 4])]
    want, kv_hf = _feed(model32, steps, masks)
    got, kv_lean = _feed(LeanDecoder(model32), steps, masks)
    for w, o, m in zip(want, got, masks, strict=True):
        assert torch.equal(w[m], o[m])  # padding positions' logits are never read
    assert isinstance(kv_lean.cache, GrowCache) and kv_lean.length == kv_hf.length


def test_padding_columns_are_not_computed_and_change_no_logit(model32):
    # A verification step where rows carry 3, 0 and 1 drafts (4 columns): 7 of its 12 columns are real.
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 128, (3, 9), generator=g)
    verify_step = torch.randint(0, 128, (3, 4), generator=g)
    fed = torch.tensor([[True] * 4, [True, False, False, False], [True, True, False, False]])
    lean_model = LeanDecoder(model32)
    rows_seen = []
    real_linear = decoder._linear

    def counting(x, *args, **kwargs):
        rows_seen.append(x.shape[0])
        return real_linear(x, *args, **kwargs)

    out = {}
    for packed in (False, True):
        kv = KVState(lean_model, 3, CPU)
        with torch.inference_mode():
            kv.forward(prompt)
            rows_seen.clear()
            decoder._linear = counting
            try:
                logits = kv.forward(verify_step, fed=fed if packed else None)
            finally:
                decoder._linear = real_linear
            kv.rollback(torch.tensor([2, 1, 2]))  # each row keeps its accepted columns, all of them fed
            after = kv.forward(torch.randint(0, 128, (3, 1), generator=torch.Generator().manual_seed(5)))
        out[packed] = (logits, after, set(rows_seen))
    (full, after_full, rows_full), (packed, after_packed, rows_packed) = out[False], out[True]
    assert rows_full == {12} and rows_packed == {7}
    torch.testing.assert_close(packed[fed], full[fed], rtol=1e-5, atol=1e-5)
    assert torch.equal(packed[fed].argmax(-1), full[fed].argmax(-1))
    assert not packed[~fed].any()  # padding gets zero logits, never read
    torch.testing.assert_close(after_packed, after_full, rtol=1e-5, atol=1e-5)


def test_packed_verification_over_a_cache_with_holes(model32):
    # Left-padded rows of different lengths (a cache with holes), then verification where one of three rows
    # carries drafts: its later columns attend over its own keys only; every fed logit matches the full pass.
    g = torch.Generator().manual_seed(6)
    prompt = torch.randint(0, 128, (3, 9), generator=g)
    pad = torch.tensor([[True] * 9, [False] * 4 + [True] * 5, [False] * 7 + [True] * 2])
    verify_step = torch.randint(0, 128, (3, 5), generator=g)
    for fed in (torch.tensor([[True] + [False] * 4, [True] * 5, [True] + [False] * 4]),
                torch.tensor([[True] + [False] * 4] * 3)):
        got = {}
        for packed in (False, True):
            kv = KVState(LeanDecoder(model32), 3, CPU)
            with torch.inference_mode():
                kv.forward(prompt, pad)
                got[packed] = kv.forward(verify_step, fed=fed if packed else None)
        torch.testing.assert_close(got[True][fed], got[False][fed], rtol=1e-5, atol=1e-5)


def test_a_prompt_fed_beside_decoding_rows_gives_the_logits_it_gives_alone(model32):
    # Two rows decode (one token, and one token with two drafts) while a third row's 6-token prompt goes in the same
    # pass; its runs of rows attend over their own columns (parts), the prompt's logits are only its last column's
    # (logits_at), and after the pass its columns move into the batch's room (compact). Each row's logits match
    # what it gives in a pass of its own.
    g = torch.Generator().manual_seed(8)
    context = torch.randint(0, 128, (2, 12), generator=g)
    prompt = torch.randint(0, 128, (1, 6), generator=g)
    step = torch.randint(0, 128, (2, 3), generator=g)
    nxt = torch.randint(0, 128, (3, 1), generator=g)
    fed_step = torch.tensor([[True, False, False], [True, True, True]])
    lean_model = LeanDecoder(model32)
    with torch.inference_mode():
        alone = KVState(lean_model, 2, CPU)
        alone.forward(context)
        want_rows = alone.forward(step, fed=fed_step)
        alone.rollback(torch.tensor([1, 2]))
        want_rows_next = alone.forward(nxt[:2])
        solo = KVState(lean_model, 1, CPU)
        want_prompt = solo.forward(prompt, last_only=True)
        want_prompt_next = solo.forward(nxt[2:])
        for parts in ([(2, 3), (1, 6)], None):
            kv = KVState(lean_model, 2, CPU)
            kv.forward(context)
            kv.merge(KVState(lean_model, 1, CPU))  # the joining row: no columns of its own yet
            tokens = torch.zeros(3, 6, dtype=torch.long)
            tokens[:2, :3], tokens[2] = step, prompt[0]
            real = torch.zeros(3, 6, dtype=torch.bool)
            real[:2, :3], real[2] = fed_step, True
            wanted = real.clone()
            wanted[2] = torch.arange(6) == 5
            logits = kv.forward(tokens, real, fed=real, logits_at=wanted, parts=parts)
            assert logits.shape == (3, 3, 128)
            torch.testing.assert_close(logits[:2][fed_step], want_rows[fed_step], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(logits[2, :1], want_prompt[0], rtol=1e-5, atol=1e-5)
            kv.rollback(torch.tensor([1, 2, 6]))
            width = kv.length
            kv.compact([2], [6], [0])
            assert kv.length < width  # the prompt's columns moved into the decoding rows' room
            after = kv.forward(nxt)
            torch.testing.assert_close(after[:2], want_rows_next, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(after[2:], want_prompt_next, rtol=1e-5, atol=1e-5)


def test_cache_grows_and_rolls_back_across_reallocations(monkeypatch):
    # A tiny growth step makes every few tokens a reallocation, with rollbacks, joins and departures between.
    monkeypatch.setattr(decoder, "_GROW", 3)
    target = tiny_llama(layers=2, seed=1)
    prompts = [[5, 6, 7, 5, 6, 7, 5], [9, 10, 11], [3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3]]
    params = [GenerationParams(max_new_tokens=n) for n in (60, 25, 45)]
    ref = [
        target.generate(torch.tensor([p]), max_new_tokens=q.max_new_tokens, do_sample=False, eos_token_id=None,
                        pad_token_id=1)[0, len(p):].tolist()
        for p, q in zip(prompts, params, strict=True)
    ]
    for factory in (lambda: NgramProposer(1, 3), lambda: DraftModelProposer(layer_subset(target, (1,)), CPU)):
        eng = SpeculativeEngine(target, proposer_factory=factory, k=4, adaptive=True, eos_token_ids=[])
        assert isinstance(eng.target, LeanDecoder)
        got = eng.generate(prompts, params)
        assert [r.tokens for r in got] == ref


def test_requests_that_come_and_go_reuse_the_caches_spare_rows_and_decode_as_alone(monkeypatch):
    # Requests finish and join mid-flight (prompts fed beside the running ones): a joining row takes a spare row of
    # the cache's buffer, where one is left by a departed request, without copying the others; every output is the
    # target's own greedy one.
    monkeypatch.setattr(decoder, "_GROW", 3)
    target = tiny_llama(layers=2, seed=1)
    prompts = [[5, 6, 7, 5, 6, 7, 5], [9, 10, 11], [3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3], [8, 9, 8, 9, 8], [2, 3, 2]]
    lens = (30, 8, 20, 12, 16)
    ref = [target.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                           pad_token_id=1)[0, len(p):].tolist() for p, n in zip(prompts, lens, strict=True)]
    eng = SpeculativeEngine(target, proposer_factory=lambda: NgramProposer(1, 3), k=3, eos_token_ids=[])
    batch = eng.start()
    rids = [batch.add(p, GenerationParams(max_new_tokens=n)) for p, n in zip(prompts[:2], lens[:2], strict=True)]
    reused = 0
    while batch.rows or batch.pending or len(rids) < len(prompts):
        layer = batch.kv.cache.layers[0] if batch.kv.cache.layers else None
        before = (layer.base.data_ptr(), layer.rows, layer.base.shape[0]) if layer else None
        done = [o.request_id for o in batch.step() if o.finished]
        if done and len(rids) < len(prompts):
            i = len(rids)
            rids.append(batch.add(prompts[i], GenerationParams(max_new_tokens=lens[i])))
        layer = batch.kv.cache.layers[0] if batch.kv.cache.layers else None
        if before and layer and layer.rows > before[1] and layer.base.data_ptr() == before[0]:
            reused += 1
    assert reused  # a row joined into the buffer's spare rows: nothing was copied for it
    assert [batch.result(r).tokens for r in rids] == ref


def test_lean_and_transformers_paths_decode_the_same(model32):
    prompts = [[5, 6, 7, 8, 5, 6, 7], [20, 21, 22, 23, 20, 21, 22, 23, 20], [2]]
    params = GenerationParams(max_new_tokens=30)
    runs = {}
    for use_lean in (True, False):
        eng = SpeculativeEngine(model32, proposer_factory=lambda: NgramProposer(1, 3), k=3, eos_token_ids=[],
                                lean=use_lean)
        assert isinstance(eng.target, LeanDecoder) is use_lean
        runs[use_lean] = [r.tokens for r in eng.generate(prompts, params)]
    assert runs[True] == runs[False]


def test_greedy_tokens_are_unchanged_by_the_cpu_relayout(monkeypatch):
    # float32 on a CPU: the decoder lays weights out for MKL, so its sums run in another order. Greedy
    # tokens must still be transformers' over the weights as loaded, for plain and speculative decoding and a
    # batch whose rows verify different widths.
    model = tiny_llama(vocab_size=128, hidden_size=96, layers=3, heads=6, kv_heads=2, dtype=torch.float32,
                       init_std=0.05, seed=8)
    prompts = [[5, 6, 7, 8, 5, 6, 7], [20, 21, 22, 23, 20, 21, 22, 23, 20], [2]]
    with torch.inference_mode():
        ref = [model.generate(torch.tensor([p]), max_new_tokens=30, do_sample=False, eos_token_id=None,
                              pad_token_id=1)[0, len(p):].tolist() for p in prompts]
    rows = set()
    real_forward = LeanDecoder.forward

    @functools.wraps(real_forward)  # the engine reads the signature
    def forward(self, input_ids, *args, **kwargs):
        rows.add(input_ids.numel())
        return real_forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(LeanDecoder, "forward", forward)
    for factory, k in ((None, 3), (lambda: NgramProposer(1, 3), 3), (lambda: NgramProposer(1, 3), 4)):
        eng = SpeculativeEngine(model, proposer_factory=factory, k=k, eos_token_ids=[])
        assert eng.target.lm_head_t.t().is_contiguous() == (decoder.CPU_LAYOUT["lm_head"] != "torch")
        params = GenerationParams(max_new_tokens=30)
        assert [r.tokens for r in eng.generate(prompts, params)] == ref
        # One row at a time too: passes of 1-5 rows, so every stored form of the weights gets used (the packs
        # also at 6 rows, padded to 8, in the batch).
        assert [eng.generate([p], params)[0].tokens for p in prompts] == ref
    assert {1, 2, 3, 4, 5, 6} <= rows


def test_other_architectures_keep_transformers_forward():
    cfg = transformers.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    qwen3 = transformers.Qwen3ForCausalLM(cfg).eval()
    assert "'qwen3' is not one of" in unsupported_reason(qwen3)
    assert lean(qwen3) is qwen3
    with pytest.raises(ValueError, match="no lean path"):
        LeanDecoder(qwen3)
    eager = tiny_llama(layers=1)
    eager.config._attn_implementation = "eager"
    assert "not sdpa" in unsupported_reason(eager)
    normed = tiny_llama(layers=1)
    normed.model.layers[0].self_attn.q_norm = torch.nn.Identity()  # a layer shaped unlike Llama's
    assert "q/k norms" in unsupported_reason(normed)
    # The engine still decodes such a model, through transformers.
    eng = SpeculativeEngine(qwen3, proposer_factory=lambda: NgramProposer(1, 2), k=2, eos_token_ids=[])
    assert eng.target is qwen3
    want = qwen3.generate(torch.tensor([[3, 4, 3, 4, 3]]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[0, 5:].tolist()
    assert eng.generate([[3, 4, 3, 4, 3]], GenerationParams(max_new_tokens=12))[0].tokens == want
