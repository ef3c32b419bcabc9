"""Every command follows the README's exit code rule: 0 ok, 1 a problem the user can fix (a missing config, an
unknown model, a dry run whose checks would fail), 2 a usage error (a flag value the option refuses).

One row per command and case, run in a folder holding a planned specplug.yaml. A case a command has no way to
meet (no config option, no model) is left out of its row rather than faked.
"""

from __future__ import annotations

import json

import pytest

INIT = ("init", "--model", "llama-3.1-8b", "--stack", "vllm", "--stack-version", "0.32.0", "--gpu", "h100")
UNKNOWN = "no-such-model-xyz"
BAD_CONFIG = f"version: 1\nmodel: {UNKNOWN}\nstack: {{name: vllm, version: \"0.32.0\"}}\nhardware: {{gpu: h100}}\n"
PLANNED = ("--model", "llama-3.1-8b", "--gpu", "h100")


def _vllm_result() -> dict:
    """A 'vllm bench serve --save-result' file: the server drafted 8 tokens per step."""
    return {
        "backend": "vllm", "model_id": "llama-3.1-8b", "num_prompts": 4, "max_concurrency": 1, "duration": 4.0,
        "completed": 4, "failed": 0, "total_output_tokens": 40, "output_throughput": 10.0,
        "median_ttft_ms": 250.0, "median_tpot_ms": 80.0, "spec_decode_num_drafts": 5,
        "spec_decode_draft_tokens": 40, "spec_decode_accepted_tokens": 10,
    }


# command -> {case: argv}; "success" runs in the planned folder, "missing config" points -c at no file, "unknown
# model" names one no catalog or hub knows (or a config that does).
CASES: dict[str, dict[str, tuple[str, ...]]] = {
    "recommend": {
        "success": ("recommend", *PLANNED),
        "bad flag value": ("recommend", *PLANNED, "--batch-size", "0"),
        "missing config": ("recommend", "-c", "nope.yaml"),
        "unknown model": ("recommend", "--model", UNKNOWN, "--gpu", "h100"),
    },
    "estimate": {
        "success": ("estimate", *PLANNED, "--method", "ngram"),
        "bad flag value": ("estimate", *PLANNED, "--method", "ngram", "-k", "0"),
        "unknown model": ("estimate", "--model", UNKNOWN, "--gpu", "h100", "--method", "ngram"),
    },
    "init": {
        "success": ("init", "--model", "llama-3.1-8b", "--stack-version", "0.32.0", "-f", "other.yaml"),
        "bad flag value": ("init", "--model", "llama-3.1-8b", "--num-gpus", "0", "-f", "other.yaml"),
        "unknown model": ("init", "--model", UNKNOWN, "-f", "other.yaml"),
    },
    "plan": {
        "success": ("plan",),
        "bad flag value": ("plan", "-c", "."),  # a folder where a file belongs
        "missing config": ("plan", "-c", "nope.yaml"),
        "unknown model": ("plan", "-c", "bad/specplug.yaml"),
    },
    "render": {
        "success": ("render", "vllm"),
        "bad flag value": ("render", "vllm", "--output", "shell"),
        "missing config": ("render", "vllm", "-c", "nope.yaml"),
        "unknown model": ("render", "vllm", "--model", UNKNOWN),
    },
    "launch": {
        "bad flag value": ("launch", "vllm", "--dry-run", "--timeout", "0"),
        "missing config": ("launch", "vllm", "--dry-run", "-c", "nope.yaml"),
        "unknown model": ("launch", "vllm", "--dry-run", "--model", UNKNOWN),
    },
    "deploy": {
        "success": ("deploy", "-o", "deploy"),
        "bad flag value": ("deploy", "-o", "deploy", "--target", "swarm"),
        "missing config": ("deploy", "-o", "deploy", "-c", "nope.yaml"),
        "unknown model": ("deploy", "-o", "deploy", "-c", "bad/specplug.yaml"),
    },
    "check": {
        "success": ("check",),
        "bad flag value": ("check", "--output", "text"),
        "missing config": ("check", "-c", "nope.yaml"),
        "unknown model": ("check", "-c", "bad/specplug.yaml"),
    },
    "migrate": {
        "success": ("migrate",),
        "bad flag value": ("migrate", "--output", "diff"),
        "missing config": ("migrate", "-c", "nope.yaml"),
    },
    "calibrate": {
        "success": ("calibrate", "--from", "result.json", "--model", "llama-3.1-8b", "--method", "eagle3",
                    "--workload", "chat", "--gpu", "h100"),
        "bad flag value": ("calibrate", "--from", "result.json", "--model", "llama-3.1-8b", "--method", "eagle3",
                           "--workload", "poetry"),
        "unknown model": ("calibrate", "--from", "result.json", "--model", UNKNOWN, "--method", "eagle3",
                          "--workload", "chat"),
    },
    "policy": {
        "success": ("policy", "show"),
        "bad flag value": ("policy", "show", "--output", "html"),
        "missing config": ("policy", "show", "-c", "nope.yaml"),
    },
    "stacks": {
        "success": ("stacks",),
        "bad flag value": ("stacks", "--output", "html"),
    },
    "schema": {
        "success": ("schema",),
        "bad flag value": ("schema", "--output", "html"),
    },
    "models": {
        "success": ("models", "show", "llama-3.1-8b"),
        "bad flag value": ("models", "show", "llama-3.1-8b", "--output", "html"),
        "unknown model": ("models", "show", UNKNOWN),
    },
    "gpus": {
        "success": ("gpus",),
        "bad flag value": ("gpus", "--output", "html"),
    },
    "probe": {
        "success": ("probe",),
        "bad flag value": ("probe", "--output", "html"),
    },
    "generate": {
        "bad flag value": ("generate", "-k", "0", "--prompt", "x"),
    },
    "tune": {
        "missing config": ("tune", "-c", "nope.yaml"),
    },
}
EXPECTED = {"success": 0, "bad flag value": 2, "missing config": 1, "unknown model": 1}
ROWS = [(cmd, case, argv) for cmd, cases in CASES.items() for case, argv in cases.items()]


