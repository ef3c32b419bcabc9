"""The foundation commands as a user types them: output formats, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml


def test_version(run_cli):
    r = run_cli("--version")
    assert r.exit_code == 0 and "specplug" in r.stdout


def test_models_show_json(run_cli):
    r = run_cli("models", "show", "llama-3.1-70b", "--output", "json")
    assert r.exit_code == 0
    data = r.json()
    assert data["num_layers"] == 80 and data["vocab_size"] == 128256
    assert any(d["method"] == "draft_model" for d in data["known_drafters"])


def test_models_show_table_and_yaml(run_cli):
    r = run_cli("models", "show", "vicuna-7b")
    assert r.exit_code == 0 and "lmsys/vicuna-7b-v1.3" in r.stdout and "known drafters" in r.stdout
    y = run_cli("models", "show", "vicuna-7b", "--output", "yaml")
    assert yaml.safe_load(y.stdout)["hf_id"] == "lmsys/vicuna-7b-v1.3"


def test_models_list_and_search(run_cli):
    r = run_cli("models", "list", "--output", "json")
    assert len(r.json()) >= 40
    s = run_cli("models", "search", "deepseek", "--output", "json")
    assert {m["hf_id"] for m in s.json()} >= {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"}


def test_unknown_model_is_exit_1_with_suggestion(run_cli):
    r = run_cli("models", "show", "llama-3.1-7b")
    assert r.exit_code == 1
    assert "Unknown model" in r.stderr and "Did you mean" in r.stderr and "Traceback" not in r.stderr


def test_gpus_list_and_show(run_cli):
    r = run_cli("gpus", "--output", "json")
    assert any(g["name"] == "H200" for g in r.json())
    one = run_cli("gpus", "h100", "--output", "json")
    assert one.json()["memory_gb"] == 80
    bad = run_cli("gpus", "h1000")
    assert bad.exit_code == 1 and "Unknown GPU" in bad.stderr


def test_probe_on_this_machine_exits_0(run_cli):
    r = run_cli("probe", "--output", "json")
    assert r.exit_code == 0
    data = r.json()
    assert isinstance(data["available"], bool) and data["message"]


def test_usage_error_is_exit_2(run_cli):
    assert run_cli("models", "show").exit_code == 2
    assert run_cli("probe", "--output", "xml").exit_code == 2
    assert run_cli("nosuchcommand").exit_code == 2


def test_init_writes_a_valid_commented_file_and_refuses_to_overwrite(run_cli, tmp_path):
    r = run_cli("init", "--model", "llama-3.1-70b", "--stack", "sglang", "--gpu", "h100", "--num-gpus", "4")
    assert r.exit_code == 0
    text = (tmp_path / "specplug.yaml").read_text()
    assert text.count("#") > 5
    from specplug.config import parse_config

    cfg = parse_config(text)
    assert cfg.model == "llama-3.1-70b" and cfg.stack.name == "sglang" and cfg.hardware.num_gpus == 4
    again = run_cli("init", "--model", "qwen3-8b")
    assert again.exit_code == 1 and "--force" in again.stderr
    assert parse_config((tmp_path / "specplug.yaml").read_text()).model == "llama-3.1-70b"
    forced = run_cli("init", "--model", "qwen3-8b", "--force")
    assert forced.exit_code == 0 and parse_config((tmp_path / "specplug.yaml").read_text()).model == "qwen3-8b"


def test_init_rejects_unknown_model_and_writes_nothing(run_cli, tmp_path):
    r = run_cli("init", "--model", "not-a-model-xyz")
    assert r.exit_code == 1 and not (tmp_path / "specplug.yaml").exists()


def test_schema_is_json_and_validates_examples(run_cli):
    import pathlib

    import jsonschema

    r = run_cli("schema")
    schema = json.loads(r.stdout)
    repo = pathlib.Path(__file__).resolve().parents[2]
    files = [p for p in (repo / "examples").rglob("specplug.yaml")]
    for f in files:
        jsonschema.validate(yaml.safe_load(f.read_text()), schema)
    # and an init-written file validates too
    run_cli("init", "--model", "qwen3-8b", "--force")
    jsonschema.validate(yaml.safe_load(pathlib.Path("specplug.yaml").read_text()), schema)


def test_importing_the_cli_does_not_import_heavy_modules():
    code = (
        "import sys, specplug.cli, specplug.config, specplug.catalog, specplug.probe\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'sglang', 'tensorrt_llm', 'numpy', 'scipy') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_console_script_runs_from_any_folder(tmp_path):
    exe = __import__("shutil").which("specplug") or str(__import__("pathlib").Path(sys.executable).parent / "specplug")
    out = subprocess.run([exe, "models", "show", "qwen3-8b", "--output", "json"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["hf_id"] == "Qwen/Qwen3-8B"


def test_every_listed_command_loads_and_has_help(run_cli):
    from specplug.cli import COMMANDS, HELP

    assert set(COMMANDS) == set(HELP)
    listing = run_cli("--help")
    for name in COMMANDS:
        assert name in listing.stdout
        r = run_cli(name, "--help")
        assert r.exit_code == 0 and "Usage:" in r.stdout, name


# Commands whose data is printed in the three forms (the README: every command that prints data takes --output).
PRINTS_DATA = ["recommend", "estimate", "render", "check", "deploy", "migrate", "calibrate", "stacks", "policy show",
               "models show", "gpus", "probe", "schema", "generate", "bench", "verify", "tune"]


@pytest.mark.parametrize("command", PRINTS_DATA)
def test_every_command_that_prints_data_takes_output(run_cli, command):
    r = run_cli(*command.split(), "--help")
    assert r.exit_code == 0 and "--output [table|json|yaml]" in r.stdout, r.stdout


RENDER = ("render", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100", "--stack-version", "0.32.0")


def test_render_prints_with_output_and_keeps_format_as_a_deprecated_alias(run_cli):
    spec = run_cli(*RENDER, "--output", "json")
    assert spec.exit_code == 0 and spec.json()["argv"][:2] == ["vllm", "serve"] and not spec.stderr
    old = run_cli(*RENDER, "--format", "json")
    assert old.json() == spec.json() and "--format is deprecated; use --output json" in old.stderr
    as_yaml = yaml.safe_load(run_cli(*RENDER, "--output", "yaml").stdout)
    assert as_yaml["argv"] == spec.json()["argv"]  # the same spec (its inputs_hash names the format it was asked in)
    script = run_cli(*RENDER)
    assert script.stdout.startswith("#!") and run_cli(*RENDER, "--output", "table").stdout == script.stdout
    assert run_cli(*RENDER, "--format", "shell").stdout == script.stdout
    assert "--format" not in run_cli("render", "--help").stdout


def test_schema_migrate_and_deploy_print_data_as_asked(run_cli, tmp_path):
    keys = run_cli("schema", "--output", "table")
    assert keys.exit_code == 0 and "serve" in keys.stdout and "Schema version of this file." in keys.stdout
    assert yaml.safe_load(run_cli("schema", "--output", "yaml").stdout) == run_cli("schema").json()
    run_cli("init", "--model", "llama-3.1-8b", "--stack-version", "0.32.0", "--gpu", "h100")
    mig = run_cli("migrate", "--output", "json")
    assert mig.exit_code == 0 and mig.json()["changed"] is False and mig.json()["changes"] == []
    dep = run_cli("deploy", "-o", "out", "--output", "json")
    assert dep.exit_code == 0, dep.stderr
    written = dep.json()["written"]
    assert "out/docker-compose.yaml" in written and all((tmp_path / w).is_file() for w in written)
