"""benchmarks/shape_ranking.py: top-1, regret and the random-pick floor of one shape sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def S():
    pytest.importorskip("numpy")
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "scripts")]
    import shape_ranking

    return shape_ranking


def _row(F, rid: str, k: int | None, tree: tuple[int, int, int] | None, speedup: float):
    return F.Row(rid, "SRC", "m", "eagle3", None, "H100-SXM", 1, "sglang", k, tree, 1, 0.0, "chat", speedup, None, "auto",
                 512, "d")


def test_a_sweep_scores_the_pick_against_the_best_and_a_random_pick(S) -> None:
    F = S.F
    rows = [_row(F, "a", 3, None, 1.6), _row(F, "b", None, (3, 4, 21), 2.0), _row(F, "c", 5, None, 1.8)]
    assert S.shape_groups(rows) == [rows]
    right = S.score_group(rows, {"a": 1.5, "b": 1.9, "c": 1.7})
    assert right.top1 and right.regret == 1.0 and right.shapes == 3
    wrong = S.score_group(rows, {"a": 2.2, "b": 1.9, "c": 1.7})
    assert not wrong.top1 and wrong.regret == pytest.approx(0.8)
    assert wrong.random_top1 == pytest.approx(1 / 3) and wrong.random_regret == pytest.approx((0.8 + 1.0 + 0.9) / 3)


def test_rows_of_one_shape_or_other_setups_are_no_sweep(S) -> None:
    F = S.F
    same = [_row(F, "a", 3, None, 1.6), _row(F, "b", 3, None, 1.7)]
    assert S.shape_groups(same) == []
    other = _row(F, "c", 5, None, 1.8)
    other.batch = 8
    assert S.shape_groups([same[0], other]) == []
