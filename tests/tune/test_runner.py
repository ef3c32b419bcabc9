"""What a trial launches: the user's deployment with the trial's speculation fixed at one k."""

from __future__ import annotations

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
