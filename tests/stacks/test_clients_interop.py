"""The benchmark clients people already run, against `specplug launch embedded`, and specplug reading them.

One embedded server (the packaged SmolLM2-135M, n-gram speculation) serves the module. vLLM's own client
(`vllm bench serve`, from the pinned vLLM venv) and GuideLLM (pinned, in its own venv) each run a handful of
short requests at concurrency 1 and 4: every request must complete, and the output tokens each client reports
must equal what the server counted (`vllm:generation_tokens_total`, scraped before and after). The files they
write are then read by `specplug bench --from` and `specplug calibrate --from`, with the server's counters
scraped by specplug around a client it runs, or taken from vLLM's result where its client recorded them.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("fastapi")

MODEL = "smollm2-135m"
N = 4  # requests per concurrency
OUT = 12  # output tokens per request
# Text that repeats itself, so n-gram speculation drafts (and the counters the readers check move).
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The capital of France is Paris. The capital of Spain is Madrid. The capital of Italy is",
    "List three colours: red, green, blue. List three colours again: red,",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
]
CLIENT_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counter(base: str, name: str) -> float:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from specplug.errors import SpecplugError
    from specplug.launcher import launch
    from specplug.runtime import smollm2

    try:
        folder = smollm2.ensure_target()
    except SpecplugError as exc:
        pytest.skip(f"SmolLM2 unavailable: {exc}")
    run = tmp_path_factory.mktemp("embedded")
    port = _free_port()
    res = launch("embedded", model=MODEL, method="ngram", port=port, wait=False, timeout=600,
                 run_dir=str(run / "run"), out=io.StringIO())
    assert res.server is not None
    try:
        yield f"http://127.0.0.1:{port}", folder
    finally:
        res.server.stop()


@pytest.fixture(scope="module")
def env():
    return {**os.environ, **CLIENT_ENV}


def _vllm_argv(vllm_env: Path, base: str, tokenizer: Path, dataset: Path, out: Path, concurrency: int) -> list[str]:
    # At 1, the full length comes from vLLM's min_tokens (EOS held back) rather than ignore_eos.
    length = ["--extra-body", json.dumps({"min_tokens": OUT})] if concurrency == 1 else ["--ignore-eos"]
    return [
        str(vllm_env / "bin" / "vllm"), "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
        "--base-url", base, "--model", MODEL, "--tokenizer", str(tokenizer),
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--sharegpt-output-len", str(OUT),
        "--num-prompts", str(N), "--max-concurrency", str(concurrency), *length, "--temperature", "0",
        "--seed", "0", "--disable-tqdm", "--save-result", "--save-detailed",
        "--result-dir", str(out.parent), "--result-filename", out.name,
    ]


@pytest.fixture(scope="module")
def vllm_runs(server, vllm_env, env, tmp_path_factory, run_cli_module):
    """vLLM's client at concurrency 1 (run as a user would) and 4 (run by `specplug bench --from ... --`)."""
    base, tokenizer = server
    d = tmp_path_factory.mktemp("vllm-bench")
    dataset = d / "sharegpt.json"
    dataset.write_text(json.dumps([
        {"id": str(i), "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "ok"}]}
        for i, p in enumerate(PROMPTS)
    ]))
    runs = {}
    before = _counter(base, "vllm:generation_tokens_total")
    out1 = d / "vllm-c1.json"
    proc = subprocess.run(_vllm_argv(vllm_env, base, tokenizer, dataset, out1, 1), env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    runs[1] = (out1, _counter(base, "vllm:generation_tokens_total") - before, None)

    before = _counter(base, "vllm:generation_tokens_total")
    out4 = d / "vllm-c4.json"
    bench_dir = d / "bench-c4"
    with pytest.MonkeyPatch.context() as mp:  # the client runs under specplug, in this process's environment
        for k, v in CLIENT_ENV.items():
            mp.setenv(k, v)
        r = run_cli_module("bench", "--from", str(out4), "--endpoint", base, "-o", str(bench_dir), "--output", "json",
                           "--", *_vllm_argv(vllm_env, base, tokenizer, dataset, out4, 4))
    assert r.exit_code == 0, r.stdout[-2000:] + r.stderr[-4000:]
    runs[4] = (out4, _counter(base, "vllm:generation_tokens_total") - before, bench_dir / "bench.json")
    # vLLM's result file does not record the temperature: specplug read it from the client's argv.
    assert json.loads((bench_dir / "bench.json").read_text())["temperature"] == 0.0
    return runs


@pytest.mark.vllm
@pytest.mark.parametrize("concurrency", [1, 4])
def test_vllm_bench_serve_completes_every_request_and_counts_what_the_server_counted(vllm_runs, concurrency):
    path, counted, _ = vllm_runs[concurrency]
    res = json.loads(path.read_text())
    assert res["max_concurrency"] == concurrency
    assert (res["completed"], res["failed"]) == (N, 0), res.get("errors")
    assert res["output_lens"] == [OUT] * N
    assert res["total_output_tokens"] == counted == N * OUT


@pytest.mark.vllm
def test_specplug_bench_reads_vllm_results_with_scraped_and_reported_acceptance(vllm_runs, run_cli_module, tmp_path):
    # The run specplug wrapped: its bench.json has vLLM's figures and an acceptance.
    _, counted, bench_json = vllm_runs[4]
    rec = json.loads(bench_json.read_text())
    (level,) = rec["levels"]
    spec = level["speculative"]
    assert (level["concurrency"], spec["requests"], spec["failed"], spec["output_tokens"]) == (4, N, 0, counted)
    assert spec["ttft_s"]["p50"] > 0 and spec["tpot_s"]["p50"] > 0
    acc = spec["acceptance"]
    assert acc is not None and acc["draft_tokens"] > 0, rec["notes"]
    assert rec["stack"] == "embedded"
    # Both files read together, each a level; acceptance taken from vLLM's own spec_decode_* fields.
    out = tmp_path / "both"
    r = run_cli_module("bench", "--from", str(vllm_runs[1][0]), "--from", str(vllm_runs[4][0]), "-o", str(out),
                       "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    both = json.loads((out / "bench.json").read_text())
    assert [lv["concurrency"] for lv in both["levels"]] == [1, 4]
    for lv, c in zip(both["levels"], (1, 4), strict=True):
        assert lv["speculative"]["output_tokens"] == vllm_runs[c][1]
    for lv, c in zip(both["levels"], (1, 4), strict=True):
        own = json.loads(vllm_runs[c][0].read_text())  # vLLM's client scraped the counters itself
        got = lv["speculative"]["acceptance"]
        assert got["draft_tokens"] == own["spec_decode_draft_tokens"] > 0
        assert got["accepted_tokens"] == own["spec_decode_accepted_tokens"]
        assert got["drafts"] == own["spec_decode_num_drafts"]


@pytest.mark.vllm
def test_specplug_calibrate_from_vllm_results(vllm_runs, run_cli_module, tmp_path):
    cal = tmp_path / "calibration.yaml"
    r = run_cli_module("calibrate", "--from", str(vllm_runs[1][0]), "--from", str(vllm_runs[4][0]),
                       "--model", MODEL, "--method", "ngram", "--workload", "code", "--stack", "embedded",
                       "--temperature", "0", "-o", str(cal), "--output", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["method"] == "ngram" and rep["stack"] == "embedded" and rep["temperature"] == 0.0
    assert [row["concurrency"] for row in rep["rows"]] == [1, 4]
    own = [json.loads(vllm_runs[c][0].read_text()) for c in (1, 4)]
    for row, o in zip(rep["rows"], own, strict=True):
        assert row["measured"]["acceptance_length"] == pytest.approx(o["spec_decode_acceptance_length"])
    (entry,) = yaml.safe_load(cal.read_text())["entries"]
    assert entry["method"] == "ngram" and entry["stack"] == "embedded" and entry["temperature"] == 0.0
    assert 0 < entry["acceptance_rate"] < 1


@pytest.fixture(scope="module")
def guidellm_run(server, guidellm_env, tmp_path_factory, run_cli_module):
    """GuideLLM at 1 and 4 streams in one run, started by `specplug calibrate --from ... --` (which scrapes)."""
    base, tokenizer = server
    d = tmp_path_factory.mktemp("guidellm")
    data = d / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "output_tokens_count": OUT}) + "\n" for p in PROMPTS))
    report = d / "guidellm.json"
    argv = [
        str(guidellm_env / "bin" / "guidellm"), "run",
        "--backend", json.dumps({"kind": "openai_http", "target": base, "model": MODEL,
                                 "extras": {"body": {"temperature": 0}}}),
        "--profile", json.dumps({"kind": "concurrent", "streams": [1, 4]}),
        "--constraint", f"kind=max_requests,count={N}",
        "--data", f"kind=json_file,path={data}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={report}",
        "--disable-console-interactive",
    ]
    cal = d / "calibration.yaml"
    before = _counter(base, "vllm:generation_tokens_total")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in CLIENT_ENV.items():
            mp.setenv(k, v)
        r = run_cli_module("calibrate", "--from", str(report), "--endpoint", base, "--model", MODEL, "--method",
                           "ngram", "--workload", "chat", "-o", str(cal), "--output", "json", "--", *argv)
    counted = _counter(base, "vllm:generation_tokens_total") - before
    return report, counted, r, cal


