"""specplug plan / specplug.lock.yaml: deterministic, reviewable, and the one plan render and launch use."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specplug.errors import SpecplugError
from specplug.lock import LOCK_NAME, parse_lock, plan_for, read_lock

INIT = ("init", "--model", "llama-3.1-70b", "--stack", "vllm", "--stack-version", "0.10.2", "--gpu", "h100", "--num-gpus", "4")


def test_plan_writes_a_lock_with_plan_inputs_hardware_and_predictions(run_cli, tmp_path):
    assert run_cli(*INIT).exit_code == 0
    r = run_cli("plan")
    assert r.exit_code == 0, r.stderr
    assert "Wrote specplug.lock.yaml" in r.stdout and "predicted" in r.stdout
    text = (tmp_path / LOCK_NAME).read_text()
    data = yaml.safe_load(text)
    assert data["specplug_version"] and data["inputs"]["hash"].startswith("sha256:")
    assert set(data["inputs"]) == {"hash", "config", "policy", "calibration", "catalog", "hardware"}
    assert data["hardware"] == {**data["hardware"], "gpu": "H100-SXM", "num_gpus": 4, "source": "named"}
    assert data["plan"]["stack"]["version"] == "0.10.2"
    assert data["summary"]["predicted_speedup"] == round(data["plan"]["prediction"]["speedup"], 3)
    assert "T" not in data.get("generated", "")  # no timestamps anywhere
    assert parse_lock(text).plan.model.hf_id == "meta-llama/Llama-3.1-70B-Instruct"


def test_same_inputs_give_byte_identical_lock(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")
    first = (tmp_path / LOCK_NAME).read_bytes()
    (tmp_path / LOCK_NAME).unlink()
    run_cli("plan")
    assert (tmp_path / LOCK_NAME).read_bytes() == first
    again = run_cli("plan")
    assert "Unchanged" in again.stdout
    # Comments and key order are not inputs: rewriting them keeps the lock.
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text("# reviewed by infra\n" + cfg.read_text())
    assert run_cli("plan", "--check").exit_code == 0


def test_plan_check_reports_a_lock_that_would_change(run_cli, tmp_path):
    run_cli(*INIT)
    r = run_cli("plan", "--check")
    assert r.exit_code == 1 and "missing" in r.stderr
    run_cli("plan")
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(cfg.read_text().replace("concurrency: 1", "concurrency: 64"))
    r = run_cli("plan", "--check")
    assert r.exit_code == 1 and "out of date" in r.stderr


def test_plan_for_uses_the_lock_and_refuses_a_stale_one(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")
    cfg = tmp_path / "specplug.yaml"
    locked = read_lock(tmp_path / LOCK_NAME).plan
    assert plan_for(cfg) == locked
    # A hand-edited lock plan is what gets used: the lock, not a re-plan, is the source of truth.
    text = (tmp_path / LOCK_NAME).read_text()
    cfg.write_text(cfg.read_text().replace("port: 8000", "port: 9000"))
    with pytest.raises(SpecplugError, match=r"serve.port"):
        plan_for(cfg)
    (tmp_path / LOCK_NAME).write_text(text)
    (tmp_path / LOCK_NAME).unlink()
    assert plan_for(cfg).serve.port == 9000  # no lock: plan on the fly


def test_a_corrupt_or_newer_lock_is_a_clear_error(tmp_path):
    with pytest.raises(SpecplugError, match="Re-create it with 'specplug plan'"):
        parse_lock("lock_version: 1\nplan: 3\n")
    with pytest.raises(SpecplugError, match="newer than this specplug"):
        parse_lock("lock_version: 99\n")


def test_plan_without_config_is_exit_1_with_hint(run_cli):
    r = run_cli("plan")
    assert r.exit_code == 1 and "specplug init" in r.stderr


def test_missing_calibration_file_is_named(run_cli, tmp_path):
    run_cli(*INIT)
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(cfg.read_text() + "calibration: measured.yaml\n")
    r = run_cli("plan")
    assert r.exit_code == 1 and "measured.yaml" in r.stderr
    assert not Path(tmp_path / LOCK_NAME).exists()


def test_a_lock_with_fields_from_a_newer_specplug_reads_and_unknown_values_still_fail(tmp_path) -> None:
    import yaml

    from specplug.errors import ConfigError
    from specplug.lock import parse_lock

    lock = next(Path(__file__).parent.parent.glob("examples/*/specplug.lock.yaml"))
    data = yaml.safe_load(lock.read_text())
    data["added_later"] = {"x": 1}
    data["plan"]["speculation"]["new_knob"] = 3
    parsed = parse_lock(yaml.safe_dump(data))
    assert parsed.plan.speculation.method == yaml.safe_load(lock.read_text())["plan"]["speculation"]["method"]
    data["plan"]["speculation"]["num_speculative_tokens"] = "many"
    with pytest.raises(ConfigError):
        parse_lock(yaml.safe_dump(data))


def test_a_lock_that_kept_the_split_in_serve_reads_with_that_split() -> None:
    # Older locks held tensor/pipeline sizes in plan.serve too, and renders took serve's when it was set.
    lock = Path(__file__).parent.parent / "examples" / "deepseek-v3-mtp-trtllm" / "specplug.lock.yaml"
    data = yaml.safe_load(lock.read_text())
    data["plan"]["serve"].update({"tensor_parallel_size": 4, "pipeline_parallel_size": 2})
    data["plan"]["parallelism"].update({"tensor_parallel_size": 8, "pipeline_parallel_size": 1})
    plan = parse_lock(yaml.safe_dump(data)).plan
    assert (plan.parallelism.tensor_parallel_size, plan.parallelism.pipeline_parallel_size) == (4, 2)
    assert "tensor_parallel_size" not in plan.serve.model_dump()
    # serve's pipeline size wins even when it is the smaller one: that is the split the server ran with.
    data["plan"]["serve"].update({"tensor_parallel_size": 8, "pipeline_parallel_size": 1})
    data["plan"]["parallelism"].update({"tensor_parallel_size": 4, "pipeline_parallel_size": 2})
    plan = parse_lock(yaml.safe_dump(data)).plan
    assert (plan.parallelism.tensor_parallel_size, plan.parallelism.pipeline_parallel_size) == (8, 1)


def test_a_lock_without_a_revision_stays_at_version_1(run_cli, tmp_path):
    assert run_cli(*INIT).exit_code == 0
    assert run_cli("plan").exit_code == 0
    data = yaml.safe_load((tmp_path / LOCK_NAME).read_text())
    assert data["lock_version"] == 1 and "revision" not in data["plan"]["model"]
