"""Loading the embedded server's engine: it happens off the calling thread, in a thread that has ended (and
taken its OpenMP workers with it) by the time the engine thread serves, and its errors reach the caller."""

from __future__ import annotations

import argparse
import os
import threading
import time

import pytest

from specplug.errors import SpecplugError
from specplug.runtime.serving import backend


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_loading_runs_in_a_thread_that_has_ended_when_it_returns(monkeypatch):
    seen: list[threading.Thread] = []

    def load(args):
        seen.append(threading.current_thread())
        return "backend", "tokenizer", {"model": args.model}

    monkeypatch.setattr(backend, "_load", load)
    assert backend.load_backend(argparse.Namespace(model="m")) == ("backend", "tokenizer", {"model": "m"})
    assert seen and seen[0] is not threading.current_thread()
    assert not seen[0].is_alive()


def test_a_loading_error_reaches_the_caller_unchanged(monkeypatch):
    def load(_args):
        raise SpecplugError("Unknown model 'nope'.", hint="Name a packaged model or a folder.")

    monkeypatch.setattr(backend, "_load", load)
    with pytest.raises(SpecplugError, match="Unknown model 'nope'") as info:
        backend.load_backend(argparse.Namespace(model="nope"))
    assert info.value.hint == "Name a packaged model or a folder."


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through Linux's /proc")
def test_the_parallel_workers_loading_started_are_gone_before_serving(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.get_num_threads() < 2:
        pytest.skip("one intra-op thread: no parallel workers to leave behind")
    threading.Thread(target=lambda: None).start()  # the interpreter's own helper threads, if any, start now
    before = _threads()

    def load(_args):
        x = torch.randn(512, 512)
        for _ in range(20):
            x = torch.tanh(x @ x / 512.0)  # parallel regions: this thread gets a pool of workers
        return _threads()

    monkeypatch.setattr(backend, "_load", load)
    during = backend.load_backend(argparse.Namespace())
    assert during > before, "the load ran no parallel region; this test checks nothing"
    deadline = time.monotonic() + 5.0
    while _threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _threads() <= before, "the loader's OpenMP workers outlived it and would slow every engine step"


def test_the_prefill_chunk_flag_reaches_the_engine(monkeypatch, capsys):
    from specplug.runtime import models
    from specplug.runtime.server import parser

    seen = {}

    class Stop(Exception):
        pass

    def build(model, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(models, "build_engine", build)
    for argv, chunk in ((["--model", "m"], None), (["--model", "m", "--prefill-chunk", "0"], 0)):
        with pytest.raises(Stop):
            backend._load(parser().parse_args(argv))
        assert seen["prefill_chunk"] == chunk  # None: the engine's own chunk
    with pytest.raises(SystemExit):
        parser().parse_args(["--model", "m", "--prefill-chunk", "-1"])
    assert "--prefill-chunk: must be 0 or more, got -1" in capsys.readouterr().err
