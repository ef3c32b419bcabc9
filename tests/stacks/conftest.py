"""The real-stack tier: pinned venvs built by scripts/stack_envs.sh, cached under $SPECPLUG_STACKENVS.

Tests here skip with the reason when a venv is absent, unless SPECPLUG_REQUIRE_STACKS=1 (CI), where a
missing vLLM/SGLang/GuideLLM venv is a failure; the optional llama.cpp tier is required only with
SPECPLUG_REQUIRE_LLAMACPP=1.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = Path(os.environ.get("SPECPLUG_STACKENVS") or Path.home() / ".cache" / "specplug" / "stackenvs")


def need(path: Path, what: str, build: str, require_var: str = "SPECPLUG_REQUIRE_STACKS") -> Path:
    if path.exists():
        return path
    msg = f"{what} not found at {path}; build it with: scripts/stack_envs.sh {build}"
    if os.environ.get(require_var) == "1":
        pytest.fail(f"{msg} ({require_var}=1)")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def vllm_env() -> Path:
    return need(ROOT / "vllm" / ".specplug-pin", "the pinned vLLM venv", "vllm").parent


@pytest.fixture(scope="session")
def tiny_model(vllm_env) -> Path:
    return need(vllm_env / "models" / "tiny-llama" / "config.json", "the tiny local model", "vllm").parent


# How each method's checkpoint names itself in config.json (the stacks' registries), over the tiny model's config.
_DRAFTER_CONFIG = {
    "eagle3": {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1},
    "eagle": {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1},  # EAGLE-1's released layout
    "dflash": {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 1, "block_size": 16,
               "dflash_config": {"target_layer_ids": [1], "mask_token_id": 2}},
    "dspark": {"architectures": ["DSparkDraftModel"], "num_hidden_layers": 1, "block_size": 7},
}


@pytest.fixture(scope="session")
def drafters(tiny_model, tmp_path_factory) -> dict[str, Path]:
    """A drafter folder per method for the tiny model: its files, with config.json saying the method (the stacks
    parse and resolve without loading weights; specplug refuses a plain LM named as an EAGLE head)."""
    out = {}
    base = json.loads((tiny_model / "config.json").read_text(encoding="utf-8"))
    for method, fields in _DRAFTER_CONFIG.items():
        folder = tmp_path_factory.mktemp(f"drafter-{method}")
        for f in tiny_model.iterdir():
            if f.name != "config.json":
                (folder / f.name).symlink_to(f)
        (folder / "config.json").write_text(json.dumps({**base, **fields}), encoding="utf-8")
        out[method] = folder
    return out


@pytest.fixture(scope="session")
def sglang_env() -> Path:
    return need(ROOT / "sglang" / ".specplug-pin", "the pinned SGLang venv", "sglang").parent


@pytest.fixture(scope="session")
def guidellm_env() -> Path:
    return need(ROOT / "guidellm" / ".specplug-pin", "the pinned GuideLLM venv", "guidellm").parent


@pytest.fixture(scope="session")
def llama_server() -> Path:
    # Optional tier (a 21-minute compile): CI's SPECPLUG_REQUIRE_STACKS does not cover it.
    return need(ROOT / "llamacpp" / "bin" / "llama-server", "a built llama-server", "llamacpp",
                "SPECPLUG_REQUIRE_LLAMACPP")


def run_helper(python: Path, script: str, cases: list[dict], timeout: float = 600) -> dict[str, dict]:
    """Run tests/stacks/SCRIPT inside a stack venv with ``cases`` on stdin; results by case name."""
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(python), str(HERE / script)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return {r["name"]: r for r in json.loads(proc.stdout)}


@pytest.fixture(scope="module")
def run_cli_module(tmp_path_factory):
    """Run the specplug CLI in-process (module scope) and capture stdout/stderr/exit code."""
    import contextlib
    import io

    from specplug.cli import main

    class Result:
        def __init__(self, code: int, out: str, err: str) -> None:
            self.exit_code, self.stdout, self.stderr = code, out, err

    def run(*args: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return Result(code, out.getvalue(), err.getvalue())

    return run
