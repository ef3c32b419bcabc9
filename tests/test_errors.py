"""Data that fails its schema is reported the same way by every loader: a heading, then each bad key once."""

from __future__ import annotations

import json

import pytest

from specplug.errors import SpecplugError


def _calibration(tmp_path):
    from specplug.policy.calibration import load_calibration

    p = tmp_path / "calibration.yaml"
    p.write_text("entries:\n  - model: m\n    method: ngram\n    temperature: -1\n")
    return lambda: load_calibration(p), f"Invalid calibration file {p}", "entries.0.temperature: Input should be greater"


def _policy(tmp_path):
    from specplug.policy.data import validate

    return lambda: validate({"rules": {"min_speedup": "fast"}}, "test"), "Invalid policy (test)", "rules.min_speedup:"


def _bench(tmp_path):
    from specplug.bench.record import RECORD_KIND, load_record

    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"kind": RECORD_KIND, "runs": "none"}))
    return lambda: load_record(p), f"{p} is damaged", "endpoint: Field required"


def _tune(tmp_path):
    from specplug.tune.evidence import REPORT_KIND, load

    p = tmp_path / "tune.json"
    p.write_text(json.dumps({"kind": REPORT_KIND, "trials": 3}))
    return lambda: load(p), f"{p} is damaged", "trials:"


def _lock(tmp_path):
    from specplug.lock import parse_lock

    return lambda: parse_lock("lock_version: 1\nplan: 3\n", "specplug.lock.yaml"), \
        "specplug.lock.yaml was written by another specplug version or edited", "plan:"


@pytest.mark.parametrize("case", [_calibration, _policy, _bench, _tune, _lock])
def test_a_damaged_file_names_itself_and_each_bad_key(tmp_path, case):
    load, heading, line = case(tmp_path)
    with pytest.raises(SpecplugError) as exc:
        load()
    head, *lines = exc.value.message.split("\n  ")
    assert head == heading + ":"
    assert any(ln.startswith(line) for ln in lines), lines
    assert len(lines) == len(set(lines)) and exc.value.hint
