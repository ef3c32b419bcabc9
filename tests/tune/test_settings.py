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


def test_rates_and_targets_change_what_was_measured_the_stated_load_does_not():
    import hashlib
    import json

    base = TuneSettings(concurrency=[1, 2])
    # A state written before rates and targets existed resumes: its fingerprint is the one computed then.
    before = base.model_dump(mode="json", exclude={"budget_s", "candidates", "launch_timeout_s", "load_concurrency",
                                                  "load_request_rate", "request_rates", "slo_tpot_ms", "slo_ttft_ms"})
    assert base.fingerprint() == "sha256:" + hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    assert TuneSettings(concurrency=[1, 2], load_concurrency=2, load_request_rate=4.0).fingerprint() == base.fingerprint()
    assert len({base.fingerprint(), TuneSettings(concurrency=[1, 2], request_rates=[1.0]).fingerprint(),
                TuneSettings(concurrency=[1, 2], slo_tpot_ms=50).fingerprint()}) == 3


def test_request_rates_parse_or_say_what_is_wrong():
    from specplug.tune.settings import parse_rates

    assert parse_rates("4, 1,2,1") == [1.0, 2.0, 4.0] and parse_rates(None) == [] and parse_rates("0.5") == [0.5]
    for bad, said in (("1,fast", "'fast' is not a number"), ("-1", "not a rate above 0"), ("nan", "not a rate")):
        with pytest.raises(SpecplugError, match=said):
            parse_rates(bad)
