"""The load generator's open loop (Poisson arrivals at a request rate) and goodput within latency targets, against
a fake server that answers after a fixed delay: arrivals do not wait for answers, and the figures say so."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from specplug.bench import loadgen
from specplug.bench.client import Endpoint, RequestResult
from specplug.bench.loadgen import BenchPlan, LevelRun, Rate, arrival_offsets, requests_for, within_slo
from specplug.bench.prompts import Prompt

ANSWER_S = 0.3  # the fake server's time per request
TOKENS = 10


def _fake_server(monkeypatch) -> list[float]:
    """Each request takes ANSWER_S (first token after a tenth of it); returns the send times seen."""
    sent: list[float] = []

    async def stream_request(client, ep, p, api, max_tokens, temperature) -> RequestResult:
        start = time.perf_counter()
        sent.append(start)
        await asyncio.sleep(ANSWER_S)
        return RequestResult(prompt_id=p.id, start=start, end=time.perf_counter(), ttft=ANSWER_S / 10,
                             output_tokens=TOKENS)

    async def scrape(client, ep):
        return None

    monkeypatch.setattr(loadgen, "stream_request", stream_request)
    monkeypatch.setattr(loadgen, "scrape", scrape)
    return sent


def _plan(levels, n: int | None = None, **kw) -> BenchPlan:
    prompts = [Prompt(id=f"p{i}", prompt=f"prompt {i}") for i in range(4)]
    return BenchPlan(endpoint=Endpoint("http://127.0.0.1:1"), baseline=None, prompts=prompts, concurrency=levels,
                     max_tokens=TOKENS, temperature=0.0, num_prompts=n, duration_s=None, api="completions", **kw)


def test_poisson_arrivals_are_seeded_and_average_the_rate():
    a = arrival_offsets(4.0, 4000, seed=0)
    assert a == arrival_offsets(4.0, 4000, seed=0) and a != arrival_offsets(4.0, 4000, seed=1)
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert a[0] == 0.0 and statistics.fmean(gaps) == pytest.approx(0.25, rel=0.05)
    # Exponential gaps: the spread equals the mean (a fixed pace would have none).
    assert statistics.pstdev(gaps) == pytest.approx(0.25, rel=0.1)


def test_an_open_level_sends_on_time_whatever_the_server_answers(monkeypatch):
    sent = _fake_server(monkeypatch)
    plan = _plan([Rate(40.0)], n=12, slo_ttft_ms=50.0, slo_tpot_ms=1.0)
    run = LevelRun(role="speculative", concurrency=0, request_rate=40.0)
    began = time.perf_counter()
    asyncio.run(loadgen.run_level(None, plan.endpoint, run, requests_for(plan, Rate(40.0)), plan))
    wall = time.perf_counter() - began
    # 12 arrivals at 40/s span about 0.3 s; a closed loop of one stream would take 12 x 0.3 s.
    assert len(sent) == 12 and wall < 12 * ANSWER_S / 3
    expected = arrival_offsets(40.0, 12, plan.seed)
    assert max(abs((t - sent[0]) - e) for t, e in zip(sent, expected, strict=True)) < 0.05
    stats = run.stats(slo_tpot_ms=plan.slo_tpot_ms, slo_ttft_ms=plan.slo_ttft_ms)
    assert (stats.concurrency, stats.request_rate, stats.requests) == (0, 40.0, 12)
    # TPOT is (0.3 - 0.03) / 9 = 30 ms per token: above the 1 ms target, so no request counts as goodput.
    assert stats.goodput_tokens_per_s == 0.0 and stats.output_tokens_per_s > 0
    loose = run.stats(slo_tpot_ms=100.0, slo_ttft_ms=50.0)
    assert loose.goodput_tokens_per_s == pytest.approx(loose.output_tokens_per_s)
    assert run.stats().goodput_tokens_per_s is None  # no targets, no goodput


def test_open_levels_send_seconds_of_arrivals_and_targets_read_per_request():
    plan = _plan([1, Rate(2.0)])
    assert len(requests_for(plan, 1)) == 4 and len(requests_for(plan, Rate(2.0))) == 40
    assert len(requests_for(plan, Rate(0.1))) == 8
    r = RequestResult(prompt_id="p", start=0.0, end=1.0, ttft=0.1, output_tokens=10)  # TPOT 100 ms
    assert within_slo(r, 100.0, 100.0) and not within_slo(r, 99.0, None) and not within_slo(r, None, 99.0)
    one = RequestResult(prompt_id="p", start=0.0, end=1.0, ttft=0.1, output_tokens=1)
    assert within_slo(one, 1.0, None)  # one token: no time per output token to miss
