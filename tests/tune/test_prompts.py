"""The prompts a tune replays: the user's logged requests, or a built-in workload."""

from __future__ import annotations

import json

import pytest

from specplug.errors import SpecplugError
from specplug.tune.prompts import for_tune, from_traffic


def test_traffic_requests_are_replayed_as_logged(tmp_path):
    log = tmp_path / "logs.jsonl"
    log.write_text("\n".join([
        json.dumps({"request": {"messages": [{"role": "user", "content": "fix the bug in foo()"}]},
                    "response": {"choices": [{"message": {"content": "x" * 400}}]}}),
        "not json",
        json.dumps({"prompt": "summarise this", "completion": "short"}),
    ]) + "\n")
    prompts, label = for_tune(str(log), None, "chat")
    assert label == "traffic logs.jsonl"
    assert [p.prompt for p in prompts] == ["fix the bug in foo()", "summarise this"]
    assert [p.max_tokens for p in prompts] == [100, 16]  # the logged answer's length bounds each request


def test_workload_fallbacks_and_an_unusable_log(tmp_path):
    assert for_tune(None, None, "code")[1] == "workload code"
    assert for_tune(None, None, "math")[1] == "workload chat (no built-in prompts for 'math')"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    with pytest.raises(SpecplugError, match="no usable requests"):
        from_traffic(bad)
