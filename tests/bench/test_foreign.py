"""Reading other clients' reports (specplug.bench.foreign) and running a client with scrapes around it
(specplug.bench.clientrun), without the clients: documents with the fields vLLM 0.32's `bench serve
--save-result` and GuideLLM 0.8.1's JSON report carry (tests/stacks/test_clients_interop.py reads files the real
tools wrote), and a small local /metrics server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specplug.bench.foreign import detect, read_report, record_from_files, to_record
from specplug.bench.metrics import Acceptance
from specplug.errors import SpecplugError


def vllm_result(concurrency: int = 4, detailed: bool = True, spec: bool = True) -> dict:
    d = {
        "date": "20261202-032132", "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "smollm2-135m", "tokenizer_id": "/models/smollm2-135m", "num_prompts": 4, "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": concurrency, "duration": 4.0, "completed": 3, "failed": 1,
        "total_input_tokens": 96, "total_output_tokens": 30, "request_throughput": 0.75, "output_throughput": 7.5,
        "mean_ttft_ms": 300.0, "median_ttft_ms": 250.0, "p99_ttft_ms": 500.0,
        "mean_tpot_ms": 90.0, "median_tpot_ms": 80.0, "p99_tpot_ms": 120.0,
    }
    if detailed:
        d.update({
            "input_lens": [32, 32, 32, 32], "output_lens": [10, 10, 10, 0],
            "ttfts": [0.2, 0.3, 0.4, 0.0], "latencies": [1.1, 1.2, 1.3, 0.0],
            "errors": ["", "", "", "Bad Request"],
        })
    if spec:
        d.update({
            "spec_decode_acceptance_rate": 25.0, "spec_decode_acceptance_length": 2.0, "spec_decode_num_drafts": 5,
            "spec_decode_draft_tokens": 20, "spec_decode_accepted_tokens": 5,
            "spec_decode_per_position_acceptance_rates": [0.6, 0.4, 0.0, 0.0],
        })
    return d


def _dist(values: list[float]) -> dict:
    xs = sorted(values)
    return {"successful": {"mean": sum(xs) / len(xs), "median": xs[len(xs) // 2], "count": len(xs),
                           "total_sum": sum(xs), "percentiles": {"p90": xs[-1], "p99": xs[-1]}}}


def guidellm_report(temperature: float | None = 0.0) -> dict:
    benches = []
    for streams, start in ((1, 100.0), (4, 120.0)):
        body = {"model": "smollm2-135m", "stream": True, "max_completion_tokens": 12, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hi"}]}
        if temperature is not None:
            body["temperature"] = temperature
        benches.append({
            "type_": "generative_benchmark",
            "config": {"strategy": {"type_": "concurrent", "worker_count": streams, "max_concurrency": streams,
                                    "streams": streams}},
            "metrics": {
                "request_totals": {"successful": 4, "errored": 0, "incomplete": 0, "total": 4},
                "output_token_count": _dist([12.0] * 4),
                "time_to_first_token_ms": _dist([100.0, 200.0, 300.0, 400.0]),
                "inter_token_latency_ms": _dist([50.0, 60.0, 70.0, 80.0]),
                "request_latency": _dist([1.0, 1.5, 2.0, 2.5]),
            },
            "requests": {"successful": [{"request_args": json.dumps({"body": body})}] * 4, "errored": [],
                         "incomplete": []},
            "start_time": start, "end_time": start + 8.0, "duration": 8.0,
        })
    return {"metadata": {"version": 2, "guidellm_version": "0.8.1"},
            "config": {"spec": {"backend": {"kind": "openai_http", "model": "smollm2-135m"}}}, "benchmarks": benches}


def _write(tmp_path, name: str, doc: dict):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_formats_are_recognised_by_content():
    assert detect(vllm_result()) == "vllm bench serve"
    assert detect(guidellm_report()) == "guidellm"
    assert detect({"kind": "specplug-bench"}) == "specplug"
    assert detect({"foo": 1}) is None and detect([1]) is None


def test_a_vllm_result_is_one_level_with_specplugs_definitions(tmp_path):
    rep = read_report(_write(tmp_path, "r.json", vllm_result()))
    (run,) = rep.runs
    s = run.stats
    assert (run.concurrency, s.requests, s.failed, s.output_tokens, s.wall_s) == (4, 3, 1, 30, 4.0)
    assert s.errors == ["Bad Request"]
    assert s.output_tokens_per_s == pytest.approx(7.5) and s.requests_per_s == pytest.approx(0.75)
    # From the per-request lists (the failed request left out): TPOT after the first token.
    assert s.ttft_s.p50 == pytest.approx(0.3)
    assert s.tpot_s.p50 == pytest.approx((1.2 - 0.3) / 9)
    assert s.latency_s.p50 == pytest.approx(1.2)
    acc = s.acceptance
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (5, 20, 5)
    assert acc.acceptance_rate == pytest.approx(0.25) and acc.mean_acceptance_length == pytest.approx(2.0)
    assert acc.per_position == [0.6, 0.4, 0.0, 0.0]
    assert rep.model == "smollm2-135m" and rep.max_tokens == 10 and rep.temperature is None


def test_a_vllm_result_without_details_uses_its_summary_fields(tmp_path):
    rep = read_report(_write(tmp_path, "r.json", vllm_result(detailed=False, spec=False)))
    s = rep.runs[0].stats
    assert (s.ttft_s.p50, s.ttft_s.p99, s.ttft_s.mean) == pytest.approx((0.25, 0.5, 0.3))
    assert s.tpot_s.p50 == pytest.approx(0.08) and s.acceptance is None


def test_a_guidellm_report_gives_a_level_per_benchmark(tmp_path):
    rep = read_report(_write(tmp_path, "g.json", guidellm_report()))
    assert [r.concurrency for r in rep.runs] == [1, 4]
    s = rep.runs[1].stats
    assert (s.requests, s.failed, s.output_tokens, s.wall_s) == (4, 0, 48, 8.0)
    assert s.output_tokens_per_s == pytest.approx(6.0)
    assert s.ttft_s.p50 == pytest.approx(0.3) and s.tpot_s.mean == pytest.approx(0.065)
    assert (rep.model, rep.temperature, rep.max_tokens) == ("smollm2-135m", 0.0, 12)


def test_record_pairs_baseline_runs_and_places_scraped_acceptance(tmp_path):
    spec = read_report(_write(tmp_path, "g.json", guidellm_report()))
    base_doc = guidellm_report()
    for b in base_doc["benchmarks"]:
        b["duration"] = 12.0  # the same tokens in 1.5x the time
    base = read_report(_write(tmp_path, "b.json", base_doc))
    acc = Acceptance(source="scraped", drafts=10, draft_tokens=40, accepted_tokens=20, acceptance_rate=0.5,
                     mean_acceptance_length=3.0)
    rec = to_record([spec], baseline=[base], acceptance=acc, acceptance_note="scraped around the run", stack="vllm")
    assert [lv.speedup for lv in rec.levels] == [pytest.approx(1.5), pytest.approx(1.5)]
    assert rec.levels[0].speculative.acceptance == acc and rec.levels[1].speculative.acceptance is None
    assert any("covers concurrencies 1, 4" in n for n in rec.notes)
    assert "scraped around the run" in rec.notes and rec.temperature == 0.0 and rec.stack == "vllm"
    assert rec.verdict.startswith("speculation pays")
    with pytest.raises(SpecplugError, match="Two runs at concurrency 1"):
        to_record([spec, spec])


def test_a_report_without_temperature_assumes_the_servers_default(tmp_path):
    rec = to_record([read_report(_write(tmp_path, "g.json", guidellm_report(temperature=None)))])
    assert rec.temperature == 1.0 and any("server's default" in n for n in rec.notes)
    rec = to_record([read_report(_write(tmp_path, "v.json", vllm_result()))], temperature=0.0)
    assert rec.temperature == 0.0


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["bench", "--from", "missing.json"], "does not exist"),
        (["bench", "--from", "other.json"], "neither a specplug bench record"),
        (["bench", "--from", "v.json", "--endpoint", "http://127.0.0.1:9"], "only be read around the client's run"),
        (["bench", "--endpoint", "http://127.0.0.1:9", "vllm"], "Unexpected argument 'vllm'"),
        (["bench", "--from", "v.json", "--from", "v.json"], "Two runs at concurrency 4"),
        (["bench", "--from", "v.json", "--", "vllm"], "needs --endpoint"),
        (["calibrate", "--from", "v.json", "--endpoint", "http://127.0.0.1:9", "-m", "smollm2-135m",
          "--method", "ngram"], "not both"),
        (["calibrate", "--baseline-from", "v.json", "-m", "smollm2-135m", "--method", "ngram"], "goes with --from"),
    ],
)
def test_bad_from_usage_is_a_clear_error(run_cli, tmp_path, args, fragment):
    (tmp_path / "v.json").write_text(json.dumps(vllm_result()))
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    r = run_cli(*args)
    assert r.exit_code != 0
    assert fragment in r.stdout + r.stderr
    assert "Internal error" not in r.stdout + r.stderr


def test_bench_and_calibrate_read_a_vllm_result(run_cli, tmp_path):
    (tmp_path / "v1.json").write_text(json.dumps(vllm_result(concurrency=1)))
    (tmp_path / "v4.json").write_text(json.dumps(vllm_result(concurrency=4)))
    r = run_cli("bench", "--from", "v1.json", "--from", "v4.json", "-o", "out", "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    rec = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [lv["concurrency"] for lv in rec["levels"]] == [1, 4]
    r = run_cli("calibrate", "--from", "v1.json", "--from", "v4.json", "-m", "smollm2-135m", "--method", "ngram",
                "--workload", "code", "--stack", "vllm", "--temperature", "0", "-o", "cal.yaml", "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    rep = r.json()
    assert rep["entry"]["acceptance_rate"] == pytest.approx(0.25) and rep["entry"]["temperature"] == 0.0
    assert rep["entry"]["num_speculative_tokens"] == 4  # 40 draft tokens in 10 drafts


# ------------------------------------------------------------------------------------------ clientrun


class _Metrics(BaseHTTPRequestHandler):
    drafts = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/bump":
            type(self).drafts += 3
            body = b"ok"
        else:
            d = type(self).drafts
            body = (f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {d}\n'
                    f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {4 * d}\n'
                    f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {2 * d}\n'
                    f'vllm:generation_tokens_total{{model_name="m"}} {10 * d}\n').encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


def _writing_client(metrics_server: str, src, dest, *extra: str) -> list[str]:
    """A client that moves the server's counters and writes its report (``extra``: arguments it ignores)."""
    code = (f"import shutil, urllib.request; urllib.request.urlopen('{metrics_server}/bump').read(); "
            f"shutil.copyfile({str(src)!r}, {str(dest)!r})")
    return [sys.executable, "-c", code, *extra]


