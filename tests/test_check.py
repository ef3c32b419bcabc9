"""specplug check as CI runs it: schema, drift, compatibility and stale renders, with exit codes 0/1/2."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

INIT = ("init", "--model", "llama-3.1-70b", "--stack", "vllm", "--stack-version", "0.10.2", "--gpu", "h100", "--num-gpus", "4")


def git(tmp_path, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_done_means_flow_in_a_scratch_repo(run_cli, tmp_path):
    git(tmp_path, "init", "-q")
    assert run_cli(*INIT).exit_code == 0
    assert run_cli("plan").exit_code == 0
    assert run_cli("deploy", "-o", "deploy").exit_code == 0
    ok = run_cli("check", "--rendered", "deploy")
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "serving config")

    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(cfg.read_text().replace("concurrency: 1", "concurrency: 48"))
    r = run_cli("check", "--rendered", "deploy")
    assert r.exit_code == 1
    assert "specplug.yaml:" in r.stdout and "drift: workload.concurrency" in r.stdout
    assert "planned with 1" in r.stdout and "specplug plan" in r.stdout
    line = int(r.stdout.split("specplug.yaml:")[1].split(":")[0])
    assert cfg.read_text().splitlines()[line - 1].strip().startswith("concurrency: 48")

    assert run_cli("plan").exit_code == 0
    # Re-planned but not re-rendered: the deploy files are stale, and check lists them.
    r = run_cli("check", "--rendered", "deploy")
    assert r.exit_code == 1 and "stale" in r.stdout and "deploy/specplug.rendered.yaml" in r.stdout
    assert "specplug deploy" in r.stdout
    assert run_cli("deploy", "-o", "deploy").exit_code == 0
    r = run_cli("check", "--rendered", "deploy")
    assert r.exit_code == 0, r.stdout
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "re-plan for 48 concurrent requests")
    assert git(tmp_path, "status", "--porcelain").stdout == ""


def test_hand_edited_and_deleted_renders_are_listed(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")
    run_cli("deploy", "-o", "out")
    dep = tmp_path / "out/k8s/deployment.yaml"
    dep.write_text(dep.read_text().replace("nvidia.com/gpu: 4", "nvidia.com/gpu: 2"))
    (tmp_path / "out/k8s/service.yaml").unlink()
    r = run_cli("check", "--rendered", "out", "--format", "json")
    assert r.exit_code == 1
    problems = {(p["kind"], p["file"]) for p in r.json()["problems"]}
    assert ("stale", "out/k8s/deployment.yaml") in problems and ("stale", "out/k8s/service.yaml") in problems


def test_launch_script_folder_from_render_is_compared(run_cli, tmp_path):
    from specplug.lock import read_lock
    from specplug.rendering import render_plan, write_rendered

    run_cli(*INIT)
    run_cli("plan")
    plan = read_lock(tmp_path / "specplug.lock.yaml").plan
    write_rendered(render_plan(plan), tmp_path / "launch")
    assert run_cli("check", "--rendered", "launch").exit_code == 0
    script = tmp_path / "launch/launch-vllm.sh"
    script.write_text(script.read_text().replace("--port 8000", "--port 8001"))
    r = run_cli("check", "--rendered", "launch")
    assert r.exit_code == 1 and "launch/launch-vllm.sh" in r.stdout and "specplug render vllm" in r.stdout


def test_missing_lock_and_bad_schema_are_problems(run_cli, tmp_path):
    run_cli(*INIT)
    r = run_cli("check")
    assert r.exit_code == 1 and "specplug.lock.yaml: lock: missing" in r.stdout
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(cfg.read_text().replace("workload:", "workloads:"))
    r = run_cli("check")
    assert r.exit_code == 1 and "schema" in r.stdout and "Did you mean 'workload'" in r.stdout


def test_usage_errors_exit_2(run_cli, tmp_path):
    r = run_cli("check")
    assert r.exit_code == 2 and "specplug init" in r.stderr
    run_cli(*INIT)
    r = run_cli("check", "--rendered", "nowhere")
    assert r.exit_code == 2 and "nowhere" in r.stderr


def _edit_lock(tmp_path, fn):
    p = tmp_path / "specplug.lock.yaml"
    data = yaml.safe_load(p.read_text())
    fn(data)
    p.write_text(yaml.safe_dump(data, sort_keys=False))


def test_compat_unsupported_method_and_memory(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")

    def break_it(d):
        d["plan"]["stack"]["version"] = "0.5.0"  # long before vLLM had EAGLE-3
        d["plan"]["speculation"].update(method="eagle3", drafter="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B")
        d["plan"]["memory"]["fits"] = False
        d["plan"]["memory"]["hint"] = "use 8 GPUs"

    _edit_lock(tmp_path, break_it)
    r = run_cli("check", "--format", "json")
    assert r.exit_code == 1
    kinds = [(p["kind"], p["key"]) for p in r.json()["problems"]]
    assert ("compat", "stack.version") in kinds and ("compat", "hardware") in kinds
    fixes = json.dumps(r.json())
    assert "use 8 GPUs" in fixes


def test_compat_tokenizer_mismatch(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")

    def mismatch(d):
        d["plan"]["speculation"].update(method="draft_model", drafter="Qwen/Qwen2.5-0.5B-Instruct", num_speculative_tokens=3)

    _edit_lock(tmp_path, mismatch)
    r = run_cli("check")
    assert r.exit_code == 1 and "cannot draft for meta-llama/Llama-3.1-70B-Instruct" in r.stdout
    assert "different tokenizers" in r.stdout
