"""The prefix cache: a prompt that starts as an earlier one did skips computing the shared blocks, and the tokens
decoded are the same as without it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specplug.runtime.engine import GenerationParams, SpeculativeEngine  # noqa: E402
from specplug.runtime.prefix import BLOCK, PrefixCache  # noqa: E402
from specplug.runtime.proposers import NgramProposer  # noqa: E402
from specplug.runtime.tiny import tiny_llama  # noqa: E402

SYSTEM = [7, 3, 9, 12, 5, 5, 8, 30, 31, 2, 44, 19, 6, 6, 21, 17] * 3  # three blocks every prompt shares
PROMPTS = [SYSTEM + [50, 51, 52, 50, 51], SYSTEM + [60, 61], SYSTEM + [70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80]]


@pytest.fixture(scope="module")
def target(device):
    return tiny_llama(layers=3, seed=0).to(device)


def _engine(target, prefix_bytes: int, ngram: bool = False) -> SpeculativeEngine:
    factory = (lambda: NgramProposer(1, 3)) if ngram else None
    return SpeculativeEngine(target, proposer_factory=factory, k=4, prefix_cache_bytes=prefix_bytes)


@pytest.mark.parametrize("ngram", [False, True])
def test_a_cached_prefix_decodes_the_same_tokens(target, ngram):
    params = GenerationParams(max_new_tokens=24)
    plain = [r.tokens for r in _engine(target, 0, ngram).generate(PROMPTS, params)]
    engine = _engine(target, 64 << 20, ngram)
    first = engine.generate(PROMPTS, params)
    again = engine.generate(PROMPTS, params)
    assert [r.tokens for r in first] == plain == [r.tokens for r in again]
    # In one admission the later prompts find the system prompt the first one cached; sent again, every whole block
    # but the one holding the last token is found.
    assert [r.stats.cached_prompt_tokens for r in first] == [0, len(SYSTEM), len(SYSTEM)]
    assert [r.stats.cached_prompt_tokens for r in again] == [(len(p) - 1) // BLOCK * BLOCK for p in PROMPTS]
    assert engine.prefix.hit_tokens == sum(r.stats.cached_prompt_tokens for r in first + again)
    assert engine.prefix.queried_tokens == 2 * sum(len(p) for p in PROMPTS)


def test_a_request_joining_a_running_batch_uses_the_cache(target):
    engine = _engine(target, 64 << 20)
    alone = engine.generate([PROMPTS[0]], GenerationParams(max_new_tokens=8))[0]
    batch = engine.start()
    first = batch.add(PROMPTS[1], GenerationParams(max_new_tokens=20))
    for _ in range(3):
        batch.step()
    joined = batch.add(PROMPTS[0], GenerationParams(max_new_tokens=8))
    for _ in batch:
        pass
    assert batch.result(joined).tokens == alone.tokens
    assert batch.result(joined).stats.cached_prompt_tokens == len(SYSTEM)
    assert batch.result(first).tokens == _engine(target, 0).generate([PROMPTS[1]], GenerationParams(max_new_tokens=20))[0].tokens


def _kv(n: int, value: float = 0.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, 2, n, 4), value), torch.full((1, 2, n, 4), value)) for _ in range(3)]


def test_lookup_takes_whole_blocks_and_leaves_the_last_token():
    cache = PrefixCache(1 << 20)
    tokens = list(range(2 * BLOCK))
    cache.insert(tokens, _kv(2 * BLOCK))
    assert cache.lookup(tokens)[0] == BLOCK  # the second block holds the last token: computed, not looked up
    assert cache.lookup([*tokens, 99])[0] == 2 * BLOCK
    assert cache.lookup([1, *tokens])[0] == 0  # a block is found by the whole prefix before it, not its tokens
    n, kv = cache.lookup([*tokens[:BLOCK], 5, 6])
    assert n == BLOCK and kv[0][0].shape == (1, 2, BLOCK, 4)


def test_the_budget_evicts_the_least_recently_used_prefix_and_what_extends_it():
    one = 3 * 2 * (2 * BLOCK * 4 * 4)  # bytes of one block: 3 layers x (k, v) x 2 heads x BLOCK x 4 dims x float32
    cache = PrefixCache(4 * one)
    a, b = list(range(3 * BLOCK + 1)), list(range(100, 100 + 2 * BLOCK + 1))
    cache.insert(a, _kv(3 * BLOCK))
    cache.insert(b, _kv(2 * BLOCK))  # 5 blocks for a budget of 4: a's first block goes, and its two children
    assert cache.nbytes <= cache.budget and len(cache) == 2
    assert cache.lookup(a)[0] == 0 and cache.lookup(b)[0] == 2 * BLOCK