def test_a_client_run_is_bracketed_by_scrapes(metrics_server, tmp_path):
    src = _write(tmp_path, "src.json", guidellm_report())
    report = tmp_path / "g.json"
    client = _writing_client(metrics_server, src, report)
    rec = record_from_files([str(report)], client=client, endpoint=metrics_server)
    acc = rec.levels[0].speculative.acceptance
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (3, 12, 6)
    assert acc.mean_acceptance_length == pytest.approx(3.0)
    assert any("scraped before and after" in n for n in rec.notes)


def test_a_failing_or_missing_client_is_an_error(metrics_server, tmp_path):
    report = str(_write(tmp_path, "g.json", guidellm_report()))
    with pytest.raises(SpecplugError, match="exited with status 3"):
        record_from_files([report], client=[sys.executable, "-c", "raise SystemExit(3)"], endpoint=metrics_server)
    with pytest.raises(SpecplugError, match="Cannot run the client"):
        record_from_files([report], client=[str(tmp_path / "no-such-client")], endpoint=metrics_server)
    with pytest.raises(SpecplugError, match="did not answer with metrics"):
        record_from_files([report], client=["true"], endpoint="http://127.0.0.1:9")


def test_calibrate_from_a_report_without_acceptance_says_how_to_get_it(run_cli, tmp_path):
    (tmp_path / "g.json").write_text(json.dumps(guidellm_report()))
    r = run_cli("calibrate", "--from", "g.json", "-m", "smollm2-135m", "--method", "ngram", "--workload", "chat",
                "--stack", "embedded")
    assert r.exit_code == 1
    assert "--endpoint URL -- CLIENT ARGS" in r.stdout + r.stderr and "Internal error" not in r.stdout + r.stderr


