"""--traffic on recommend, estimate, plan and calibrate, and traffic drift in specplug check."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from specplug.cli import cli
from tests.traffic import logs


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_recommend_with_traffic(code_edit_log) -> None:
    r = _run("recommend", "--model", "qwen3-8b", "--gpu", "h100", "--num-gpus", "1", "--traffic", str(code_edit_log),
             "--output", "json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["speculation"]["method"] in ("ngram", "suffix")
    if plan.get("traffic") is not None:
        assert plan["traffic"]["digest"].startswith("sha256:") and plan["traffic"]["requests"] == 36


def test_recommend_with_a_field_map(tmp_path) -> None:
    path = logs.write(tmp_path / "custom.jsonl", logs.build("code-edit", 6), "custom")
    r = _run("recommend", "--model", "qwen3-8b", "--gpu", "h100", "--num-gpus", "1", "--traffic", str(path),
             "--traffic-map", "prompt=input.text,completion=output.body", "--output", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["speculation"]["method"] in ("ngram", "suffix")


def test_estimate_with_traffic_moves_copy_acceptance(code_edit_log, chat_log) -> None:
    def tau(path) -> float:
        r = _run("estimate", "--model", "qwen3-8b", "--method", "ngram", "-k", "4", "--gpu", "h100", "--traffic", str(path),
                 "--output", "json")
        assert r.exit_code == 0, r.output
        return json.loads(r.output)["acceptance_length"]

    assert tau(code_edit_log) > tau(chat_log) + 1.0


def test_bad_traffic_file_exits_1_with_the_reason(run_cli, tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": "world"}\n', encoding="utf-8")
    for cmd in (["recommend", "--model", "qwen3-8b", "--gpu", "h100"], ["estimate", "--model", "qwen3-8b", "--method", "ngram", "--gpu", "h100"]):
        r = run_cli(*cmd, "--traffic", str(bad))
        assert r.exit_code == 1
        assert "no usable request" in r.stderr and "Traceback" not in r.stderr
        assert "unrecognised shape" in r.stderr and "--traffic-map" in r.stderr
    # A malformed --traffic-map is a usage error (exit 2), as click gives for a value outside an option's type.
    r = run_cli("recommend", "--model", "qwen3-8b", "--gpu", "h100", "--traffic", str(bad), "--traffic-map", "prompt")
    assert r.exit_code == 2 and "field map" in r.stderr


def _project(tmp_path, log, with_traffic: bool = True):
    shutil.copy(log, tmp_path / "traffic.jsonl")
    cfg = ("model: qwen3-8b\nstack:\n  name: vllm\n  version: 0.11.0\nhardware:\n  gpu: h100\n  num_gpus: 1\n"
           "workload:\n  type: chat\n" + ("  traffic: traffic.jsonl\n" if with_traffic else ""))
    (tmp_path / "specplug.yaml").write_text(cfg, encoding="utf-8")


def test_plan_locks_the_traffic_file_and_check_reports_its_drift(run_cli, tmp_path, code_edit_log) -> None:
    _project(tmp_path, code_edit_log)
    r = run_cli("plan")
    assert r.exit_code == 0, r.stderr
    lock = (tmp_path / "specplug.lock.yaml").read_text(encoding="utf-8")
    assert "traffic_file: traffic.jsonl" in lock and "traffic: sha256:" in lock
    assert str(tmp_path) not in lock  # paths relative to the lock: the same on every checkout
    assert run_cli("plan", "--check").exit_code == 0
    assert run_cli("check").exit_code == 0, run_cli("check").stdout

    with (tmp_path / "traffic.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"prompt": "one more", "completion": "request"}) + "\n")
    r = run_cli("check")
    assert r.exit_code == 1
    assert "traffic.jsonl" in r.stdout and "traffic file changed since the lock was planned" in r.stdout
    assert run_cli("plan", "--check").exit_code == 1
    assert run_cli("plan").exit_code == 0
    assert run_cli("check").exit_code == 0

    (tmp_path / "traffic.jsonl").unlink()
    r = run_cli("check")
    assert r.exit_code == 1 and "missing" in r.stdout


def test_plan_traffic_flag_is_recorded_and_checked(run_cli, tmp_path, code_edit_log) -> None:
    _project(tmp_path, code_edit_log, with_traffic=False)
    assert run_cli("plan", "--traffic", "traffic.jsonl").exit_code == 0
    lock = (tmp_path / "specplug.lock.yaml").read_text(encoding="utf-8")
    assert "traffic_file: traffic.jsonl" in lock
    assert run_cli("check").exit_code == 0
    (tmp_path / "traffic.jsonl").write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n", encoding="utf-8")
    r = run_cli("check")
    assert r.exit_code == 1 and "traffic file changed" in r.stdout


def test_locks_without_traffic_have_no_traffic_keys(run_cli, tmp_path, code_edit_log) -> None:
    _project(tmp_path, code_edit_log, with_traffic=False)
    assert run_cli("plan").exit_code == 0
    assert "traffic" not in (tmp_path / "specplug.lock.yaml").read_text(encoding="utf-8").replace("traffic: null", "")


def test_calibrate_from_traffic_merges_with_bench_entries(run_cli, tmp_path, code_edit_log) -> None:
    import yaml

    cal = tmp_path / "calibration.yaml"
    cal.write_text(yaml.safe_dump({"version": 1, "entries": [
        {"model": "Qwen/Qwen3-8B", "method": "eagle3", "workload": "code-edit", "stack": "vllm", "temperature": 0.0,
         "num_speculative_tokens": 3, "acceptance_length": 2.9},
    ]}), encoding="utf-8")
    r = run_cli("calibrate", "--traffic", str(code_edit_log), "--model", "qwen3-8b", "--gpu", "h100",
                "--workload", "code-edit", "-k", "4", "-o", str(cal), "--output", "json")
    assert r.exit_code == 0, r.stderr
    reports = json.loads(r.stdout)
    assert [x["method"] for x in reports] == ["ngram", "suffix"]
    data = yaml.safe_load(cal.read_text(encoding="utf-8"))
    methods = [e["method"] for e in data["entries"]]
    assert methods == ["eagle3", "ngram", "suffix"]  # the bench entry kept, the replayed ones added
    ng = data["entries"][1]
    assert ng["num_speculative_tokens"] == 4 and ng["acceptance_length"] > 3.0 and len(ng["position_rates"]) == 8
    assert ng["source"].startswith("traffic ") and "stack" not in ng
    # Predicted after = measured: the entry is what estimate now uses.
    assert reports[0]["rows"][0]["after"]["acceptance_length"] == reports[0]["rows"][0]["measured"]["acceptance_length"]
    # The report says how much the outputs copy their prompts: 4-gram overlap and BLEU-4.
    notes = " ".join(reports[-1]["notes"])
    assert "prompt-output BLEU-4" in notes and "of 4-grams" in notes
    # Re-running replaces the replayed entries, not adds to them.
    assert run_cli("calibrate", "--traffic", str(code_edit_log), "--model", "qwen3-8b", "--gpu", "h100",
                   "--workload", "code-edit", "-k", "4", "-o", str(cal)).exit_code == 0
    assert len(yaml.safe_load(cal.read_text(encoding="utf-8"))["entries"]) == 3


def test_calibrate_reports_malformed_lines_by_number(run_cli, tmp_path, code_edit_log) -> None:
    noisy = tmp_path / "noisy.jsonl"
    lines = code_edit_log.read_text(encoding="utf-8").splitlines()
    noisy.write_text("\n".join([lines[0], "{broken", lines[1], "[]", *lines[2:]]) + "\n", encoding="utf-8")
    r = run_cli("calibrate", "--traffic", str(noisy), "--model", "qwen3-8b", "--gpu", "h100", "--workload", "code-edit",
                "-k", "4", "-o", str(tmp_path / "cal.yaml"), "--output", "json")
    assert r.exit_code == 0, r.stderr
    assert "2 malformed lines skipped (lines 2, 4)" in " ".join(json.loads(r.stdout)[-1]["notes"])


def test_calibrate_needs_a_source_and_a_copy_method(run_cli, tmp_path, code_edit_log) -> None:
    r = run_cli("calibrate", "--model", "qwen3-8b")
    assert r.exit_code == 1 and "--traffic" in r.stderr
    r = run_cli("calibrate", "--traffic", str(code_edit_log), "--model", "qwen3-8b", "--method", "eagle3", "-o", str(tmp_path / "c.yaml"))
    assert r.exit_code == 1 and "copy-based" in r.stderr


def test_lock_reads_the_same_from_any_working_folder(run_cli, tmp_path, monkeypatch, code_edit_log) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    _project(proj, code_edit_log)
    assert run_cli("plan", "-c", "proj/specplug.yaml").exit_code == 0
    first = (proj / "specplug.lock.yaml").read_text(encoding="utf-8")
    monkeypatch.chdir(proj)
    r = run_cli("plan")
    assert r.exit_code == 0 and "Unchanged" in r.stdout
    assert (proj / "specplug.lock.yaml").read_text(encoding="utf-8") == first
    assert "proj/" not in first
