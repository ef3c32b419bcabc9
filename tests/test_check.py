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
    r = run_cli("check", "--rendered", "out", "--output", "json")
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


def test_a_missing_config_exits_1_as_in_plan_and_a_missing_rendered_folder_is_a_usage_error(run_cli, tmp_path):
    r = run_cli("check")
    assert r.exit_code == 1 and "specplug init" in r.stderr  # the README's rule: a problem to fix, as plan says it
    assert run_cli("plan").exit_code == 1
    run_cli(*INIT)
    r = run_cli("check", "--rendered", "nowhere")
    assert r.exit_code == 2 and "nowhere" in r.stderr


def test_output_is_the_print_format_and_format_is_a_deprecated_alias(run_cli, tmp_path):
    run_cli(*INIT)
    run_cli("plan")
    new = run_cli("check", "--output", "json")
    old = run_cli("check", "--format", "json")
    assert new.exit_code == old.exit_code == 0 and new.json() == old.json() and new.json()["ok"] is True
    assert "--format is deprecated; use --output json" in old.stderr and "deprecated" not in new.stderr
    as_yaml = run_cli("check", "--output", "yaml")
    assert yaml.safe_load(as_yaml.stdout) == new.json()
    assert run_cli("check", "--format", "text").stdout == run_cli("check").stdout
    assert "--format" not in run_cli("check", "--help").stdout  # hidden: --output is the one to learn
    clash = run_cli("check", "--format", "text", "--output", "json")
    assert clash.exit_code == 2 and "contradicts" in clash.stderr


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
    r = run_cli("check", "--output", "json")
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


# Without a lock, check runs what 'specplug plan' runs: a config plan refuses is reported with plan's reasons,
# not only as "lock missing". name -> (specplug.yaml, a (kind, key) check must report, text of plan's message)
HEAD = 'version: 1\nmodel: llama-3.1-70b\nstack: {name: vllm, version: "0.32.0"}\nhardware: {gpu: h100, num_gpus: 4}\n'
UNPLANNABLE = {
    "empty-file": ("", ("plan", None), "No model given"),
    "eagle-k0": (
        HEAD + "speculation: {method: eagle, drafter: yuhuili/EAGLE-LLaMA3.1-Instruct-70B, num_speculative_tokens: 0}\n",
        ("plan", "speculation.num_speculative_tokens"),
        "'eagle' with num_speculative_tokens=0",
    ),
    "drafter-of-another-vocabulary": (
        # vLLM drafts across vocabularies with greedy drafts (use_heterogeneous_vocab): not with sampled ones.
        HEAD + "speculation: {method: draft_model, drafter: Qwen/Qwen2.5-0.5B-Instruct, num_speculative_tokens: 4, "
        "draft_sampling: probabilistic}\n",
        ("plan", "speculation.draft_sampling"),
        "cannot draft for meta-llama/Llama-3.1-70B-Instruct",
    ),
}


@pytest.mark.parametrize("name", sorted(UNPLANNABLE))
def test_without_a_lock_check_reports_what_plan_refuses(run_cli, tmp_path, name):
    text, kind_key, needle = UNPLANNABLE[name]
    (tmp_path / "specplug.yaml").write_text(text, encoding="utf-8")
    planned = run_cli("plan")
    assert planned.exit_code == 1 and needle in planned.stderr, planned.stderr
    r = run_cli("check")
    assert r.exit_code == 1, r.stdout + r.stderr
    assert needle in r.stdout and "lock: missing" in r.stdout, r.stdout
    assert "Internal error" not in r.stdout + r.stderr
    r = run_cli("check", "--output", "json")
    problems = r.json()["problems"]
    assert kind_key in [(p["kind"], p["key"]) for p in problems]
    assert problems[-1]["kind"] == "lock" and "fix the problem(s) above" in problems[-1]["fix"]


def test_without_a_lock_a_plannable_config_is_only_missing_its_lock(run_cli, tmp_path):
    run_cli(*INIT)
    r = run_cli("check", "--output", "json")
    assert r.exit_code == 1
    assert [(p["kind"], p["fix"]) for p in r.json()["problems"]] == [("lock", "specplug plan -c specplug.yaml")]


def test_drift_names_only_what_changed_and_reads_as_a_sentence(run_cli, tmp_path):
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(HEAD + "speculation: auto\n", encoding="utf-8")
    assert run_cli("plan").exit_code == 0
    cfg.write_text(HEAD + "speculation: {method: ngram, num_speculative_tokens: 4}\n", encoding="utf-8")
    r = run_cli("check", "--output", "json")
    assert r.exit_code == 1
    drift = [p for p in r.json()["problems"] if p["kind"] == "drift"]
    # One line for the key that changed (auto became a mapping), none for its unset members (null on both sides).
    assert [(p["key"], p["message"]) for p in drift] == [
        ("speculation", 'is {"method": "ngram", "num_speculative_tokens": 4} but the lock was planned with "auto"')
    ]
    r = run_cli("check")
    assert "null" not in r.stdout, r.stdout


def test_spec_changes_never_reports_equal_values():
    from specplug.lock import spec_changes

    old = {"serve": {"port": 8000, "max_num_seqs": None, "env": {}}, "speculation": "auto"}
    new = {"serve": {"port": 8000, "env": {"A": None}}, "speculation": "auto", "added_default": None}
    assert spec_changes(old, new) == []
    assert spec_changes(old, {**new, "serve": {"port": 8001}}) == [("serve.port", 8000, 8001)]
    assert spec_changes({"a": {"b": 1}}, {"a": None}) == [("a", {"b": 1}, None)]


def test_drift_in_unset_keys_alone_is_one_line_about_the_lock(run_cli, tmp_path):
    from specplug.lock import _digest

    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(HEAD + "speculation: auto\n", encoding="utf-8")
    assert run_cli("plan").exit_code == 0

    def older_spec(d):  # as a lock from a specplug that recorded one more (unset) key
        d["spec"]["serve"]["retired_option"] = None
        d["inputs"]["config"] = _digest(d["spec"])

    _edit_lock(tmp_path, older_spec)
    r = run_cli("check", "--output", "json")
    assert r.exit_code == 1
    drift = [(p["key"], p["message"]) for p in r.json()["problems"] if p["kind"] == "drift"]
    assert len(drift) == 1 and drift[0][0] == "spec" and "nothing set in the config changed" in drift[0][1], drift