def test_a_report_the_client_did_not_rewrite_is_an_error(metrics_server, tmp_path):
    report = _write(tmp_path, "old.json", guidellm_report())
    os.utime(report, (time.time() - 3600, time.time() - 3600))  # an earlier run's file
    client = [sys.executable, "-c", f"import urllib.request; urllib.request.urlopen('{metrics_server}/bump').read()"]
    with pytest.raises(SpecplugError) as e:
        record_from_files([str(report)], client=client, endpoint=metrics_server)
    assert "did not rewrite" in e.value.message and "--result-filename" in e.value.hint


def test_vllms_temperature_comes_from_metadata_or_the_clients_command_line(metrics_server, tmp_path):
    rep = read_report(_write(tmp_path, "m.json", {**vllm_result(), "temperature": "0"}))  # --metadata temperature=0
    assert rep.temperature == 0.0
    # Without either, the report cannot say what was sent: no claim that the client sent none.
    rec = to_record([read_report(_write(tmp_path, "v.json", vllm_result()))])
    assert any("does not say which temperature" in n and "--temperature" in n for n in rec.notes)
    assert not any("client sent no temperature" in n for n in rec.notes)
    src = _write(tmp_path, "src.json", vllm_result())
    for extra, want in ((["--temperature", "0.5"], 0.5), (["--temperature=0"], 0.0), ([], 1.0)):
        out = tmp_path / "out.json"
        rec = record_from_files([str(out)], client=_writing_client(metrics_server, src, out, *extra),
                                endpoint=metrics_server)
        assert rec.temperature == want
        assert not any("does not say" in n for n in rec.notes)
    assert any("client sent no temperature" in n for n in rec.notes)  # the argv had none: the server's default


