"""The Python API measures, calibrates, tunes and reads traffic with click and rich unimportable: the library returns data and
reports progress through callbacks, and only the CLI draws tables and bars (issue 37, library and face apart).

The test runs this module in a fresh interpreter with ``sys.modules["rich"]`` and ``sys.modules["click"]`` set to
None, so any import of them, lazy or not, raises. The endpoint is a small fake OpenAI-compatible server that streams
completions and exposes vLLM's speculative-decoding counters."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNE_CONFIG = "model: smollm2-135m\nstack: embedded\nspeculation: {method: ngram, num_speculative_tokens: 3}\n"


class _FakeServer(BaseHTTPRequestHandler):
    """/v1/models, streamed /v1/completions (four text chunks, then usage) and /metrics whose counters move with
    every completion: per completion 1 draft of 4 tokens, 2 accepted."""

    completions = 0

    def do_GET(self) -> None:
        if self.path.startswith("/v1/models"):
            self._send(json.dumps({"data": [{"id": "fake"}]}), "application/json")
        elif self.path.startswith("/metrics"):
            n = type(self).completions
            self._send(f'vllm:spec_decode_num_drafts_total{{model_name="fake"}} {n}\n'
                       f'vllm:spec_decode_num_draft_tokens_total{{model_name="fake"}} {4 * n}\n'
                       f'vllm:spec_decode_num_accepted_tokens_total{{model_name="fake"}} {2 * n}\n'
                       f'vllm:generation_tokens_total{{model_name="fake"}} {4 * n}\n', "text/plain")
        else:
            self._send("", "text/plain", 404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).completions += 1
        chunks = [{"choices": [{"text": f"t{i} "}]} for i in range(4)] + [{"choices": [], "usage": {"completion_tokens": 4}}]
        self._send("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n", "text/event-stream")

    def _send(self, body: str, kind: str, status: int = 200) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _bench_and_calibrate(tmp: Path) -> None:
    from specplug.bench import missing_httpx
    from specplug.bench.calibrate import calibrate
    from specplug.bench.prompts import Prompt
    from specplug.bench.session import measure

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    ticks: list[tuple[str, int]] = []
    try:
        record, written = measure(
            endpoint=url, baseline=url, levels=[1, 2], prompts=[Prompt(id=f"p{i}", prompt=f"hi {i}") for i in range(4)],
            workload="chat", num_prompts=4, max_tokens=8, out_dir=tmp / "bench",
            tick=lambda role, conc, done: ticks.append((role, conc)),
        )
    finally:
        srv.shutdown()
    assert record.complete and record.stack == "vllm" and [lv.concurrency for lv in record.levels] == [1, 2]
    assert ("speculative", 1) in ticks and ("baseline", 2) in ticks
    assert (tmp / "bench" / "bench.json") in written
    rep = calibrate(record, model="smollm2-135m", method="ngram", workload=None, out=tmp / "calibration.yaml",
                    gpu="h100")
    assert rep.num_speculative_tokens == 4 and rep.rows and rep.rows[0].measured.acceptance_length == 3.0
    assert (tmp / "calibration.yaml").is_file()
    assert str(missing_httpx()).startswith("Measuring an endpoint (specplug.bench) needs httpx")


def _tune(tmp: Path) -> None:
    from specplug.bench.prompts import Prompt
    from specplug.config import load_config
    from specplug.tune import runner, session
    from specplug.tune.settings import TuneSettings
    from tests.tune.helpers import trial

    # The trials' launches are faked (tests/tune/test_session.py does the same); planning, the run loop, the
    # decision and its write-back are the library's own.
    runner.trial_plan = lambda *a, **k: None
    runner.free_port = lambda: 0
    speeds = {"control": [100.0, 102.0]}
    runner.run_trial = lambda t, *a, **k: trial(t.id, t.method, t.k, {1: speeds.get(t.id, [200.0, 202.0])})
    cfg_path = tmp / "specplug.yaml"
    cfg_path.write_text(TUNE_CONFIG)
    cfg = load_config(cfg_path)
    settings = TuneSettings(concurrency=[1], repeats=2, ks=[3], candidates=1)
    prompts = [Prompt(id=f"p{i}", prompt=f"hi {i}") for i in range(4)]
    p = session.prepare(cfg, cfg_path, settings, prompts, tmp / "tune")
    assert [t.id for t in p.plan.trials] == ["control", "ngram-k3"] and not p.done
    notes: list[str] = []

    class Collected:
        def start(self, trial, index, count): pass
        def tick(self, trial_id, level, done): pass
        def finish(self, trial, result, requests_done): notes.extend(session.outcome(trial, result))
        def note(self, text): notes.append(text)

    ok = session.run_trials(cfg, cfg_path, p.plan, settings, prompts, p.state, tmp / "tune", p.requests_at,
                            reporter=Collected())
    assert ok and any(n.startswith("control done in") for n in notes)
    rep = session.finish(cfg, cfg_path, p.rec, p.plan, settings, p.state, tmp / "tune", "workload chat",
                         {"spec": {}, "traffic": None}, ok, True)
    assert rep.decision.speculate and (tmp / "tune" / "tune.json").is_file()
    assert load_config(cfg_path).speculation.method == "ngram" and (tmp / "specplug.lock.yaml").is_file()


def _traffic(tmp: Path) -> None:
    from specplug.catalog import Model
    from specplug.traffic import load_traffic

    path = tmp / "traffic.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"fix line {i} of the code", "completion": f"fixed line {i}"}) + "\n"
                            for i in range(20)))
    seen: list[tuple[str, int]] = []

    class Recorded:
        def start(self, total_bytes): seen.append(("start", total_bytes))
        def advance(self, nbytes): seen.append(("advance", nbytes))
        def stop(self): seen.append(("stop", 0))

    prof = load_traffic(path, Model(hf_id="test/no-tokenizer-here"), progress=Recorded())
    assert prof.replayed == 20
    size = path.stat().st_size
    assert seen[0] == ("start", size) and seen[-1] == ("stop", 0) and sum(n for w, n in seen if w == "advance") == size


def main(tmp: Path) -> None:
    for name in ("rich", "click"):
        sys.modules[name] = None  # type: ignore[assignment]  # any import of them now raises ImportError
    _bench_and_calibrate(tmp)
    _tune(tmp)
    _traffic(tmp)
    assert not any(m.split(".")[0] in ("rich", "click") and sys.modules[m] is not None for m in sys.modules)
    print("ok")


def test_bench_calibrate_and_tune_run_with_click_and_rich_unimportable(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tests.test_library_without_face", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
