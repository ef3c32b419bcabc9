"""The README's "Using it" block, run in order in a fresh folder as a new user types it: every command exits 0.

Read from README.md itself, so the README cannot drift from what works. Lines that need what a test machine has
not got are left out, each with the reason (SKIPPED); one runs changed, with the reason (CHANGED):

- bench, verify: they measure running servers at --endpoint/--baseline URLs;
- calibrate: it reads a result file that such a server run writes (bench.json, a `vllm bench serve` result);
- tune: it launches the stack and measures it, about half an hour of serving;
- launch without --dry-run: it would load Llama-3.1-70B; the line runs with --dry-run (preflight and command);
- generate: it runs when the packaged SmolLM2 is already converted here (no network), else it is left out.

`recommend --traffic logs.jsonl` reads the user's own traffic log: the folder gets a small one first. Hub ids
are read from the fake Hub on 127.0.0.1 (tests/catalog's copies of real config.json files), as no test reaches
huggingface.co.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.traffic import logs

ROOT = Path(__file__).resolve().parents[1]

SKIPPED = {
    "bench": "measures running servers (--endpoint/--baseline URLs)",
    "verify": "compares the greedy outputs of running servers",
    "calibrate": "reads a result file a real server run writes",
    "tune": "launches the stack and measures it for about half an hour",
}
CHANGED = {"launch": "without --dry-run it would load Llama-3.1-70B: run with --dry-run"}


def readme_commands() -> list[list[str]]:
    """The argv of every command in the README's "Using it" block, in order, without the leading 'specplug'."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md has no bash block under 'Using it'"
    out = []
    for line in block.group(1).splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            assert argv[0] == "specplug", line
            out.append(argv[1:])
    return out


def _packaged_model_ready() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from specplug.runtime import smollm2
    except ImportError:
        return False
    return (smollm2.cache_dir() / "models" / smollm2.TARGET_NAME / "config.json").is_file()


def _as_run(argv: list[str]) -> tuple[list[str] | None, str | None]:
    """What the test runs for one README command (None: left out), and why it differs from the README."""
    cmd = argv[0]
    if cmd in SKIPPED:
        return None, SKIPPED[cmd]
    if cmd == "launch" and "--dry-run" not in argv:
        return [*argv, "--dry-run"], CHANGED["launch"]
    if cmd == "generate" and not _packaged_model_ready():
        return None, "the packaged SmolLM2 is not converted here, and fetching it needs the network"
    return argv, None


def test_the_readme_block_is_what_this_test_expects():
    cmds = [a[0] for a in readme_commands()]
    assert cmds[:2] == ["probe", "models"] and "init" in cmds and "deploy" in cmds
    assert cmds.index("init") < cmds.index("plan") < cmds.index("render") < cmds.index("deploy") < cmds.index("check")
    assert set(SKIPPED) <= set(cmds)  # a skip for a command the README dropped would hide nothing


@pytest.mark.slow
def test_every_readme_command_exits_0_in_order_in_a_fresh_folder(run_cli, fake_hub, tmp_path):
    logs.write(tmp_path / "logs.jsonl", logs.build("chat", n=20))  # the user's own traffic, for --traffic
    ran, left_out = [], []
    for argv in readme_commands():
        todo, why = _as_run(argv)
        if todo is None:
            left_out.append((argv[0], why))
            continue
        r = run_cli(*todo)
        # A dry run exits 1 when a check would stop a real start (here: no vLLM, no GPU), as the README says.
        want = 1 if todo[0] == "launch" and "would fail: " in r.stdout else 0
        assert r.exit_code == want, f"specplug {shlex.join(todo)} exited {r.exit_code}:\n{r.stderr}"
        ran.append(todo[0])
    assert {"init", "plan", "render", "launch", "deploy", "check"} <= set(ran)
    assert {c for c, _ in left_out} <= set(SKIPPED) | {"generate"}
    config = (tmp_path / "specplug.yaml").read_text()
    # init pinned the stack version itself (the README passes none) and said so in the file: deploy needs it.
    assert "Pinned by 'specplug init'" in config and re.search(r'^  version: "[^"]+"$', config, re.M)
    assert (tmp_path / "deploy" / "docker-compose.yaml").is_file()
