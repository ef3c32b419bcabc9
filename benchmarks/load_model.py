"""The continuous-batching load model (specplug.policy.load) against real servers under Poisson load.

    .venv/bin/python benchmarks/load_model.py --quick              # both servers, 4 rates x 2 repeats: about 45 minutes
    .venv/bin/python benchmarks/load_model.py --servers embedded   # one server, 6 rates
    .venv/bin/python benchmarks/load_model.py --json out.json      # the rows as JSON too
    .venv/bin/python benchmarks/load_model.py --quick --replay DIR # report again from a --keep folder, no servers

Serves the packaged SmolLM2-135M with the embedded server (specplug.runtime.server) and with vLLM's CPU build
(from ~/.cache/specplug/stackenvs/vllm; skipped with a message when that venv is absent), each without and with
n-gram speculation, both arms served at once (an idle server waits without computing). Per server and arm it:

1. calibrates the arm from one short closed-loop profile (`vllm bench serve --max-concurrency c` at a few c, the
   capacity among them). Both servers stream one chunk per decode step, so step_ms(batch) runs piecewise linear
   through the median gap between chunks at each c, and tokens_per_step(batch) through the output tokens per chunk
   (1 without speculation; with it, steps that found no draft count too), and TPOT p50 through the median
   request's share of that (prompts speculate unevenly). prefill_ms is TTFT p50 at concurrency 1.
   How long a joining request holds up the others follows how the stack schedules prefills (its capabilities'
   mixes_prefill): all of it where a prefill is a pass of its own, its excess over a step where it rides in the
   running batch's step (vLLM's V1 scheduler, the embedded server's chunked prefill). Capacity is the server's cap on
   running requests. The closed-loop TPOT is not used: its requests start and end in waves, so it holds far fewer
   prefill stalls than Poisson arrivals; the spec-decode counters' acceptance length is printed, not used (it leaves
   out steps without a draft);
2. predicts, with specplug.policy.load, TPOT p50, TTFT p50 and output tokens/s per request rate, the saturation
   rate and (per server) the crossover rate above which speculation stops lowering TPOT;
3. measures the same with `vllm bench serve --request-rate R` (Poisson arrivals) at 4 (quick) or 6 rates spread
   up to and past the baseline's predicted saturation, the same rates for both arms, `--repeats` times each (one
   arrival seed per repeat, the same seeds for both arms; each run sends every prompt equally often), the arms
   back to back and in turn first; the model is given the rate the client's send times realised (a short Poisson
   run strays from its nominal rate), printed beside it;
4. re-times the machine before each of those runs: the profile's first point (one stream, every prompt) again, its
   median request latency over the profile's. A shared CPU's speed drifts within minutes, and the calibration ran
   minutes before; each run's prediction scales the arm's step and prefill costs by that ratio, and each arm's
   saturation and the crossover are predicted on the arm's mean re-timing over the run (the two calibrations ran
   minutes apart too), with the calibration alone's figures printed beside. The re-timing is a closed-loop run of
   the profile, not the Poisson run it stands beside.

The measured crossover counts only what the repeats cannot explain, as `tune` does: at a rate speculation wins
when its slowest repeat's TPOT p50 beats the baseline's fastest, loses when its fastest is slower than the
baseline's slowest, and ties otherwise. The crossover lies after the last win before the first loss, and at or
before that loss; without a loss, speculation is measured not to lose at any rate.

The rates are chosen from the baseline's calibration (before any rate is measured). Of a Poisson run, only its
realised arrival rate (the load it was given, read from the client's send times) reaches the model; no latency or
throughput it measured does (step 4's re-timings are closed-loop runs of the profile beside it). Printed: predicted
vs measured per rate, the median |ln(predicted/measured)| for TPOT and throughput below saturation, and predicted
vs measured crossover and saturation rates. Output tokens/s is measured in steady state: tokens produced between
one median latency after the first request and the last arrival, over that window (a run's ramp-up and drain are
left out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling _servers and _prompts
from _servers import free_port, stop  # noqa: E402
from _servers import start as start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specplug.policy.load import Arm, LoadPoint, crossover_rate, predict, saturation_rate  # noqa: E402
from specplug.stackcaps import declared  # noqa: E402

MODEL_NAME = "smollm2-135m"
MODEL_DIR = Path.home() / ".cache" / "specplug" / "models" / MODEL_NAME
VLLM_ENV = Path(os.environ.get("SPECPLUG_STACKENVS") or Path.home() / ".cache" / "specplug" / "stackenvs") / "vllm"
CLIENT_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Text that repeats itself, so n-gram speculation finds drafts (code edits, quoting, lists).
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The capital of France is Paris. The capital of Spain is Madrid. The capital of Italy is",
    "List three colours: red, green, blue. List three colours again: red,",
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
    "Rename the variable total to acc in this code and print it back:\n\ndef total_of(xs):\n    total = 0\n"
    "    for x in xs:\n        total += x\n    return total\n\nRenamed code:\n\ndef total_of(xs):\n",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n  <li>cherry</li>\n</ul>\nThe same list with a fourth item:\n<ul>\n",
    "Context: The Eiffel Tower is a wrought-iron lattice tower in Paris, named after the engineer Gustave Eiffel.\n"
    "Question: Who is the Eiffel Tower named after? Quote the context.\nAnswer: It is named after",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(j)\nfor k in range(10):\n",
]
# A server keeps up with a rate while its steady output is at least this share of what arrives: a 20-40 s window
# holds only 8-40 Poisson arrivals, whose count alone strays by 15-35%.
KEPT_UP = 0.8
# Fractions of the baseline's predicted saturation rate measured (the last ones past it).
RATE_FRACTIONS = {"quick": (0.25, 0.55, 0.85, 1.2), "full": (0.2, 0.4, 0.6, 0.8, 1.0, 1.3)}


@dataclass
class Setup:
    quick: bool
    output_len: int
    capacity: int
    k: int
    threads: int
    profile_concurrency: list[int]
    rate_window_s: float
    work: Path
    repeats: int = 2
    replay: bool = False  # read the client's saved results in ``work`` instead of starting servers


@dataclass
class Measured:
    """One `vllm bench serve` run."""

    completed: int
    failed: int
    tpot_ms_p50: float | None
    ttft_ms_p50: float | None
    tokens_per_s: float
    requests_per_s: float
    arrival_rate: float | None = None  # the Poisson arrivals' realised rate (a short run strays from the nominal)
    acceptance_length: float | None = None
    itl_ms_p50: float | None = None  # the median gap between streamed chunks: one decode step
    tokens_per_chunk: float | None = None  # mean over requests of output tokens per streamed chunk
    tokens_per_chunk_median: float | None = None  # the median request's
    latency_ms_p50: float | None = None  # median request latency, request sent to last token received


@dataclass
class ArmResult:
    server: str
    arm: str
    arm_model: Arm | None = None
    calibration: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)

    def retimings(self) -> list[float]:
        """Every re-timing of this arm's runs (the machine's time over its calibration's)."""
        return [x for row in self.rows for x in row.get("speeds") or [] if x is not None]

    def during_run(self) -> Arm:
        """The calibrated arm on the machine as its re-timings read it on average (as calibrated: none made)."""
        return scaled(self.arm_model, machine_factor(self.retimings()) or 1.0)


