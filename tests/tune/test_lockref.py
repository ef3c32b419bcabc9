"""The lock made from a tune: its tune reference, and when that evidence is older than the inputs."""

from __future__ import annotations

import json

from specplug.config import load_config
from specplug.lock import write_lock
from specplug.tune.lockref import attach, make_ref, measured_inputs, measured_spec, read_ref, tune_findings

CONFIG = """model: qwen3-8b
stack: {name: vllm, version: 0.10.2}
hardware: {gpu: h100, num_gpus: 1}
speculation:
  method: ngram
  num_speculative_tokens: 3
serve: {port: 9000}
"""


def _tuned(tmp_path):
    cfg_path = tmp_path / "specplug.yaml"
    cfg_path.write_text(CONFIG)
    cfg = load_config(cfg_path)
    _, lock_path, _ = write_lock(cfg_path)
    ev = tmp_path / "tune-out" / "tune.json"
    ev.parent.mkdir()
    inputs = measured_inputs(cfg, cfg_path)
    ev.write_text(json.dumps({"kind": "specplug-tune", "inputs": inputs}))
    spec = cfg.speculation.model_dump(mode="json", exclude_none=True)
    ref = make_ref(ev, lock_path, inputs, "vllm", "0.10.2", "2026-01-01T00:00:00+00:00", spec)
    before = lock_path.read_text()
    attach(lock_path, ref)
    return cfg_path, lock_path, ev, before


def test_fresh_tune_evidence_has_no_findings_and_the_lock_still_reads(tmp_path):
    from specplug.check import check

    cfg_path, lock_path, _, before = _tuned(tmp_path)
    text = lock_path.read_text()
    assert text.startswith(before.rstrip("\n")) and "\ntune:\n" in text and "evidence: tune-out/tune.json" in text
    assert read_ref(lock_path).stack_version == "0.10.2"
    assert tune_findings(load_config(cfg_path), cfg_path, lock_path, "0.10.2") == []
    assert check(cfg_path).ok  # the section does not disturb the lock's other readers


def test_a_changed_input_makes_the_evidence_stale(tmp_path):
    cfg_path, lock_path, _, _ = _tuned(tmp_path)
    cfg_path.write_text(CONFIG.replace("port: 9000", "port: 9000, max_model_len: 4096"))
    (f,) = tune_findings(load_config(cfg_path), cfg_path, lock_path, "0.10.2")
    assert f.severity == "problem" and "older than the inputs" in f.message
    assert "serve.max_model_len" in f.message and "serve.port" not in f.message


def test_where_the_server_listens_and_the_fallback_do_not_make_the_evidence_stale(tmp_path):
    cfg_path, lock_path, _, _ = _tuned(tmp_path)
    cfg_path.write_text(CONFIG.replace("port: 9000", "port: 9001, host: 0.0.0.0, api_key_env: MY_KEY")
                        + "fallback: embedded\n")
    assert tune_findings(load_config(cfg_path), cfg_path, lock_path, "0.10.2") == []


def test_fields_at_their_default_are_not_part_of_the_inputs(tmp_path):
    # So a field a later specplug adds (at its default) leaves older evidence standing.
    cfg_path, lock_path, _, _ = _tuned(tmp_path)
    spec = measured_spec(load_config(cfg_path))
    assert spec["model"] == "qwen3-8b" and "dtype" not in spec.get("serve", {}) and "policy" not in spec
    cfg_path.write_text(CONFIG.replace("port: 9000", "port: 9000, dtype: auto, kv_cache_dtype: auto"))
    assert tune_findings(load_config(cfg_path), cfg_path, lock_path, "0.10.2") == []


def test_what_tune_writes_is_not_staleness_but_a_hand_edit_is_flagged(tmp_path):
    cfg_path, lock_path, _, _ = _tuned(tmp_path)
    cfg_path.write_text(CONFIG.replace("num_speculative_tokens: 3", "num_speculative_tokens: 5"))
    (f,) = tune_findings(load_config(cfg_path), cfg_path, lock_path, "0.10.2")
    assert f.severity == "warning" and f.key == "speculation"


def test_edited_or_missing_evidence_and_another_stack_version(tmp_path):
    cfg_path, lock_path, ev, _ = _tuned(tmp_path)
    cfg = load_config(cfg_path)
    (f,) = tune_findings(cfg, cfg_path, lock_path, "0.11.0")
    assert "tune measured 0.10.2" in f.message
    ev.write_text(ev.read_text() + " ")
    (f,) = tune_findings(cfg, cfg_path, lock_path, "0.10.2")
    assert "tune.json changed" in f.message
    ev.unlink()
    (f,) = tune_findings(cfg, cfg_path, lock_path, "0.10.2")
    assert "is missing" in f.message
