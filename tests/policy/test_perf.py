"""The performance model's formulas against the closed forms in shared/data/README.md."""

from __future__ import annotations

import pytest

from specplug.policy.perf import acceptance_length, position_alphas, solve_alpha


@pytest.mark.parametrize("alpha,k", [(0.6, 3), (0.8, 5), (0.9, 10)])
def test_chain_matches_leviathan(alpha: float, k: int) -> None:
    tau = acceptance_length(position_alphas(alpha, 1.0, k, 1.0, 0.45))
    assert tau == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))


def test_trees_and_decay_move_tau_the_right_way() -> None:
    chain = acceptance_length(position_alphas(0.7, 1.0, 5, 1.0, 0.45))
    tree = acceptance_length(position_alphas(0.7, 1.0, 5, 4.0, 0.45))
    decayed = acceptance_length(position_alphas(0.7, 0.9, 5, 1.0, 0.45))
    assert tree > chain > decayed


def test_solve_alpha_inverts_tau() -> None:
    a = solve_alpha(2.9, 4, 0.95)
    assert acceptance_length(position_alphas(a, 0.95, 4, 1.0, 0.0)) == pytest.approx(2.9, abs=1e-3)


def test_a_bigger_drafter_predicts_better_at_the_same_size_ratio() -> None:
    from specplug.policy.data import load_policy
    from specplug.policy.perf import first_alpha

    pol = load_policy()
    assert pol.acceptance.draft_model.params_slope > 0  # fitted: published draft-model rows ask for it
    # A 1B drafter for a 405B target and a 68M one for a 33B target share a size ratio (about 0.002).
    big = first_alpha(pol, "draft_model", "chat", 0.0, 1.0 / 405, 1.0)
    tiny = first_alpha(pol, "draft_model", "chat", 0.0, 0.068 / 33, 0.068)
    assert big > tiny