def machine_factor(speeds: list[float | None]) -> float | None:
    """The mean of the re-timings made (None: none was)."""
    known = [x for x in speeds if x is not None]
    return statistics.fmean(known) if known else None


def server_argv(server: str, method: str, s: Setup, port: int) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, **CLIENT_ENV}
    if server == "embedded":
        argv = [sys.executable, "-m", "specplug.runtime.server", "--model", MODEL_NAME, "--method", method,
                "--port", str(port), "--max-batch-size", str(s.capacity), "--threads", str(s.threads),
                "--dtype", "float32", "--log-level", "warning"]
        if method != "none":
            argv += ["-k", str(s.k), "--no-pace"]  # a fixed k, as the model assumes
        return argv, env
    argv = [str(VLLM_ENV / "bin" / "vllm"), "serve", str(MODEL_DIR), "--served-model-name", MODEL_NAME,
            "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", str(s.capacity), "--host", "127.0.0.1",
            "--port", str(port)]
    if method != "none":
        argv += ["--speculative-config", json.dumps({"method": method, "num_speculative_tokens": s.k,
                                                       "prompt_lookup_max": 4, "prompt_lookup_min": 2})]
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu")
    return argv, env


def start(server: str, method: str, s: Setup) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    argv, env = server_argv(server, method, s, port)
    log = s.work / f"{server}-{method}.log"
    proc, base = start_server(argv, env, REPO, log, f"{server} ({method})", port)
    return proc, base, log


def stack_version(server: str) -> str | None:
    """The vLLM version in the pinned venv (its distribution's metadata folder); None for the embedded server."""
    if server != "vllm":
        return None
    found = sorted(VLLM_ENV.glob("lib/python*/site-packages/vllm-*.dist-info"))  # not vllm_cpu's, nor a plugin's
    return found[-1].name.removesuffix(".dist-info").split("-")[1].split("+")[0] if found else None


def counters(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_") and "per_pos" not in line:
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0]
            out[key] = out.get(key, 0.0) + float(value)
    return out


