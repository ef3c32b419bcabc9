"""specplug estimate: the CLI and the Python API agree; bad input is a clean error."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

import specplug
from specplug.cli import cli


def test_cli_and_api_agree() -> None:
    args = ["estimate", "--model", "lmsys/vicuna-13b-v1.3", "--method", "eagle", "--gpu", "a100", "--batch-size", "1",
            "--workload", "chat", "--stack", "hf", "--output", "json"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0
    api = specplug.estimate("lmsys/vicuna-13b-v1.3", "eagle", gpu="a100", batch_size=1, workload="chat", stack="hf")
    assert json.loads(r.output) == api.model_dump(mode="json")
    assert api.speedup > 1.0 and api.acceptance_length > 1.0


def test_unknown_drafter_gets_a_size_guess_and_a_warning() -> None:
    e = specplug.estimate("vicuna-7b", "draft_model", drafter="someone/vicuna-68m-custom", gpu="a100", stack="hf")
    assert any("not in the model catalog" in w for w in e.warnings)


def test_unknown_gpu_exits_nonzero() -> None:
    p = subprocess.run([sys.executable, "-m", "specplug.cli", "estimate", "--model", "vicuna-7b", "--method", "ngram",
                        "--gpu", "h9000"], capture_output=True, text=True)
    assert p.returncode == 1 and "Unknown GPU" in p.stderr and "Traceback" not in p.stderr


def test_bigger_batch_lowers_speedup() -> None:
    lo = specplug.estimate("llama-3.1-8b", "eagle3", gpu="h100", batch_size=1, num_speculative_tokens=3)
    hi = specplug.estimate("llama-3.1-8b", "eagle3", gpu="h100", batch_size=128, num_speculative_tokens=3)
    assert hi.speedup < lo.speedup


def test_stack_version_decides_what_estimate_accepts(run_cli) -> None:
    args = ["estimate", "--model", "qwen3-8b", "--method", "dflash", "--drafter", "z-lab/Qwen3-8B-DFlash-b16",
            "--gpu", "h100", "--stack", "vllm", "--output", "json"]
    old = run_cli(*args, "--stack-version", "0.10.2")
    assert old.exit_code == 1 and "needs vLLM 0.20.0" in old.stderr
    new = run_cli(*args, "--stack-version", "0.32.0")
    assert new.exit_code == 0 and json.loads(new.stdout)["speedup"] > 1.0


def test_estimate_answers_any_shape_and_the_tree_pays_only_while_verification_is_cheap() -> None:
    kw = dict(gpu="h100", stack="sglang", workload="math")
    shapes = [dict(num_speculative_tokens=k) for k in (1, 3, 5, 7)] + [
        dict(num_speculative_tokens=3, tree_topk=t, num_draft_tokens=n) for t, n in ((4, 4), (2, 6), (4, 21))]
    for s in shapes:
        e = specplug.estimate("qwen3-8b", "eagle3", **kw, **s)
        assert e.speedup > 0 and 1.0 <= e.acceptance_length <= s["num_speculative_tokens"] + 1
    # SpecDecode-Bench (SGLang, Qwen3-8B on an H100): the depth-3 tree of 21 tokens beats the chain of 3 at batch 1
    # and falls far below it at batch 128, where verifying its rejected branches is compute.
    tree = dict(num_speculative_tokens=3, tree_topk=4, num_draft_tokens=21)
    for batch, tree_wins in ((1, True), (128, False)):
        t = specplug.estimate("qwen3-8b", "eagle3", batch_size=batch, **kw, **tree)
        c = specplug.estimate("qwen3-8b", "eagle3", batch_size=batch, num_speculative_tokens=3, **kw)
        assert (t.speedup > c.speedup) == tree_wins
