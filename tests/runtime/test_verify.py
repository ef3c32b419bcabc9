"""The verifier's output distribution equals the target's, on small synthetic distributions.

Each check is a chi-square goodness-of-fit test at a 0.1% false-alarm rate (alpha = 1e-3); seeds are fixed, so
the outcome is deterministic. A control shows the same test rejects a verifier that is not lossless.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")

from specplug.runtime.sampling import SamplingParams, sample, warp_probs  # noqa: E402
from specplug.runtime.verify import verify  # noqa: E402

ALPHA = 1e-3
N = 40_000
V = 8


def _chi2_ok(tokens: torch.Tensor, p: torch.Tensor) -> bool:
    counts = torch.bincount(tokens, minlength=V).double()
    support = p > 0
    if counts[~support].sum() > 0:
        return False  # a token the target can never produce
    expected = p[support].double() / p[support].double().sum() * counts.sum()
    observed = counts[support]
    # Pool cells expected to hold fewer than 5 samples, where the chi-square approximation fails.
    small = expected < 5
    if small.any():
        observed = torch.cat([observed[~small], observed[small].sum().view(1)])
        expected = torch.cat([expected[~small], expected[small].sum().view(1)])
    if len(expected) < 2:
        return bool(observed.sum() == counts.sum())
    return stats.chisquare(observed.numpy(), expected.numpy()).pvalue > ALPHA


def _case(seed: int, k: int, params: SamplingParams, point_mass: bool, device=None):
    """Target and draft logits drawn on the CPU (the same case on every device), sampled and verified on
    ``device``; results come back to the CPU."""
    g = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(k + 1, V, generator=g) * 1.5
    # A draft that resembles the target, as a real drafter does, so that drafts are often accepted.
    draft_logits = target_logits[:k] + torch.randn(k, V, generator=g)
    if device is not None and device.type != "cpu":
        target_logits, draft_logits = target_logits.to(device), draft_logits.to(device)
        g = torch.Generator(device=device).manual_seed(seed)
    p = warp_probs(target_logits, params)
    q = warp_probs(draft_logits, params)
    if point_mass:
        # An n-gram draft is some fixed guess; draw guesses from q so they are plausible but not exact.
        drafts = sample(q.expand(N, k, V), g)
        dprobs = None
    else:
        drafts = sample(q.expand(N, k, V), g)
        dprobs = q.expand(N, k, V)
    n = torch.full((N,), k, device=target_logits.device)
    n_acc, nxt = verify(target_logits.expand(N, k + 1, V), drafts, n, dprobs, params, g)
    return p.cpu(), drafts.cpu(), n_acc.cpu(), nxt.cpu()


def _first_two(drafts: torch.Tensor, n_acc: torch.Tensor, nxt: torch.Tensor):
    first = torch.where(n_acc >= 1, drafts[:, 0], nxt)
    kept = n_acc >= 1  # the second token exists in this step only if the first draft was kept
    second = torch.where(n_acc >= 2, drafts[:, 1] if drafts.shape[1] > 1 else nxt, nxt)
    return first, second[kept]


PARAMS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.5),
    SamplingParams(temperature=1.5, top_k=3),
    SamplingParams(temperature=1.0, top_p=0.7),
    SamplingParams(temperature=0.8, top_k=5, top_p=0.9),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"t{p.temperature}-k{p.top_k}-p{p.top_p}")
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("point_mass", [False, True], ids=["draft_model", "ngram"])
def test_sampling_distribution_matches_target(params: SamplingParams, k: int, point_mass: bool, device) -> None:
    p, drafts, n_acc, nxt = _case(7 + k, k, params, point_mass, device)
    first, second = _first_two(drafts, n_acc, nxt)
    assert _chi2_ok(first, p[0])
    assert len(second) > 1000  # enough accepted first drafts to test the next position
    assert _chi2_ok(second, p[1])


def test_greedy_accepts_matching_prefix() -> None:
    logits = torch.tensor([[[0.0, 5, 0, 0], [0, 0, 5, 0], [5, 0, 0, 0], [0, 0, 0, 5]]])
    drafts = torch.tensor([[1, 2, 3]])
    n_acc, nxt = verify(logits, drafts, torch.tensor([3]), None, SamplingParams())
    assert (n_acc.item(), nxt.item()) == (2, 0)
    # All accepted -> the bonus token from the last position.
    n_acc, nxt = verify(logits, torch.tensor([[1, 2, 0]]), torch.tensor([3]), None, SamplingParams())
    assert (n_acc.item(), nxt.item()) == (3, 3)
    # A row may carry fewer real drafts than the tensor is wide.
    n_acc, nxt = verify(logits, torch.tensor([[1, 2, 0]]), torch.tensor([1]), None, SamplingParams())
    assert (n_acc.item(), nxt.item()) == (1, 2)


def test_chi2_rejects_a_lossy_verifier() -> None:
    """Control: accepting every draft gives the draft's distribution, and the test notices."""
    params = SamplingParams(temperature=1.0)
    g = torch.Generator().manual_seed(3)
    p = warp_probs(torch.randn(V, generator=g) * 2, params)
    q = warp_probs(torch.randn(V, generator=g) * 2, params)
    lossy_first = sample(q.expand(N, V), g)
    assert not _chi2_ok(lossy_first, p)


def test_top_k_top_p_match_transformers() -> None:
    tf = pytest.importorskip("transformers")
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 3
    params = SamplingParams(temperature=0.7, top_k=10, top_p=0.8)
    procs = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(10), TopPLogitsWarper(0.8)])
    ref = procs(torch.zeros(4, 1, dtype=torch.long), logits.clone()).softmax(-1)
    assert tf is not None
    torch.testing.assert_close(warp_probs(logits, params), ref)


@pytest.mark.parametrize("temperature", [3.6e-156, 1e-9])
def test_vanishing_temperature_is_greedy_not_nan(temperature: float) -> None:
    # A client may send any positive float; logits / 1e-156 overflow, so such requests decode greedily.
    logits = torch.tensor([[2.0, 5.0, -1.0, 4.9]])
    params = SamplingParams(temperature=temperature)
    assert params.greedy
    probs = warp_probs(logits, params)
    assert torch.isfinite(probs).all() and probs[0].argmax() == 1 and probs[0, 1] == 1.0
    drafted = torch.zeros(1, 0, dtype=torch.long)
    _, nxt = verify(logits.unsqueeze(1), drafted, torch.zeros(1, dtype=torch.long), None, params, None)
    assert nxt.tolist() == [1]