@pytest.fixture
def project(run_cli, tmp_path):
    assert run_cli(*INIT).exit_code == 0
    assert run_cli("plan").exit_code == 0
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "specplug.yaml").write_text(BAD_CONFIG, encoding="utf-8")
    (tmp_path / "result.json").write_text(json.dumps(_vllm_result()), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("cmd,case,argv", ROWS, ids=[f"{c}-{k.replace(' ', '-')}" for c, k, _ in ROWS])
def test_exit_code(run_cli, project, cmd, case, argv):
    res = run_cli(*argv)
    text = res.stdout + res.stderr
    assert res.exit_code == EXPECTED[case], f"specplug {' '.join(argv)} exited {res.exit_code}:\n{text}"
    assert "Traceback" not in text and "Internal error" not in text, text
    if case == "missing config":
        assert "nope.yaml" in res.stderr  # the file it looked for, named
    if case == "unknown model":
        assert UNKNOWN in res.stderr or UNKNOWN in res.stdout


def test_every_command_has_a_row():
    from specplug.cli import COMMANDS

    # bench and verify need a live endpoint for anything past their option checks (tests/bench covers those).
    assert set(COMMANDS) - set(CASES) == {"bench", "verify"}


def test_a_dry_run_whose_checks_would_fail_exits_1_and_one_that_passes_exits_0(run_cli, project, monkeypatch):
    from specplug.stacks.registry import get_adapter

    monkeypatch.setattr(type(get_adapter("vllm")), "installed_version", lambda self: None)
    res = run_cli("launch", "vllm", "--dry-run")
    assert res.exit_code == 1, res.stdout + res.stderr
    assert "would fail: vLLM is not installed here." in res.stdout and "dry run: nothing started." in res.stdout
    embedded = get_adapter("embedded")
    if embedded.installed_version() is None:
        pytest.skip("the embedded runtime's extra (torch, transformers, fastapi, uvicorn) is not installed")
    ok = run_cli("launch", "embedded", "--model", "smollm2-135m", "--dry-run", "--shutdown-grace", "30")
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert "would fail" not in ok.stdout
    command = next(ln for ln in ok.stdout.splitlines() if ln.startswith("command: "))
    assert command.endswith("--shutdown-grace 30")  # the drain grace reaches the server's own flag


def test_calibrate_takes_the_stack_from_the_report_and_labels_the_k_the_server_ran(run_cli, project):
    res = run_cli(*CASES["calibrate"]["success"], "-k", "5", "--output", "json")
    assert res.exit_code == 0, res.stderr
    rep = res.json()
    assert rep["stack"] == "vllm"  # from "backend": "vllm", without --stack
    assert rep["num_speculative_tokens"] == 8 and rep["entry"]["num_speculative_tokens"] == 8  # 40 tokens / 5 drafts
    assert any("more than -k 5" in n for n in rep["notes"])


def test_calibrate_asks_once_for_all_the_report_leaves_out(run_cli, project):
    data = json.loads((project / "result.json").read_text())
    data["backend"] = "openai-chat"  # an API, not a stack: says nothing about the server
    (project / "result.json").write_text(json.dumps(data), encoding="utf-8")
    res = run_cli("calibrate", "--from", "result.json", "--model", "llama-3.1-8b", "--method", "eagle3")
    assert res.exit_code == 1
    assert "--workload" in res.stderr and "--stack" in res.stderr  # both in one message, not one per run
