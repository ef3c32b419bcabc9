"""specplug tune end to end on the embedded runtime (SmolLM2-135M on the CPU): a candidate that cannot start
is reported with its log and the tune goes on; Ctrl-C leaves no server behind; the rerun resumes; the decision
lands in specplug.yaml, the calibration and the lock, with the evidence in -o DIR."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("fastapi")

SPECPLUG = str(Path(sys.executable).with_name("specplug"))


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    from specplug.errors import SpecplugError
    from specplug.runtime import smollm2

    try:
        return smollm2.ensure_target()
    except SpecplugError as exc:
        pytest.skip(f"SmolLM2 unavailable: {exc}")


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_tune_embedded_interrupt_resume_failed_candidate_and_decision(smollm2, tmp_path):
    cfg = tmp_path / "specplug.yaml"
    original = "# mine\nmodel: smollm2-135m\nstack: embedded\nworkload: {type: chat, concurrency: 2}\n"
    cfg.write_text(original)
    args = [SPECPLUG, "tune", "--concurrency", "1,2", "--method", "ngram,draft_model", "--drafter",
            str(tmp_path / "no-such-drafter"), "-k", "2", "--repeats", "2", "--num-prompts", "2", "--max-tokens", "12",
            "--check-prompts", "1", "--timeout", "600", "-o", "out"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    state = tmp_path / "out" / "tune-state.json"
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while not (state.is_file() and "control" in json.loads(state.read_text())["results"]):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the control did not finish in time"
            time.sleep(0.5)
        log = tmp_path / "out" / "runs" / "ngram-k2" / "launch.log"
        while not (log.is_file() and "process group" in log.read_text()):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        pgid = int(re.search(r"process group (\d+)", log.read_text()).group(1))
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "rerun the same command to resume" in out
    time.sleep(1)
    assert _group_gone(pgid), "the interrupted trial's server is still running"
    assert cfg.read_text() == original  # an interrupted tune decides nothing
    assert list(json.loads(state.read_text())["results"]) == ["control"]

    again = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text
    assert "control (done)" in text and "control done in" not in text  # resumed, not re-measured
    assert re.search(r"draft_model-no-such-drafter-k2 failed.*does not exist", text), text

    rep = json.loads((tmp_path / "out" / "tune.json").read_text())
    by_id = {t["id"]: t for t in rep["trials"]}
    assert by_id["draft_model-no-such-drafter-k2"]["status"] == "failed"
    ng = by_id["ngram-k2"]
    assert ng["status"] == "done" and [s["concurrency"] for s in ng["speedups"]] == [1, 2]
    assert all(lv["repeats"] == 2 and len(lv["tokens_per_s"]) == 2 for lv in ng["levels"])
    assert ng["acceptance"]["drafts"] > 0 and len(ng["acceptance"]["per_position"]) <= 2
    assert ng["lossless"]["compared"] == 1
    for name in ("tune.csv", "tune.png", "tune.json"):
        assert (tmp_path / "out" / name).is_file()

    from specplug.config import load_config
    from specplug.tune.lockref import read_ref, tune_findings

    text = cfg.read_text()
    assert text.startswith("# mine\nmodel: smollm2-135m\n") and "# Set by 'specplug tune'" in text
    loaded = load_config(cfg)
    d = rep["decision"]
    if d["speculate"]:
        assert loaded.speculation.method == "ngram" and loaded.speculation.schedule
    else:
        # The comment carries the why on one line, cut at 400 characters (tune.json has it whole).
        assert loaded.speculation.method == "none" and " ".join(d["why"].split())[:200] in text
    assert loaded.calibration == "calibration.yaml"
    cal = (tmp_path / "calibration.yaml").read_text()
    assert "source: tune out (ngram-k2)" in cal
    lock = tmp_path / "specplug.lock.yaml"
    assert read_ref(lock) is not None and tune_findings(loaded, cfg, lock) == []
    cfg.write_text(text.replace("concurrency: 2", "concurrency: 8"))
    (f,) = tune_findings(load_config(cfg), cfg, lock)
    assert "workload.concurrency" in f.message