def test_guidellm_completes_every_request_and_counts_what_the_server_counted(guidellm_run):
    report, counted, r, _ = guidellm_run
    assert report.exists(), r.stdout[-2000:] + r.stderr[-4000:]
    data = json.loads(report.read_text())
    assert data["metadata"]["guidellm_version"] == "0.8.1"
    benches = data["benchmarks"]
    assert [b["config"]["strategy"]["streams"] for b in benches] == [1, 4]
    total = 0
    for b in benches:
        m = b["metrics"]
        assert m["request_totals"]["errored"] == 0 and m["request_totals"]["successful"] == N
        total += m["output_token_count"]["successful"]["total_sum"]
        total += sum(q.get("output_tokens") or 0 for q in b["requests"].get("incomplete") or [])
    assert total == counted == 2 * N * OUT


def test_specplug_calibrate_from_a_guidellm_report_with_scraped_counters(guidellm_run, run_cli_module, tmp_path):
    report, counted, r, cal = guidellm_run
    assert r.exit_code == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rep = json.loads(r.stdout)
    # The stack comes from the server's metric names, the temperature from the requests GuideLLM sent.
    assert (rep["method"], rep["stack"], rep["temperature"]) == ("ngram", "embedded", 0.0)
    assert [row["concurrency"] for row in rep["rows"]] == [1, 4]
    (entry,) = yaml.safe_load(cal.read_text())["entries"]
    assert entry["stack"] == "embedded" and 0 < entry["acceptance_rate"] < 1
    # The same report through `specplug bench --from`: its two levels, with GuideLLM's token counts.
    out = tmp_path / "gl"
    b = run_cli_module("bench", "--from", str(report), "-o", str(out), "--output", "json")
    assert b.exit_code == 0, b.stdout + b.stderr
    rec = json.loads((out / "bench.json").read_text())
    assert [lv["concurrency"] for lv in rec["levels"]] == [1, 4]
    assert sum(lv["speculative"]["output_tokens"] for lv in rec["levels"]) == counted
    assert all(lv["speculative"]["failed"] == 0 and lv["speculative"]["requests"] == N for lv in rec["levels"])
