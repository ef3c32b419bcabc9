"""Bad input exits 1 with one clear message and what would work, never a traceback, in every command.

Each case is a specplug.yaml in a scratch folder. ``check`` judges a committed lock, so its lock is written from
an explicit plan (the planner itself refuses these inputs).
"""

from __future__ import annotations

import pytest

from tests.adapters.conftest import make_plan

L70 = "meta-llama/Llama-3.1-70B-Instruct"
HEAD = "version: 1\nmodel: llama-3.1-70b\nstack: {name: vllm, version: \"0.32.0\"}\nhardware: {gpu: h100, num_gpus: 4}\n"

# name -> (specplug.yaml body after HEAD, the plan check finds in the lock, text the message must carry, a fix it names)
CASES = {
    # vLLM 0.32.0 drafts across vocabularies with greedy drafts only (use_heterogeneous_vocab): sampled ones are refused.
    "draft-vocab": (
        "speculation: {method: draft_model, drafter: Qwen/Qwen2.5-0.5B-Instruct, num_speculative_tokens: 4, "
        "draft_sampling: probabilistic}\n",
        dict(method="draft_model", drafter="Qwen/Qwen2.5-0.5B-Instruct", k=4, tp=4, draft_sampling="probabilistic"),
        "cannot draft for meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
    ),
    "eagle-k0": (
        "speculation: {method: eagle, drafter: yuhuili/EAGLE-LLaMA3.1-Instruct-70B, num_speculative_tokens: 0}\n",
        dict(method="eagle", drafter="yuhuili/EAGLE-LLaMA3.1-Instruct-70B", k=0, tp=4),
        "'eagle' with num_speculative_tokens=0",
        "1 or more",
    ),
    "tp3": (
        "speculation: {method: ngram, num_speculative_tokens: 3}\nserve: {tensor_parallel_size: 3}\n",
        dict(method="ngram", k=3, tp=3, serve={"tensor_parallel_size": 3}),
        "64 attention heads",
        "1, 2, 4, 8, 16, 32, 64",
    ),
    "quantization": (
        "speculation: {method: ngram, num_speculative_tokens: 3}\nserve: {quantization: int4-awq}\n",
        dict(method="ngram", k=3, tp=4, serve={"quantization": "int4-awq"}),
        "serves int4-awq only from a checkpoint",
        "fp8",
    ),
}


@pytest.fixture(params=sorted(CASES))
def case(request, tmp_path):
    body, plan_kw, needle, fix = CASES[request.param]
    (tmp_path / "specplug.yaml").write_text(HEAD + body, encoding="utf-8")
    return request.param, plan_kw, needle, fix


def assert_clear_failure(res, needle: str, fix: str) -> None:
    text = res.stdout + res.stderr
    assert res.exit_code == 1, text
    assert needle in text and fix in text, text
    assert "Traceback" not in text and "Internal error" not in text, text


@pytest.mark.parametrize("argv", [("render", "vllm"), ("launch", "vllm", "--dry-run"), ("recommend",), ("plan",)],
                         ids=["render", "launch-dry-run", "recommend", "plan"])
def test_bad_input_exits_1_with_what_would_work(run_cli, case, argv):
    _, _, needle, fix = case
    res = run_cli(*argv)
    assert_clear_failure(res, needle, fix)
    assert "Error: " in res.stderr
    if argv[0] == "launch":
        assert "command: " not in res.stdout  # refused before anything is described, let alone started


def test_check_reports_the_locked_plans_problem(run_cli, case, tmp_path):
    from specplug.config import load_config
    from specplug.fileio import write_atomic
    from specplug.lock import build_lock, dump_lock, lock_path_for

    _, plan_kw, needle, fix = case
    cfg_path = tmp_path / "specplug.yaml"
    plan = make_plan("vllm", "0.32.0", model=L70, gpu="H100-SXM", num_gpus=4, **plan_kw)
    write_atomic(lock_path_for(cfg_path), dump_lock(build_lock(load_config(cfg_path), cfg_path, plan)))
    res = run_cli("check")
    assert_clear_failure(res, needle, fix)
    assert "compat" in res.stdout and "problem(s) found" in res.stdout
    # each problem points at the config line of the key to change (or the lock, for what the policy chose)
    assert res.stdout.startswith(("specplug.yaml:", "specplug.lock.yaml:")), res.stdout
    js = run_cli("check", "--output", "json")
    assert js.exit_code == 1 and any(needle in p["message"] for p in js.json()["problems"])


@pytest.mark.parametrize(
    "flags,needle,fix",
    [
        (("--method", "draft_model", "--drafter", "Qwen/Qwen2.5-0.5B-Instruct", "--num-gpus", "4", "--stack-version",
          "0.27.1"),  # before vLLM's token-level intersection
         "cannot draft for meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
        (("--method", "ngram", "--num-gpus", "4", "--quantization", "int4-awq"), "serves int4-awq only from a checkpoint",
         "fp8"),
    ],
    ids=["draft-vocab", "quantization"],
)
def test_estimate_refuses_the_same_inputs(run_cli, flags, needle, fix):
    # estimate takes flags only, and -k starts at 1: k=0 cannot be asked of it
    res = run_cli("estimate", "-m", "llama-3.1-70b", "--gpu", "h100", "--stack", "vllm", *flags)
    assert_clear_failure(res, needle, fix)


def test_estimate_splits_gpus_the_heads_allow_instead_of_refusing(run_cli):
    # Three GPUs of a 64-head model: estimate (like recommend) runs tensor 1 x pipeline 3, never tensor 3.
    res = run_cli("estimate", "-m", "llama-3.1-70b", "--gpu", "h100", "--stack", "vllm", "--method", "ngram",
                  "--num-gpus", "3", "--output", "json")
    assert res.exit_code == 0, res.stdout + res.stderr


def test_the_render_api_raises_the_same_error(tmp_path, monkeypatch):
    from specplug.rendering import render
    from specplug.validate import InvalidPlan

    monkeypatch.chdir(tmp_path)
    body, _, needle, _ = CASES["tp3"]
    (tmp_path / "specplug.yaml").write_text(HEAD + body, encoding="utf-8")
    with pytest.raises(Exception) as exc:  # the planner or the renderer: either refuses with the validator's words
        render("vllm")
    assert needle in str(exc.value)
    assert isinstance(exc.value, InvalidPlan) or exc.value.exit_code == 1
