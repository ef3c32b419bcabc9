"""Parsing tune's flags, and which settings a resumed tune must share."""

from __future__ import annotations

import pytest

from specplug.errors import SpecplugError
from specplug.tune.settings import TuneSettings, fmt_duration, parse_budget, parse_ints


def test_budget_and_k_ranges():
    assert parse_budget("30m") == 1800 and parse_budget("1h30m") == 5400 and parse_budget("90") == 90
    assert parse_budget(None) is None
    for bad in ("soon", "10x", "0"):
        with pytest.raises(SpecplugError):
            parse_budget(bad)
    assert parse_ints("1-3,5", "-k", 1, 64) == [1, 2, 3, 5]
    with pytest.raises(SpecplugError, match="1..64"):
        parse_ints("0-2", "-k", 1, 64)
    assert fmt_duration(3725) == "1h02m" and fmt_duration(59) == "59s"


def test_budget_and_candidates_do_not_change_what_was_measured():
    a = TuneSettings(concurrency=[1, 4], budget_s=600, candidates=2)
    b = TuneSettings(concurrency=[1, 4], budget_s=60, candidates=5)
    c = TuneSettings(concurrency=[1, 4], max_tokens=64)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
