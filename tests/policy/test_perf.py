"""The performance model's formulas against the closed forms in shared/data/README.md."""

from __future__ import annotations

import pytest

from specplug.policy.perf import acceptance_length, position_alphas, solve_alpha, tree_reach


@pytest.mark.parametrize("alpha,k", [(0.6, 3), (0.8, 5), (0.9, 10)])
def test_chain_matches_leviathan(alpha: float, k: int) -> None:
    tau = acceptance_length(position_alphas(alpha, 1.0, k, 0.45))
    assert tau == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))


def test_trees_and_decay_move_tau_the_right_way() -> None:
    chain = acceptance_length(position_alphas(0.7, 1.0, 5, 0.45))
    tree = acceptance_length(position_alphas(0.7, 1.0, 5, 0.45, topk=4, nodes=25))
    bigger = acceptance_length(position_alphas(0.7, 1.0, 6, 0.45, topk=10, nodes=59))
    decayed = acceptance_length(position_alphas(0.7, 0.9, 5, 0.45))
    assert bigger > tree > chain > decayed
    # Without a sibling gain a second guess never catches the token: any tree is its top chain.
    assert acceptance_length(position_alphas(0.7, 1.0, 5, 0.0, topk=4, nodes=25)) == pytest.approx(chain)


def test_tree_keeps_the_likeliest_nodes() -> None:
    # depth 2, topk 2, gain 1: the first guess is right with 0.6, the second with (1 - 0.6) * (1 - 1/2) = 0.2.
    # Three nodes: the two first-level guesses (0.6, 0.2) and the first guess's child (0.36), not the 0.12 one.
    reach = tree_reach(0.6, 1.0, 2, 1.0, 2, 3)
    assert reach == pytest.approx([0.8, 0.36])


def test_the_fitted_tree_gain_reads_eagles_chain_and_trees_alike() -> None:
    # EAGLE-1's Table 5 (Vicuna-7B, MT-bench): a chain of 5 accepts 3.20 tokens per step, its static 26-node tree
    # 3.94. The fitted prior with its tree gain puts the tree above the chain by a similar margin.
    from specplug.policy.data import load_policy

    pol = load_policy()
    prior = pol.prior("eagle")
    a = prior.alpha_for("chat")
    chain = acceptance_length(position_alphas(a, prior.decay, 5))
    tree = acceptance_length(position_alphas(a, prior.decay, 5, pol.acceptance.tree.gain, topk=4, nodes=25))
    assert 1.05 < tree / chain < 1.4


def test_solve_alpha_inverts_tau() -> None:
    a = solve_alpha(2.9, 4, 0.95)
    assert acceptance_length(position_alphas(a, 0.95, 4)) == pytest.approx(2.9, abs=1e-3)


def test_a_bigger_drafter_predicts_better_at_the_same_size_ratio() -> None:
    from specplug.policy.data import load_policy
    from specplug.policy.perf import first_alpha

    pol = load_policy()
    assert pol.acceptance.draft_model.params_slope > 0  # fitted: published draft-model rows ask for it
    # A 1B drafter for a 405B target and a 68M one for a 33B target share a size ratio (about 0.002).
    big = first_alpha(pol, "draft_model", "chat", 0.0, 1.0 / 405, 1.0)
    tiny = first_alpha(pol, "draft_model", "chat", 0.0, 0.068 / 33, 0.068)
    assert big > tiny


@pytest.mark.parametrize("alpha", [0.6, 0.7, 0.8])
@pytest.mark.parametrize("k,topk", [(3, 3), (3, 4), (5, 4), (7, 4)])
def test_a_tree_no_larger_than_its_depth_is_not_the_chain(alpha: float, k: int, topk: int) -> None:
    # SGLang trees of topk 3-4 verifying k+1 tokens accept less than the chain of k (issue 42): the builder keeps the
    # nodes the drafter scores highest, and its scores favour siblings over depth. The shipped policy says the same at
    # the acceptance of learned drafters (a drafter near 0.9 scores its chain above any sibling and keeps it).
    from specplug.policy.data import load_policy

    tree = load_policy().acceptance.tree
    chain = acceptance_length(position_alphas(alpha, 0.95, k))
    small = acceptance_length(position_alphas(alpha, 0.95, k, tree.gain, topk=topk, nodes=k, confidence=tree.confidence))
    assert small < chain


def test_a_confident_builder_keeps_the_chain_and_a_doubtful_one_spends_on_siblings() -> None:
    # Scored by its true chances, a budget of depth nodes is the chain (the likeliest path); scored low, it is wider.
    chain = tree_reach(0.8, 0.95, 3, 0.8, 4, 3, confidence=1.0)
    assert chain == pytest.approx([0.8, 0.8 * 0.76, 0.8 * 0.76 * 0.722])
    doubtful = tree_reach(0.8, 0.95, 3, 0.8, 4, 3, confidence=0.5)
    assert doubtful[2] == 0.0 and sum(doubtful) < sum(chain)
    # Given room (20 drafts over 3 levels), the wider tree gains over the chain whatever the builder's confidence.
    assert sum(tree_reach(0.8, 0.95, 3, 0.8, 4, 20, confidence=0.5)) > sum(chain)


def test_a_tree_drafts_topk_wide_at_every_level() -> None:
    from specplug.policy.perf import Shape

    assert Shape(3, 3, 4, 4).width == 4.0 and Shape(3, 3, 4, 21).width == 4.0
    assert Shape(5).width == 1.0 and Shape(3, 3, 1, 4).width == 1.0
