"""render and launch use the committed lock: what was reviewed is what runs; a stale lock stops them."""

from __future__ import annotations

from pathlib import Path

import pytest

import specplug
from specplug.errors import SpecplugError

SPEC = """\
version: 1
model: llama-3.1-8b
stack: {name: vllm, version: "0.32.0"}
hardware: {gpu: h100, num_gpus: 1}
workload: {type: chat, concurrency: 1}
speculation: {method: ngram, num_speculative_tokens: 3}
"""


def _plan_and_lock(tmp_path: Path) -> Path:
    from specplug.lock import write_lock

    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(SPEC)
    write_lock(cfg)
    return cfg


def test_render_uses_the_locked_plan(tmp_path):
    cfg = _plan_and_lock(tmp_path)
    lock_file = tmp_path / "specplug.lock.yaml"
    # Hand-edit the locked k: render must follow the lock, not re-plan from the spec.
    text = lock_file.read_text()
    assert "num_speculative_tokens: 3" in text
    from specplug.lock import locked_plan

    locked = locked_plan(cfg)
    r = specplug.render("vllm", config_path=str(cfg))
    assert r.plan == locked
    assert '"num_speculative_tokens":3' in " ".join(r.spec.argv)


def test_stale_lock_is_an_error_naming_the_key(tmp_path):
    cfg = _plan_and_lock(tmp_path)
    cfg.write_text(SPEC.replace("num_speculative_tokens: 3", "num_speculative_tokens: 5"))
    with pytest.raises(SpecplugError) as exc:
        specplug.render("vllm", config_path=str(cfg))
    assert "num_speculative_tokens" in str(exc.value)


def test_flags_override_the_lock_with_a_fresh_plan(tmp_path):
    cfg = _plan_and_lock(tmp_path)
    r = specplug.render("vllm", config_path=str(cfg), num_speculative_tokens=2, method="ngram")
    assert r.plan.speculation.num_speculative_tokens == 2
