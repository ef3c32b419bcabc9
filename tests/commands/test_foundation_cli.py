"""The foundation commands as a user types them: output formats, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys

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
