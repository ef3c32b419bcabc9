"""specplug render: CLI and Python API agree; json/shell/yaml output; stamped, atomic files; shell safety."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

import specplug

HOSTILE = ["; rm -rf ~", "$(id)", "a\nb", "x' \"y"]


def test_json_is_the_launch_spec_and_matches_the_python_api(run_cli):
    args = ["render", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100", "--method", "ngram", "-k", "4",
            "--stack-version", "0.32.0", "--format", "json"]
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    data = res.json()
    assert set(data) >= {"argv", "env", "files"}
    api = specplug.render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                          stack_version="0.32.0")
    assert data["argv"] == api.spec.argv
    assert data["argv"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    cfg = json.loads(data["argv"][data["argv"].index("--speculative-config") + 1])
    assert cfg["method"] == "ngram" and cfg["num_speculative_tokens"] == 4
    assert data["argv"][data["argv"].index("--host") + 1] == "127.0.0.1"


def test_output_dir_gets_stamped_executable_script_and_files(run_cli, tmp_path):
    res = run_cli("render", "trtllm", "--model", "llama-3.1-8b", "--gpu", "h100", "--method", "eagle3",
                  "--drafter", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "-k", "3", "--stack-version", "1.2.0",
                  "-o", str(tmp_path / "out"))
    assert res.exit_code == 0, res.stderr
    script = tmp_path / "out" / "launch-trtllm.sh"
    yaml_file = tmp_path / "out" / "trtllm-config.yaml"
    assert script.stat().st_mode & stat.S_IXUSR
    text, ytext = script.read_text(), yaml_file.read_text()
    for t in (text, ytext):
        assert "specplug 0.1.0" in t and "1.2.0" in t and "inputs sha256 " in t
    digest = text.split("inputs sha256 ")[1].split(".")[0]
    assert digest in ytext  # one render, one hash
    assert '--config "$HERE/trtllm-config.yaml"' in text
    assert "decoding_type: Eagle3" in ytext
    subprocess.run(["bash", "-n", str(script)], check=True)  # the script is valid shell


def test_same_inputs_same_hash_different_inputs_different_hash():
    a = specplug.render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                        stack_version="0.32.0")
    b = specplug.render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                        stack_version="0.32.0")
    c = specplug.render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=5,
                        stack_version="0.32.0")
    assert a.inputs_hash == b.inputs_hash != c.inputs_hash


def test_hostile_values_in_the_script_stay_single_words(tmp_path):
    r = specplug.render("vllm", model="llama-3.1-8b", gpu="h100", method="ngram", num_speculative_tokens=4,
                        stack_version="0.32.0", extra_args=HOSTILE, output_dir=str(tmp_path))
    script = Path(r.written[0])
    # Replace exec with a printer: bash then shows exactly the argv the server would get.
    probe = tmp_path / "probe.sh"
    probe.write_text(script.read_text().replace("exec vllm", "printf '%s\\0' vllm"), encoding="utf-8")
    out = subprocess.run(["bash", str(probe)], capture_output=True, check=True, env={"PATH": os.environ["PATH"]})
    argv = out.stdout.decode().split("\0")[:-1]
    assert argv == r.spec.argv
    assert argv[-len(HOSTILE):] == HOSTILE
    assert shlex.split(shlex.join(argv)) == argv


def test_secrets_are_references_never_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "s3cret-value")
    cfg = tmp_path / "specplug.yaml"
    cfg.write_text("model: llama-3.1-8b\nhardware: {gpu: h100}\nserve: {api_key_env: MY_KEY}\n"
                   "speculation: {method: ngram, num_speculative_tokens: 3}\n", encoding="utf-8")
    r = specplug.render("vllm", config_path=str(cfg), stack_version="0.32.0", output_dir=str(tmp_path / "o"))
    blob = r.script + json.dumps(r.launch_spec_dict())
    assert "s3cret-value" not in blob
    assert r.spec.env_from == {"VLLM_API_KEY": "MY_KEY"}
    assert 'export VLLM_API_KEY="${MY_KEY:?' in r.script
    for p in r.written:
        assert "s3cret-value" not in Path(p).read_text()


def test_unsupported_technique_lists_what_works(run_cli):
    res = run_cli("render", "tgi", "--model", "llama-3.1-8b", "--gpu", "h100", "--method", "eagle3",
                  "--drafter", "x/y", "-k", "3", "--stack-version", "3.3.7")
    assert res.exit_code == 1
    assert "cannot run 'eagle3'" in res.stderr
    assert "Supported there: ngram, medusa, mlp_speculator" in res.stderr


def test_unknown_old_version_is_refused_with_the_oldest_known(run_cli):
    res = run_cli("render", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100", "--method", "ngram", "-k", "3",
                  "--stack-version", "0.3.0")
    assert res.exit_code == 1 and "older than any this adapter knows" in res.stderr


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm", "llamacpp", "tgi"])
def test_done_means_dry_run_prints_a_command_for_every_stack(run_cli, stack):
    res = run_cli("launch", stack, "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--dry-run")
    # No stack or GPU here: the dry run says what would stop a start and exits 1, after printing the command.
    assert res.exit_code == 1 and "would fail: " in res.stdout, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("command: "))
    argv = shlex.split(line.removeprefix("command: "))
    assert argv[0] in {"vllm", "sglang", "python3", "trtllm-serve", "llama-server", "text-generation-launcher"}
    assert "dry run: nothing started." in res.stdout
    assert "127.0.0.1" in argv


def test_render_validates_an_explicit_plan_and_writes_nothing(tmp_path):
    from specplug.rendering import render
    from specplug.validate import InvalidPlan
    from tests.adapters.conftest import make_plan

    plan = make_plan("sglang", "0.5.23", method="ngram", k=0, serve={"kv_cache_dtype": "float16"})
    with pytest.raises(InvalidPlan) as exc:
        render("sglang", plan=plan, output_dir=str(tmp_path / "out"))
    assert {p.key for p in exc.value.problems} == {"speculation.num_speculative_tokens", "serve.kv_cache_dtype"}
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("explicit", [False, True])
def test_a_render_checks_its_plan_once(monkeypatch, explicit):
    # Planned from flags (checked where it is made) or given (checked by render): either way, one pass of the checks.
    from specplug import rendering, validate
    from specplug.stacks import base

    calls = {"validate": 0, "adapter": 0}
    plan_problems, problems = validate.plan_problems, base.BaseAdapter.problems

    def counted(plan, *a, **k):
        calls["validate"] += 1
        return plan_problems(plan, *a, **k)

    def counted_adapter(self, plan, version):
        calls["adapter"] += 1
        return problems(self, plan, version)

    monkeypatch.setattr(validate, "plan_problems", counted)
    monkeypatch.setattr(base.BaseAdapter, "problems", counted_adapter)
    kw = dict(model="llama-3.1-8b", gpu="h100", num_gpus=1, stack_version="0.32.0")
    plan = rendering.plan_for_request("vllm", **kw)[0] if explicit else None
    calls.update(validate=0, adapter=0)
    r = rendering.render("vllm", plan=plan, **({} if explicit else kw))
    assert r.spec.argv and calls == {"validate": 1, "adapter": 1}
