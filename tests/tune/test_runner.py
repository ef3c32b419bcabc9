"""What a trial launches: the user's deployment with the trial's speculation fixed at one k."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specplug.config import parse_config
from specplug.tune.runner import level_order, trial_config
from specplug.tune.settings import TuneSettings
from specplug.tune.trials import Trial

CFG = parse_config("model: smollm2-135m\nstack: embedded\nserve: {host: 0.0.0.0, port: 8000, extra_args: [--threads, '2']}\n")


def test_trial_fixes_k_at_every_batch_on_a_loopback_port():
    t = Trial(id="ngram-k3", method="ngram", k=3, candidate="ngram")
    c = trial_config(CFG, t, "embedded", 8123)
    s = c.speculation
    assert (s.method, s.num_speculative_tokens) == ("ngram", 3)
    assert [(e.min_batch, e.max_batch, e.num_speculative_tokens) for e in s.schedule] == [(1, None, 3)]
    assert (c.serve.host, c.serve.port) == ("127.0.0.1", 8123)
    assert c.serve.extra_args == ["--threads", "2", "--no-pace"]  # the runtime drafts exactly k
    control = trial_config(CFG, Trial(id="control", method="none", k=0, candidate="control"), "embedded", 8124)
    assert control.speculation.method == "none" and control.serve.extra_args == ["--threads", "2"]
    assert CFG.serve.port == 8000  # the user's config is not touched


def test_repeats_are_interleaved():
    assert level_order(TuneSettings(concurrency=[1, 4, 16], repeats=2)) == [1, 4, 16, 1, 4, 16]


def _settings() -> TuneSettings:
    return TuneSettings(concurrency=[1], repeats=1, launch_timeout_s=5)


def _trial() -> Trial:
    return Trial(id="ngram-k3", method="ngram", k=3, candidate="ngram")


def test_a_retried_trials_log_excerpt_is_this_attempts_not_the_last_runs(tmp_path, monkeypatch):
    from specplug import launcher
    from specplug.tune.runner import PREVIOUS_LOG, run_trial

    run_dir = tmp_path / "runs" / "ngram-k3"
    run_dir.mkdir(parents=True)
    (run_dir / "server.log").write_text("last run: torch.OutOfMemoryError: CUDA out of memory\n")

    def crashing(stack, *, plan, wait, run_dir, timeout, out):
        # What launch does: append the server's output to server.log, then report the early exit.
        with open(Path(run_dir) / "server.log", "a", encoding="utf-8") as log:
            log.write("this run: OSError: [Errno 98] Address already in use\n")
        raise launcher.StackUnavailable("The server exited with code -9 before it was healthy. Last lines:\n...",
                                        "Full log: ...")

    monkeypatch.setattr(launcher, "launch", crashing)
    res = run_trial(_trial(), SimpleNamespace(stack=SimpleNamespace(name="vllm")), _settings(), [], run_dir)
    assert res.status == "failed" and res.error == "The server was killed by SIGKILL before it was healthy."
    assert res.log_tail == ["this run: OSError: [Errno 98] Address already in use"]
    assert res.log_file == str(run_dir / "server.log")
    assert "last run" in (run_dir / PREVIOUS_LOG).read_text()  # kept aside, not lost


class _DeadServer:
    forwarded = None
    proc = SimpleNamespace(poll=lambda: -9)

    def alive(self) -> bool:
        return False

    def stop(self) -> int:
        return -9


@pytest.mark.parametrize("bench_raises", [True, False])
def test_a_server_that_dies_while_measured_is_a_failure_with_its_exit_status(tmp_path, monkeypatch, bench_raises):
    from specplug import launcher
    from specplug.errors import SpecplugError
    from specplug.tune import runner

    def started(stack, **_):
        return SimpleNamespace(server=_DeadServer(), spec=SimpleNamespace(stack_version="1"))

    async def measure(*_):
        if bench_raises:
            raise SpecplugError("Every request to http://127.0.0.1:1 failed at concurrency 1: connection refused.")
        return [], []

    monkeypatch.setattr(launcher, "launch", started)
    monkeypatch.setattr(runner, "_measure", measure)
    plan = SimpleNamespace(stack=SimpleNamespace(name="vllm"), serve=SimpleNamespace(port=1, api_key_env=None))
    res = runner.run_trial(_trial(), plan, _settings(), [], tmp_path / "run")
    assert res.status == "failed" and res.runs == []
    assert "killed by SIGKILL" in res.error
    assert ("connection refused." in res.error) is bench_raises


def test_a_trial_measures_its_open_loop_levels_beside_the_closed_ones(monkeypatch):
    """bench's load generator under the trial, against a fake server: every level, rates included, comes back."""
    import asyncio
    import time

    from specplug.bench import loadgen
    from specplug.bench.client import Endpoint, RequestResult
    from specplug.bench.prompts import Prompt
    from specplug.tune import runner

    async def stream_request(client, ep, p, api, max_tokens, temperature):
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        return RequestResult(prompt_id=p.id, start=start, end=time.perf_counter(), ttft=0.002, output_tokens=4)

    async def nothing(*_a, **_k):
        return None

    async def no_outputs(*_a, **_k):
        return []

    monkeypatch.setattr(loadgen, "stream_request", stream_request)
    monkeypatch.setattr(loadgen, "scrape", nothing)
    monkeypatch.setattr(loadgen, "preflight", nothing)
    monkeypatch.setattr(runner, "_greedy_outputs", no_outputs)
    settings = TuneSettings(concurrency=[1, 2], request_rates=[50.0], repeats=2, num_prompts=3, check_prompts=0)
    prompts = [Prompt(id="p0", prompt="hello")]
    runs, _ = asyncio.run(runner._measure(Endpoint("http://127.0.0.1:1"), _trial(), settings, prompts, None))
    assert [(r.concurrency, r.request_rate) for r in runs] == [(1, None), (2, None), (0, 50.0)] * 2
    assert all(r.requests == 3 and r.role == "speculative" for r in runs)