def acceptance_between(before: dict[str, float], after: dict[str, float]) -> float | None:
    drafts = after.get("vllm:spec_decode_num_drafts_total", 0.0) - before.get("vllm:spec_decode_num_drafts_total", 0.0)
    acc = (after.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
           - before.get("vllm:spec_decode_num_accepted_tokens_total", 0.0))
    return 1.0 + acc / drafts if drafts > 0 else None


def dataset(s: Setup, size: int) -> Path:
    """The client's prompt file: ``size`` rows, each prompt in turn (a run of ``size`` requests, in whatever order the
    client shuffles them, sends every prompt equally often when ``size`` is a multiple of their count)."""
    path = s.work / f"prompts-{size}.json"
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": PROMPTS[i % len(PROMPTS)]},
                                             {"from": "gpt", "value": "ok"}]} for i in range(size)]
    path.write_text(json.dumps(rows))
    return path


def bench(base: str, s: Setup, n: int, *, rate: float | None = None, concurrency: int | None = None,
          tag: str, seed: int = 0) -> Measured:
    """One `vllm bench serve` run: Poisson arrivals at ``rate``, or a closed loop of ``concurrency`` streams;
    the prompts from a file of exactly ``n`` rows, so that a run of a whole number of rounds over them sends each
    equally often (acceptance and prefill vary by prompt: a run that drew other prompts than the next would read as
    a change of load)."""
    out = s.work / f"{tag}.json"
    if s.replay:
        if not out.exists():
            raise SystemExit(f"--replay: {out} is missing (a --keep folder of a run with the same options holds it)")
        return measured(json.loads(out.read_text()))
    argv = [str(VLLM_ENV / "bin" / "vllm"), "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
            "--base-url", base, "--model", MODEL_NAME, "--tokenizer", str(MODEL_DIR), "--dataset-name", "sharegpt",
            "--dataset-path", str(dataset(s, n)), "--sharegpt-output-len", str(s.output_len), "--num-prompts", str(n),
            "--ignore-eos", "--temperature", "0", "--seed", str(seed), "--disable-tqdm", "--save-result", "--save-detailed",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--result-dir", str(out.parent), "--result-filename", out.name]
    argv += ["--request-rate", f"{rate:.4f}"] if rate else ["--request-rate", "inf", "--max-concurrency", str(concurrency)]
    before = counters(base)
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **CLIENT_ENV}, timeout=1800,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-2500:]}")
    after = counters(base)
    return measured(json.loads(out.read_text()), acceptance_between(before, after))


def measured(res: dict, acceptance_length: float | None = None) -> Measured:
    """One run's figures from the client's detailed result file. A run that completed nothing has no latencies (the
    client writes its empty medians as 0)."""
    served = res["completed"] > 0
    return Measured(completed=res["completed"], failed=res.get("failed", 0),
                    tpot_ms_p50=res.get("median_tpot_ms") if served else None,
                    ttft_ms_p50=res.get("median_ttft_ms") if served else None, tokens_per_s=steady_tokens_per_s(res),
                    requests_per_s=res["request_throughput"], arrival_rate=arrival_rate(res),
                    acceptance_length=acceptance_length, latency_ms_p50=_median_latency_ms(res), **chunk_figures(res))


def _median_latency_ms(res: dict) -> float | None:
    lats = [x for x in res.get("latencies") or [] if x]
    return 1000.0 * statistics.median(lats) if lats else None


def chunk_figures(res: dict) -> dict[str, float]:
    """The median gap between streamed chunks (ms) and the mean and median request's output tokens per chunk, from
    the detailed result."""
    gaps = [g for gs in res.get("itls") or [] for g in gs or []]
    per = [n / (1 + len(gs or [])) for n, gs in zip(res.get("output_lens") or [], res.get("itls") or [], strict=False) if n]
    out = {}
    if gaps:
        out["itl_ms_p50"] = 1000.0 * statistics.median(gaps)
    if per:
        out["tokens_per_chunk"] = statistics.fmean(per)
        out["tokens_per_chunk_median"] = statistics.median(per)
    return out