def test_guidellm_rate_profiles_have_no_concurrency_but_throughput_caps_do(tmp_path):
    doc = guidellm_report()
    doc["benchmarks"][1]["config"]["strategy"] = {"type_": "constant", "rate": 2.0, "max_concurrency": 8}
    with pytest.raises(SpecplugError) as e:
        read_report(_write(tmp_path, "rate.json", doc))
    assert "rate profiles have no fixed concurrency" in e.value.message and "kind=concurrent" in e.value.hint
    doc["benchmarks"][1]["config"]["strategy"] = {"type_": "throughput", "max_concurrency": 8}
    assert [r.concurrency for r in read_report(_write(tmp_path, "tp.json", doc)).runs] == [1, 8]


@pytest.mark.parametrize("damage", [
    lambda d: d.update(latencies=[None, 1.2, 1.3, 0.0]),  # vLLM: a null latency
    lambda d: d.update(errors={"0": "x"}, ttfts=[0.2], latencies=[1.1], output_lens=[10]),
])
def test_a_malformed_vllm_result_is_a_damaged_report_not_a_crash(tmp_path, damage):
    doc = vllm_result()
    damage(doc)
    with pytest.raises(SpecplugError, match="damaged or from an unknown version"):
        read_report(_write(tmp_path, "bad.json", doc))


def test_a_malformed_guidellm_report_is_a_damaged_report_not_a_crash(tmp_path):
    for damage in (lambda b: b.update(config=["x"]), lambda b: b["metrics"].update(request_totals=[4])):
        doc = guidellm_report()
        damage(doc["benchmarks"][0])
        with pytest.raises(SpecplugError, match="damaged or from an unknown version"):
            read_report(_write(tmp_path, "bad.json", doc))
