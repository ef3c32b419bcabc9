"""Acceptance per position pooled over runs, and carried to shorter chains."""

from __future__ import annotations

import pytest

from specplug.tune.acceptance import pooled
from tests.tune.helpers import run


def test_positions_are_weighted_by_drafts_and_shorter_k_follows():
    runs = [run(1, 10, drafts=100, per_pos=[0.8, 0.5, 0.2], accepted=150, k=3),
            run(4, 10, drafts=300, per_pos=[0.6, 0.3, 0.1], accepted=300, k=3)]
    a = pooled(runs, 3)
    assert a.per_position == pytest.approx([0.65, 0.35, 0.125])
    assert a.acceptance_length == pytest.approx(1 + 450 / 400)
    assert a.length_at(1) == pytest.approx(1.65) and a.length_at(2) == pytest.approx(2.0)
    assert a.conditional_rates() == pytest.approx([0.65, 0.35 / 0.65, 0.125 / 0.35])
    assert a.length_at(5) is None
    short = pooled([run(1, 10, drafts=100, per_pos=[0.5], accepted=50, k=3)], 3)
    assert short.length_at(3) == pytest.approx(1.5)  # positions never accepted are not reported


def test_no_metrics_no_acceptance():
    assert pooled([run(1, 10)], 3) is None
