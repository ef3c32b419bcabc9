"""TensorRT-LLM publishes no installable wheel here: every render is checked against the field list per
version recorded from tensorrt_llm/llmapi/llm_args.py (adapters/data/trtllm_fields.yaml, commits cited there)."""

from __future__ import annotations

import shlex

import pytest
import yaml
from specplug.adapters.trtllm import check_against_fields, field_lists

from specplug.rendering import render_plan
from tests.adapters.conftest import make_plan

DRAFTERS = {"draft_model": "x/small", "eagle3": "x/eagle3", "eagle": "x/eagle", "medusa": "x/medusa"}


def test_every_generation_cites_its_source():
    for since, gen in field_lists().items():
        assert "tensorrt_llm/llmapi/llm_args.py" in gen["source"], since
        assert gen["model_key"] in gen["base"]


@pytest.mark.parametrize("version", ["0.17.0", "0.21.0", "1.0.0", "1.1.0", "1.2.0", "1.3.0"])
@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle3", "eagle", "mtp", "medusa", "lookahead"])
def test_rendered_yaml_uses_only_recorded_fields(version, method):
    r = render_plan(make_plan("trtllm", version, method=method, drafter=DRAFTERS.get(method), k=3))
    llm_args = yaml.safe_load(r.spec.files["trtllm-config.yaml"])
    spec = llm_args["speculative_config"]
    backend = r.spec.argv[r.spec.argv.index("--backend") + 1]
    check_against_fields(spec, backend, version)  # raises on any field or type that version lacks
    flag = field_lists()["1.2.0" if version >= "1.2.0" else "0.17.0"]["serve_config_flag"]
    assert flag in r.spec.argv


def test_done_means_trtllm_dry_run_yaml_checks_out(run_cli):
    res = run_cli("launch", "trtllm", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--dry-run")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    argv = shlex.split(next(ln for ln in out.splitlines() if ln.startswith("command: ")).removeprefix("command: "))
    assert argv[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-70B-Instruct"]
    assert argv[argv.index("--tp_size") + 1] == "4"
    body = out.split("file trtllm-config.yaml:\n", 1)
    if len(body) == 2:  # speculation chosen: the YAML is printed, indented
        text = "\n".join(ln[4:] for ln in body[1].splitlines() if ln.startswith("    "))
        spec = yaml.safe_load(text)["speculative_config"]
        check_against_fields(spec, argv[argv.index("--backend") + 1], None)
