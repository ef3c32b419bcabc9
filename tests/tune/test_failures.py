"""specplug tune when trials crash (fake runner): a failure is no evidence against speculation, so with the
control or every candidate failed nothing is decided or written and it exits 1 saying why; with some candidates
measured, the decision is among those and names the failed ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from specplug.tune import runner
from specplug.tune.state import TrialResult
from tests.tune.helpers import trial

CONFIG = "# mine\nmodel: smollm2-135m\nstack: embedded\nworkload: {type: chat, concurrency: 1}\n"
ARGS = ("tune", "--concurrency", "1", "--method", "ngram", "-k", "1,2", "--num-prompts", "2", "--max-tokens", "8")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _fake_runner(monkeypatch, fail: set[str], speeds: dict[str, list[float]]) -> None:
    """Trials in ``fail`` crash as a server killed for memory; the others measure ``speeds`` (tok/s at c=1)."""

    def run_trial(t, _plan, _settings, _prompts, run_dir: Path, _tick=None) -> TrialResult:
        if t.id in fail:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "server.log").write_text(f"loading weights\n{OOM}\n")
            return TrialResult(id=t.id, method=t.method, drafter=t.drafter, k=t.k, status="failed",
                               error="The server was killed by SIGKILL before it was healthy.",
                               log_tail=["loading weights", OOM], log_file=str(run_dir / "server.log"))
        return trial(t.id, t.method, t.k, {1: speeds[t.id]}, drafter=t.drafter)

    monkeypatch.setattr(runner, "run_trial", run_trial)


def _snapshot(tmp_path: Path) -> dict[str, tuple[bytes, int]]:
    files = ["specplug.yaml", "specplug.lock.yaml", "calibration.yaml", "tune/tune.json", "tune/tune.csv"]
    return {f: ((tmp_path / f).read_bytes(), (tmp_path / f).stat().st_mtime_ns) for f in files}


@pytest.fixture
def tuned(run_cli, tmp_path, monkeypatch):
    """A folder where an earlier tune succeeded: ngram won, and the lock cites that tune.json by digest."""
    (tmp_path / "specplug.yaml").write_text(CONFIG)
    _fake_runner(monkeypatch, set(), {"control": [100, 101], "ngram-k2": [200, 201], "ngram-k1": [150, 151]})
    r = run_cli(*ARGS)
    assert r.exit_code == 0, r.stderr
    assert "method: ngram" in (tmp_path / "specplug.yaml").read_text()
    return _snapshot(tmp_path)


@pytest.mark.parametrize(
    ("fail", "said"),
    [
        ({"ngram-k2", "ngram-k1"}, ["No candidate was measured (failed: ngram-k2, ngram-k1); a failure is no evidence",
                                    "so nothing was decided. specplug.yaml, the calibration and the lock were left",
                                    "ngram-k2: The server was killed by SIGKILL before it was healthy.",
                                    "ngram-k1: The server was killed by SIGKILL", f"| {OOM}",
                                    "rerun the same command: it resumes"]),
        ({"control"}, ["The control (speculation off) failed: The server was killed by SIGKILL before it was healthy.",
                       "specplug.yaml and the lock were left as they were", "rerun the same command"]),
    ],
    ids=["every-candidate", "control"],
)
def test_a_crash_leaves_every_file_as_it_was_and_exits_1(run_cli, tmp_path, monkeypatch, tuned, fail, said):
    from specplug.config import load_config
    from specplug.tune.lockref import tune_findings

    _fake_runner(monkeypatch, fail, {"control": [100, 101], "ngram-k2": [200, 201], "ngram-k1": [150, 151]})
    r = run_cli(*ARGS, "--restart")
    assert r.exit_code == 1, r.stdout + r.stderr
    for text in said:
        assert text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Internal error" not in r.stderr
    # Byte for byte and untouched on disk: the earlier decision, its calibration, lock and evidence all stand.
    assert _snapshot(tmp_path) == tuned
    cfg = tmp_path / "specplug.yaml"
    assert tune_findings(load_config(cfg), cfg, tmp_path / "specplug.lock.yaml") == []


def test_with_some_candidates_measured_the_decision_is_theirs_and_names_the_failed(run_cli, tmp_path, monkeypatch):
    (tmp_path / "specplug.yaml").write_text(CONFIG)
    _fake_runner(monkeypatch, {"ngram-k2"}, {"control": [100, 101], "ngram-k1": [80, 81]})
    r = run_cli(*ARGS)
    assert r.exit_code == 0, r.stderr
    # ngram-k1 measured slower: off is evidence; ngram-k2 crashed: named, and retried by a rerun.
    text = (tmp_path / "specplug.yaml").read_text()
    assert "speculation:\n  method: none" in text and "failed, not measured: ngram-k2" in text
    assert "Not weighed (failed): ngram-k2. Rerun the same command to retry them" in r.stdout
    assert (tmp_path / "specplug.lock.yaml").is_file()