def arrival_rate(res: dict) -> float | None:
    starts = sorted(res.get("start_times") or [])
    return (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 2 and starts[-1] > starts[0] else None


def steady_tokens_per_s(res: dict) -> float:
    """Output tokens/s between one median latency after the first request (the ramp-up left out) and the last
    arrival (the drain left out); the whole run's figure when that window is too short."""
    starts, ttfts, itls = res.get("start_times") or [], res.get("ttfts") or [], res.get("itls") or []
    lat_ms = _median_latency_ms(res)
    if not starts or lat_ms is None or len(starts) != len(ttfts):
        return float(res["output_throughput"])
    t0 = min(starts) + lat_ms / 1000.0
    t1 = max(starts)
    if t1 - t0 < 2.0:
        return float(res["output_throughput"])
    lens = res.get("output_lens") or []
    count = 0.0
    for i, (st, ttft, gaps) in enumerate(zip(starts, ttfts, itls, strict=False)):
        if not ttft:
            continue
        # One entry per streamed chunk, and a speculative step streams several tokens in one: each chunk
        # carries the request's tokens over its chunks.
        chunks = 1 + len(gaps or [])
        per = (lens[i] / chunks) if i < len(lens) and lens[i] else 1.0
        t = st + ttft
        count += per * (t0 <= t <= t1)
        for g in gaps or []:
            t += g
            count += per * (t0 <= t <= t1)
    return count / (t1 - t0)


def calibrate(base: str, s: Setup, tag: str, mixes_prefill: bool) -> tuple[Arm, dict]:
    """The arm's step cost, acceptance and prefill from a short closed-loop profile; ``mixes_prefill``: the stack runs
    a joining prefill inside the running batch's step (its capabilities)."""
    pts = []
    for c in s.profile_concurrency:
        # Every point sends each prompt equally often: acceptance and prefill vary by prompt, and a point that saw
        # other prompts than the next would read as a step cost or tokens per step that vary with the batch.
        m = bench(base, s, profile_size(s, c), concurrency=c, tag=f"{tag}-profile-c{c}")
        pts.append((c, m))
    first = pts[0][1]
    prefill = first.ttft_ms_p50 or 0.0
    xs = [float(c) for c, _ in pts]
    step_ms = _through(xs, [m.itl_ms_p50 or m.tpot_ms_p50 or 0.0 for _, m in pts])
    per_step = _through(xs, [m.tokens_per_chunk or 1.0 for _, m in pts], rising=False)
    slope = (step_ms(s.capacity) - step_ms(1)) / max(1, s.capacity - 1)
    accs = [m.acceptance_length for _, m in pts if m.acceptance_length]
    # TPOT p50 is the median request's: where prompts speculate unevenly it emits fewer tokens per step than the mean.
    shares = [m.tokens_per_chunk_median / m.tokens_per_chunk for _, m in pts
              if m.tokens_per_chunk and m.tokens_per_chunk_median]
    share = statistics.fmean(shares) if shares else 1.0
    arm = Arm(step_ms=step_ms, tokens_per_step=per_step, prefill_ms=prefill, capacity=s.capacity,
              mixes_prefill=mixes_prefill, median_share=share)
    info = {"step_ms_at_1": round(step_ms(1), 2), "step_ms_per_request": round(slope, 3), "prefill_ms": round(prefill, 1),
            "stall_ms": round(arm.stall_ms, 1), "mixes_prefill": mixes_prefill,
            "tokens_per_step": [round(m.tokens_per_chunk or 1.0, 3) for _, m in pts], "median_share": round(share, 3),
            "acceptance_length": round(statistics.fmean(accs), 3) if accs else None, "capacity": s.capacity,
            "profile": [{"concurrency": c, "tpot_ms_p50": m.tpot_ms_p50, "itl_ms_p50": m.itl_ms_p50,
                         "latency_ms_p50": m.latency_ms_p50,
                         "ttft_ms_p50": m.ttft_ms_p50, "requests_per_s": round(m.requests_per_s, 3)} for c, m in pts]}
    return arm, info


def profile_size(s: Setup, c: int) -> int:
    """Requests in the profile point at concurrency ``c``: a whole number of rounds over the prompts."""
    return math.ceil((max(4, 2 * c) if s.quick else max(6, 3 * c)) / len(PROMPTS)) * len(PROMPTS)


def rate_size(s: Setup, rate: float) -> int:
    """Requests in a Poisson run at ``rate``: about the rate window's arrivals, a whole number of rounds over the
    prompts, at least one round and at most 6 (12 in a full run)."""
    rounds = round(rate * s.rate_window_s / len(PROMPTS))
    return len(PROMPTS) * min(max(1, rounds), 6 if s.quick else 12)


def retime(base: str, s: Setup, tag: str, info: dict) -> float | None:
    """The machine's time now over the calibration's: the profile's first point (one stream, every prompt) run
    again, its median request latency over the profile's (a median: one request held up by a hiccup of the machine
    would move a mean). Same prompts, same greedy outputs, the same prefix cache (the warm-up sent every
    prompt), so only the machine differs. None for a replayed run that saved no re-timing."""
    if s.replay and not (s.work / f"{tag}.json").exists():
        return None
    c = s.profile_concurrency[0]
    m = bench(base, s, profile_size(s, c), concurrency=c, tag=tag)
    then = info["profile"][0].get("latency_ms_p50")
    return m.latency_ms_p50 / then if m.latency_ms_p50 and then else None


def scaled(arm: Arm, factor: float) -> Arm:
    """The arm on a machine ``factor`` times slower: every step and prefill costs that much more."""
    if factor == 1.0:
        return arm
    step = arm.step_ms
    return replace(arm, step_ms=lambda b: factor * step(b), prefill_ms=factor * arm.prefill_ms,
                   absorbed_ms=None if arm.absorbed_ms is None else factor * arm.absorbed_ms)


def mean_point(points: list[LoadPoint]) -> LoadPoint:
    """The repeats' predictions as one (means; TTFT None where any repeat's is)."""
    def avg(xs: list[float | None]) -> float | None:
        return None if any(x is None for x in xs) else statistics.fmean(xs)

    return LoadPoint(request_rate=statistics.fmean(p.request_rate for p in points),
                     running_batch=statistics.fmean(p.running_batch for p in points),
                     tpot_ms_p50=statistics.fmean(p.tpot_ms_p50 for p in points),
                     tpot_ms_p90=statistics.fmean(p.tpot_ms_p90 for p in points),
                     ttft_ms_p50=avg([p.ttft_ms_p50 for p in points]), ttft_ms_p90=avg([p.ttft_ms_p90 for p in points]),
                     output_tokens_per_s=statistics.fmean(p.output_tokens_per_s for p in points),
                     saturated=any(p.saturated for p in points))


def _through(xs: list[float], ys: list[float], rising: bool = True) -> Callable[[int], float]:
    """A figure by batch, piecewise linear through the profile's points (batch, value): a speculative pass turns
    compute-bound within the capacity, where a line through the small batches would not follow it. Below the
    first point its value; past the last, the last segment's slope (at least flat) with ``rising``, flat without. With
    ``rising`` (a step's cost) a larger batch never costs less: each point is at least the one before (a noisy
    small-batch profile can read high)."""
    pts: list[tuple[float, float]] = []
    for x, y in sorted(zip(xs, ys, strict=True)):
        pts.append((x, max(y, pts[-1][1]) if pts and rising else y))

    def step_ms(b: int) -> float:
        if len(pts) == 1 or b <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if b <= x1:
                return y0 + (y1 - y0) * (b - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = pts[-2], pts[-1]
        slope = (y1 - y0) / (x1 - x0)
        return y1 + (max(0.0, slope) if rising else 0.0) * (b - x1)

    return step_ms


def run_server(server: str, s: Setup) -> tuple[ArmResult, ArmResult]:
    """Both arms served at once (an idle server waits without computing): each calibrated, then every rate measured
    with the arms back to back, in turn first and last, so that a machine changing speed weighs on both alike.
    The rates come from the baseline's saturation."""
    arms = [(m, ArmResult(server=server, arm="none" if m == "none" else f"{m} k={s.k}")) for m in ("none", "ngram")]
    procs, bases = [], {}
    try:
        for method, _ in arms:
            if s.replay:
                bases[method] = ""
                continue
            proc, bases[method], _ = start(server, method, s)
            procs.append(proc)
            # First passes allocate and compile; every prompt once, so that the profile and every run after it find
            # the same prompts in the prefix cache.
            bench(bases[method], s, len(PROMPTS), concurrency=1, tag=f"{server}-{method}-warmup")
        mixes = declared(server, stack_version(server)).mixes_prefill
        for method, res in arms:
            res.arm_model, res.calibration = calibrate(bases[method], s, f"{server}-{method}", mixes)
        rates = choose_rates(server, arms[0][1].arm_model, s)
        for _, res in arms:
            print(f"  {server} {res.arm}: calibrated {res.calibration}", flush=True)
        print(f"  rates {rates}", flush=True)
        turn = 0
        for r in rates:
            got: dict[str, tuple[list[Measured], list[LoadPoint], list[float | None]]] = {
                method: ([], [], []) for method, _ in arms}
            for i in range(s.repeats):
                for method, res in arms if turn % 2 == 0 else arms[::-1]:
                    reps, preds, speeds = got[method]
                    tag = f"{server}-{method}-r{r:g}-s{i}"
                    speeds.append(retime(bases[method], s, f"{tag}-retime", res.calibration))
                    reps.append(bench(bases[method], s, rate_size(s, r), rate=r, tag=tag, seed=i))
                    # The model is given the load that arrived (the client's send times), not the nominal rate, on
                    # the machine as fast as it was just before.
                    arm = scaled(res.arm_model, speeds[-1] or 1.0)
                    preds.append(predict(arm, reps[-1].arrival_rate or r, s.output_len))
                turn += 1
            for method, res in arms:
                reps, preds, speeds = got[method]
                m, p = mean_of(reps), mean_point(preds)
                res.rows.append({"rate": r, "n": reps[0].completed + reps[0].failed, "failed": m.failed, "pred": p,
                                 "meas": m, "repeats": reps, "speeds": speeds})
                f = machine_factor(speeds)
                machine = "machine not re-timed" if f is None else f"machine {f:.3f}x the calibration's time"
                print(f"    {res.arm} at {r:g}/s (arrived {m.arrival_rate or r:.3g}/s, {machine}): TPOT p50 "
                      f"{p.tpot_ms_p50:.1f} pred vs {m.tpot_ms_p50 or 0:.1f} ms measured "
                      f"({', '.join(_fmt(x.tpot_ms_p50) for x in reps)}), tokens/s {p.output_tokens_per_s:.1f} vs "
                      f"{m.tokens_per_s:.1f}", flush=True)
    finally:
        for proc in procs:
            try:
                stop(proc)
            except OSError as e:  # one that went already must not leave the other running
                print(f"  stopping a {server} server: {e}", file=sys.stderr)
    return arms[0][1], arms[1][1]


def choose_rates(server: str, base: Arm, s: Setup) -> list[float]:
    """Fractions of the baseline's predicted saturation (before any rate is measured); a replay reads the rates its
    run measured from its result files' names."""
    if s.replay:
        return sorted({float(f.name.split("-r", 1)[1].split("-s", 1)[0])
                       for f in s.work.glob(f"{server}-none-r*-s0.json")})
    sat = saturation_rate(base, s.output_len)
    return [float(f"{sat * f:.3g}") for f in RATE_FRACTIONS["quick" if s.quick else "full"]]


def mean_of(reps: list[Measured]) -> Measured:
    """The repeats of one rate as one row: means of each figure (failures summed)."""

    def avg(xs: list[float | None]) -> float | None:
        got = [x for x in xs if x is not None]
        return statistics.fmean(got) if got else None

    return Measured(completed=sum(m.completed for m in reps), failed=sum(m.failed for m in reps),
                    tpot_ms_p50=avg([m.tpot_ms_p50 for m in reps]), ttft_ms_p50=avg([m.ttft_ms_p50 for m in reps]),
                    tokens_per_s=statistics.fmean(m.tokens_per_s for m in reps),
                    requests_per_s=statistics.fmean(m.requests_per_s for m in reps),
                    arrival_rate=avg([m.arrival_rate for m in reps]),
                    acceptance_length=avg([m.acceptance_length for m in reps]),
                    itl_ms_p50=avg([m.itl_ms_p50 for m in reps]), tokens_per_chunk=avg([m.tokens_per_chunk for m in reps]),
                    tokens_per_chunk_median=avg([m.tokens_per_chunk_median for m in reps]),
                    latency_ms_p50=avg([m.latency_ms_p50 for m in reps]))


def measured_saturation(rows: list[dict], output_len: int) -> tuple[float | None, float | None]:
    """(last rate kept up with, first rate not): a rate is not kept up with once steady output falls below
    KEPT_UP of what arrives."""
    prev = None
    for row in rows:
        if row["meas"].tokens_per_s < KEPT_UP * (row["meas"].arrival_rate or row["rate"]) * output_len:
            return prev, row["rate"]
        prev = row["rate"]
    return prev, None


def verdict(base_row: dict, spec_row: dict) -> str:
    """'win', 'loss' or 'tie' for speculation at one rate, beyond the spread of the repeats (see the module doc)."""
    bt = [m.tpot_ms_p50 for m in base_row.get("repeats") or [base_row["meas"]] if m.tpot_ms_p50 is not None]
    st = [m.tpot_ms_p50 for m in spec_row.get("repeats") or [spec_row["meas"]] if m.tpot_ms_p50 is not None]
    if not st:
        return "loss"  # speculation's runs gave no TPOT: it did not serve this rate
    if not bt:
        return "win"  # the baseline's did not, and speculation's did
    if max(st) < min(bt):
        return "win"
    return "loss" if min(st) > max(bt) else "tie"


def measured_crossover(base: ArmResult, spec: ArmResult) -> tuple[float | None, float | None]:
    """(last rate where speculation won before it first lost, first rate where it lost); (last win, None) when it
    never lost."""
    last_win = None
    for b, sp in zip(base.rows, spec.rows, strict=True):
        v = verdict(b, sp)
        if v == "loss":
            return last_win, b["rate"]
        if v == "win":
            last_win = b["rate"]
    return last_win, None


def _fmt(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def report(server: str, base: ArmResult, spec: ArmResult, s: Setup) -> dict:
    errs_tpot, errs_tok = [], []
    factors = {a.arm: machine_factor(a.retimings()) for a in (base, spec)}
    retimed = any(f is not None for f in factors.values())
    print(f"\n{server}: SmolLM2-135M, {s.output_len} output tokens, capacity {s.capacity}, n-gram k={s.k}; "
          + ("predictions on the machine as re-timed before each run (machine: its time over the calibration's; "
             "-: not re-timed)"
             if retimed else "predictions from the calibration alone (not re-timed)"))
    print(f"{'arm':<14}{'rate/s':>8}{'arrived':>9}{'machine':>9}{'TPOT pred':>11}{'TPOT meas':>11}{'TTFT pred':>11}"
          f"{'TTFT meas':>11}{'tok/s pred':>12}{'tok/s meas':>12}{'batch pred':>12}")
    out_rows = []
    for a in (base, spec):
        kept, _ = measured_saturation(a.rows, s.output_len)
        for row in a.rows:
            p, m = row["pred"], row["meas"]
            machine = machine_factor(row.get("speeds") or [])
            print(f"{a.arm:<14}{row['rate']:>8g}{m.arrival_rate or row['rate']:>9.3g}{_fmt(machine, '.3f'):>9}"
                  f"{p.tpot_ms_p50:>11.1f}{_fmt(m.tpot_ms_p50):>11}{_fmt(p.ttft_ms_p50):>11}{_fmt(m.ttft_ms_p50):>11}"
                  f"{p.output_tokens_per_s:>12.1f}{m.tokens_per_s:>12.1f}{p.running_batch:>12.2f}")
            below = not p.saturated and kept is not None and row["rate"] <= kept
            if below and m.tpot_ms_p50:
                errs_tpot.append(abs(math.log(p.tpot_ms_p50 / m.tpot_ms_p50)))
            if below and m.tokens_per_s > 0:
                errs_tok.append(abs(math.log(p.output_tokens_per_s / m.tokens_per_s)))
            out_rows.append({"arm": a.arm, "rate": row["rate"], "arrived": m.arrival_rate, "requests": row["n"],
                             "machine_time_vs_calibration": machine,
                             "failed": row["failed"],
                             "tpot_ms_p50": [round(p.tpot_ms_p50, 2), m.tpot_ms_p50],
                             "ttft_ms_p50": [None if p.ttft_ms_p50 is None else round(p.ttft_ms_p50, 1), m.ttft_ms_p50],
                             "output_tokens_per_s": [round(p.output_tokens_per_s, 2), round(m.tokens_per_s, 2)],
                             "measured_acceptance_length": m.acceptance_length})
    med_tpot = statistics.median(errs_tpot) if errs_tpot else None
    med_tok = statistics.median(errs_tok) if errs_tok else None
    print(f"median |ln(pred/meas)| below saturation: TPOT {_fmt(med_tpot, '.3f')} over {len(errs_tpot)} points, "
          f"output tokens/s {_fmt(med_tok, '.3f')} over {len(errs_tok)} points")
    if retimed:
        print("the machine over the run, its time over each arm's calibration: " + ", ".join(
            f"{a.arm} not re-timed (its calibration alone)" if factors[a.arm] is None else
            f"{a.arm} {factors[a.arm]:.3f}x ({len(a.retimings())} re-timings)" for a in (base, spec))
            + "; saturation and crossover are predicted on those, and from the calibration alone")
    else:
        print("not re-timed: saturation and crossover are predicted from the calibration alone")
    sats = {}
    for a in (base, spec):
        pred, pred_cal = (saturation_rate(a.during_run(), s.output_len),
                          saturation_rate(a.arm_model, s.output_len))
        kept, lost = measured_saturation(a.rows, s.output_len)
        sats[a.arm] = {"predicted": round(pred, 3), "predicted_from_calibration": round(pred_cal, 3),
                       "measured_between": [kept, lost]}
        seen = ("nothing (no rate was measured)" if kept is None and lost is None else
                f"kept up at every measured rate (up to {kept:g}/s)" if lost is None else
                f"below the lowest rate ({lost:g}/s)" if kept is None else f"between {kept:g} and {lost:g}/s")
        alone = f" (calibration alone {pred_cal:.3g}/s)" if retimed else ""
        print(f"saturation, {a.arm}: predicted {pred:.3g}/s{alone}; measured {seen}")
    pc = crossover_rate(base.during_run(), spec.during_run(), s.output_len)
    pc_cal = crossover_rate(base.arm_model, spec.arm_model, s.output_len)
    lo, hi = measured_crossover(base, spec)
    rates = [r["rate"] for r in base.rows]
    within = bool(rates) and _within_one_step(pc, lo, hi, rates)

    def says(x: float | None) -> str:
        return ("never (speculation pays up to saturation)" if x is None else
                "at every rate (speculation never pays)" if x == 0 else f"{x:.3g}/s")

    pcs = f"{says(pc)} (calibration alone {says(pc_cal)})" if retimed else says(pc)
    verdicts = [f"{b['rate']:g}: {verdict(b, sp)}" for b, sp in zip(base.rows, spec.rows, strict=True)]
    print(f"speculation's TPOT against the baseline's, beyond the repeats' spread: {', '.join(verdicts)}")
    seen = ("nothing (no rate was measured)" if not rates else
            "never loses at a measured rate" + (f" (last clear win {lo:g}/s)" if lo is not None else "")
            if hi is None else f"loses from {hi:g}/s, with no clear win before it" if lo is None
            else f"between {lo:g} and {hi:g}/s")
    print(f"crossover: predicted {pcs}; measured {seen} ({'within' if within else 'NOT within'} one measured step)")
    return {"server": server, "calibration": {base.arm: base.calibration, spec.arm: spec.calibration},
            "rows": out_rows, "median_abs_log_error": {"tpot": med_tpot, "output_tokens_per_s": med_tok},
            "saturation": sats, "machine_time_vs_calibration": factors,
            "crossover": {"predicted": pc, "predicted_from_calibration": pc_cal,
                          "measured_between": [lo, hi], "within_one_step": within}}


def _within_one_step(pred: float | None, lo: float | None, hi: float | None, rates: list[float]) -> bool:
    """Whether the predicted crossover falls in the measured interval (lo, hi] or the measured step on either side."""
    lower = rates[rates.index(lo) - 1] if lo is not None and rates.index(lo) > 0 else 0.0
    if hi is None:  # measured: never lost
        return pred is None or pred >= lower
    if pred is None:
        return hi == rates[-1]
    i = rates.index(hi)
    upper = rates[i + 1] if i + 1 < len(rates) else math.inf
    return lower <= pred <= upper


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="Shorter outputs and rate windows, 4 rates.")
    p.add_argument("--servers", default="embedded,vllm", help="Comma-separated: embedded, vllm.")
    p.add_argument("-k", type=int, default=4, help="n-gram draft length (fixed).")
    p.add_argument("--capacity", type=int, default=8, help="The servers' cap on running requests.")
    p.add_argument("--threads", type=int, default=2, help="The embedded server's CPU threads.")
    p.add_argument("--repeats", type=int, default=2, help="Runs per rate and arm (one arrival seed each).")
    p.add_argument("--json", default=None, help="Also write the results here.")
    p.add_argument("--keep", default=None, help="Folder for logs and the client's result files (default: a temp dir).")
    p.add_argument("--replay", default=None, metavar="DIR",
                   help="Report again from a --keep folder's saved results (same options), without servers "
                        "(the servers' spec-decode counters were not saved: no acceptance length).")
    args = p.parse_args()
    work = Path(args.replay or args.keep or tempfile.mkdtemp(prefix="load-model-"))
    if args.replay and not work.is_dir():
        print(f"--replay: {work} is not a folder (give a --keep folder of an earlier run)")
        return 1
    work.mkdir(parents=True, exist_ok=True)
    s = Setup(quick=args.quick, output_len=24 if args.quick else 48, capacity=args.capacity, k=args.k,
              threads=args.threads,
              # c=2 too: a CPU step can jump from one row to two (the embedded runtime's kernels change there).
              profile_concurrency=sorted({1, 2, 4, args.capacity}),
              rate_window_s=20.0 if args.quick else 40.0, work=work, repeats=max(1, args.repeats),
              replay=bool(args.replay))
    if not s.replay and not (VLLM_ENV / "bin" / "vllm").exists():
        print(f"vllm bench serve is not available ({VLLM_ENV} is absent): it drives every server here. Build it "
              "with scripts/stack_envs.sh vllm.")
        return 1
    print(f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()}; logs in {work}", flush=True)
    out = []
    for server in [x.strip() for x in args.servers.split(",") if x.strip()]:
        if s.replay and not any(work.glob(f"{server}-none-profile-c*.json")):
            print(f"Skipping {server}: no saved results for it in {work}.")
            continue
        if not s.replay and server == "vllm" and not (VLLM_ENV / ".specplug-pin").exists():
            print(f"Skipping vLLM: the pinned venv is not at {VLLM_ENV} (scripts/stack_envs.sh vllm).")
            continue
        print(f"{server}:", flush=True)
        base, spec = run_server(server, s)
        out.append(report(server, base, spec, s))
    print(f"\nload average at end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
