"""Reports other benchmark clients wrote, read as specplug bench runs.

Two formats are recognised by their content:

- ``vllm bench serve --save-result`` JSON: one run at one concurrency (``max_concurrency``), with per-request
  lists when saved with ``--save-detailed``, and ``spec_decode_*`` fields when vLLM's client found the server's
  speculative-decoding counters moving (it scrapes ``/metrics`` before and after itself);
- a GuideLLM JSON report (``guidellm run --output kind=json``): one benchmark per profile step (for
  ``kind=concurrent,streams=1,4`` one at 1 and one at 4 streams), with no speculation figures. Rate profiles
  (constant, poisson, a sweep's rate steps) are refused: they hold no concurrency, their max_concurrency a cap.

vLLM's result does not record the temperature; ``--metadata temperature=X`` does, and so does the client's own
command line when specplug runs it.

Each run becomes a :class:`~specplug.bench.record.RunStats` with specplug's definitions: tokens per second over
the run's wall time, time per output token after the first. Where the report has no acceptance, the caller
supplies one read from ``/metrics`` scrapes taken around the client's run (:mod:`specplug.bench.clientrun`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplug.bench.metrics import Acceptance
from specplug.bench.record import RECORD_KIND, BenchRecord, Percentiles, RunStats
from specplug.errors import SpecplugError
from specplug.fileio import read_json_object

VLLM = "vllm bench serve"
GUIDELLM = "guidellm"
# What a client sends when the command line sets no temperature: the server's default, 1.0 on vLLM, SGLang and
# the embedded server (a model's generation_config may say otherwise).
SERVER_DEFAULT_TEMPERATURE = 1.0
# GuideLLM strategies with a fixed number of requests in flight; the others send at a rate, their
# max_concurrency only a cap.
GUIDELLM_FIXED_LOAD = ("synchronous", "concurrent", "throughput")
# A file's mtime may trail time.time() by the kernel's coarse clock tick.
MTIME_SLACK_S = 0.1
# What a 'vllm bench serve' result's "backend" names, where it differs from specplug's stack name ("openai" and
# "openai-chat" name an API, not a stack, and say nothing about the server).
_BACKEND_STACK = {"tensorrt-llm": "trtllm", "llama.cpp": "llamacpp"}


@dataclass
class ForeignRun:
    """One run of a client at one concurrency."""

    concurrency: int
    stats: RunStats
    start: float | None = None  # epoch seconds, where the report says
    end: float | None = None


@dataclass
class ForeignReport:
    tool: str
    path: str
    model: str | None
    runs: list[ForeignRun]
    temperature: float | None = None  # None: the client sent none (the server's default applied)
    temperature_unknown: bool = False  # the report does not record the temperature at all (vLLM's result)
    max_tokens: int | None = None
    notes: list[str] = field(default_factory=list)


def detect(data: Any) -> str | None:
    """Which client wrote ``data`` (a parsed JSON document), or None."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") == RECORD_KIND:
        return "specplug"
    meta = data.get("metadata")
    if isinstance(meta, dict) and "guidellm_version" in meta or (
        isinstance(data.get("benchmarks"), list) and any(
            isinstance(b, dict) and b.get("type_") == "generative_benchmark" for b in data["benchmarks"]
        )
    ):
        return GUIDELLM
    if {"completed", "duration"} <= set(data) and ("total_output_tokens" in data or "output_throughput" in data):
        return VLLM
    return None


def backend_stack(docs: list[dict[str, Any]]) -> str | None:
    """The stack the client reports name as their backend ('vllm bench serve' writes "backend": "vllm"), when they
    agree on one specplug knows."""
    from specplug.stacks.registry import is_stack

    names = {_BACKEND_STACK.get(b, b) for d in docs if isinstance(b := d.get("backend"), str)}
    if len(names) != 1:
        return None
    name = names.pop()
    return name if is_stack(name) else None


def load_json(path: str | Path) -> dict:
    return read_json_object(path, "bench.json", "Pass a benchmark report: a JSON object.")[1]


def read_report(path: str | Path, data: dict | None = None) -> ForeignReport:
    """A vLLM bench serve result or a GuideLLM report; anything else is a clear error."""
    data = load_json(path) if data is None else data
    tool = detect(data)
    reader = {VLLM: _vllm, GUIDELLM: _guidellm}.get(tool or "")
    if reader is not None:
        try:
            return reader(str(path), data)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            # A field of the wrong type (null latencies, a list where an object belongs): not a crash.
            raise _damaged(str(path), f"a field has an unexpected type or value ({type(exc).__name__}: {exc})") from None
    raise SpecplugError(
        f"{path} is neither a specplug bench record, a 'vllm bench serve --save-result' JSON nor a GuideLLM report.",
        "Pass bench.json from 'specplug bench -o DIR', vLLM's --result-filename file, or GuideLLM's "
        "--output kind=json,path=FILE.",
    )


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _damaged(path: str, what: str) -> SpecplugError:
    return SpecplugError(f"{path} is damaged or from an unknown version: {what}.")


# ------------------------------------------------------------------------------------------ vLLM


def _ms_summary(data: dict, metric: str) -> Percentiles:
    """vLLM's mean/median/pNN fields for ``metric`` (ttft, tpot, e2el; milliseconds) in seconds."""
    def s(key: str) -> float | None:
        v = _num(data.get(key))
        return None if v is None else v / 1000.0

    return Percentiles(p50=s(f"median_{metric}_ms"), p90=s(f"p90_{metric}_ms"), p99=s(f"p99_{metric}_ms"),
                       mean=s(f"mean_{metric}_ms"))


def _vllm(path: str, data: dict) -> ForeignReport:
    completed = _num(data.get("completed"))
    duration = _num(data.get("duration"))
    if completed is None or duration is None or duration <= 0:
        raise _damaged(path, "'completed' and a positive 'duration' are needed")
    failed = int(_num(data.get("failed")) or 0)
    out_tokens = int(_num(data.get("total_output_tokens")) or 0)
    errors = [e for e in data.get("errors") or [] if isinstance(e, str) and e]
    ttfts, lats, outs = data.get("ttfts"), data.get("latencies"), data.get("output_lens")
    detailed = all(isinstance(x, list) for x in (ttfts, lats, outs)) and len(ttfts) == len(lats) == len(outs)
    if detailed:
        # Per request (failed ones carry zeros and an error): specplug's percentiles from the raw values.
        ok = [i for i in range(len(ttfts)) if not (i < len(data.get("errors") or []) and data["errors"][i])]
        ttft = Percentiles.of([float(ttfts[i]) for i in ok if _num(ttfts[i])])
        latency = Percentiles.of([float(lats[i]) for i in ok if _num(lats[i])])
        tpot = Percentiles.of([
            (float(lats[i]) - float(ttfts[i])) / (outs[i] - 1) for i in ok if isinstance(outs[i], int) and outs[i] > 1
        ])
    else:
        ttft, tpot, latency = _ms_summary(data, "ttft"), _ms_summary(data, "tpot"), _ms_summary(data, "e2el")
    conc = _num(data.get("max_concurrency"))
    if conc is None:  # no cap: as many as were in flight at the peak
        conc = _num(data.get("max_concurrent_requests")) or _num(data.get("num_prompts")) or 1
    stats = RunStats(
        role="speculative", concurrency=int(conc), requests=int(completed), failed=failed, errors=errors[:3],
        wall_s=round(duration, 4), output_tokens=out_tokens,
        requests_per_s=completed / duration if completed else None,
        output_tokens_per_s=out_tokens / duration if completed else None,
        ttft_s=ttft, tpot_s=tpot, latency_s=latency, acceptance=_vllm_acceptance(data),
    )
    max_tokens = max((o for o in outs or [] if isinstance(o, int)), default=None) if isinstance(outs, list) else None
    # vLLM's result does not record the temperature; '--metadata temperature=X' saves it (as a string).
    temperature = _as_temperature(data.get("temperature"))
    return ForeignReport(
        tool=VLLM, path=path, model=data.get("model_id") if isinstance(data.get("model_id"), str) else None,
        runs=[ForeignRun(int(conc), stats)], temperature=temperature, temperature_unknown=temperature is None,
        max_tokens=max_tokens,
    )


def _as_temperature(v: Any) -> float | None:
    """A temperature from a number or a string (``--metadata temperature=0`` saves the string "0")."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    x = _num(v)
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def argv_temperature(argv: list[str]) -> float | None:
    """The temperature a client's command line sets (``--temperature X`` or ``--temperature=X``), or None."""
    found = None
    for i, a in enumerate(argv):
        if a == "--temperature" and i + 1 < len(argv):
            found = _as_temperature(argv[i + 1])
        elif a.startswith("--temperature="):
            found = _as_temperature(a.split("=", 1)[1])
    return found


def _vllm_acceptance(data: dict) -> Acceptance | None:
    drafts, tokens, accepted = (_num(data.get(f"spec_decode_{k}")) for k in ("num_drafts", "draft_tokens", "accepted_tokens"))
    if not tokens or accepted is None:
        return None  # vLLM's client writes these only when draft tokens moved during the run
    per_pos = [float(x) for x in data.get("spec_decode_per_position_acceptance_rates") or [] if _num(x) is not None]
    if drafts:  # servers pre-create positions up to a maximum: drop idle ones past the draft length
        k = max(1, math.ceil(tokens / drafts - 1e-9))
        while len(per_pos) > k and per_pos[-1] == 0.0:
            per_pos.pop()
    return Acceptance(
        source=f"{VLLM} (spec_decode_* in its result)", drafts=drafts, draft_tokens=tokens, accepted_tokens=accepted,
        acceptance_rate=accepted / tokens, mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
        per_position=per_pos,
    )


# ------------------------------------------------------------------------------------------ GuideLLM


def _dist(metrics: dict, name: str, scale: float = 1.0) -> Percentiles:
    d = ((metrics.get(name) or {}).get("successful") or {}) if isinstance(metrics.get(name), dict) else {}
    pct = d.get("percentiles") or {}

    def s(v: Any) -> float | None:
        x = _num(v)
        return None if x is None else x * scale

    if not d.get("count"):
        return Percentiles()
    return Percentiles(p50=s(d.get("median")), p90=s(pct.get("p90")), p99=s(pct.get("p99")), mean=s(d.get("mean")))


def _guidellm(path: str, data: dict) -> ForeignReport:
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise _damaged(path, "no benchmarks")
    runs: list[ForeignRun] = []
    temps: set[float | None] = set()
    max_tokens = None
    model = None
    for i, b in enumerate(benches):
        if not isinstance(b, dict) or not isinstance(b.get("metrics"), dict):
            raise _damaged(path, f"benchmark {i} has no metrics")
        m = b["metrics"]
        totals = m.get("request_totals") or {}
        duration = _num(b.get("duration"))
        if duration is None or duration <= 0:
            raise _damaged(path, f"benchmark {i} has no positive duration")
        ok = int(_num(totals.get("successful")) or 0)
        failed = int(_num(totals.get("errored")) or 0)
        out_tokens = int(_num(((m.get("output_token_count") or {}).get("successful") or {}).get("total_sum")) or 0)
        strategy = (b.get("config") or {}).get("strategy") or {}
        kind = strategy.get("type_")
        if kind not in GUIDELLM_FIXED_LOAD:
            raise SpecplugError(
                f"{path}: benchmark {i} ran GuideLLM's '{kind}' strategy, which sends at a rate: GuideLLM rate "
                "profiles have no fixed concurrency (max_concurrency is only a cap).",
                "Use --profile kind=concurrent,streams=1,4 (or kind=synchronous / kind=throughput with "
                "max_concurrency) so that each benchmark runs at one concurrency.",
            )
        if kind == "synchronous":
            conc = 1.0
        elif kind == "concurrent":
            conc = _num(strategy.get("streams"))
        else:
            conc = _num(strategy.get("max_concurrency"))
        if conc is None:  # throughput without a cap: as many as it kept in flight on average
            conc = max(1, round(_num(((m.get("request_concurrency") or {}).get("successful") or {}).get("mean")) or 1))
        reqs = b.get("requests") or {}
        errors = []
        for r in reqs.get("errored") or []:
            err = (r.get("info") or {}).get("error") if isinstance(r, dict) else None
            if isinstance(err, str) and err not in errors and len(errors) < 3:
                errors.append(err)
        for r in reqs.get("successful") or []:
            body = _request_body(r)
            if body is not None:
                temps.add(_num(body.get("temperature")))
                mt = body.get("max_completion_tokens") or body.get("max_tokens")
                if isinstance(mt, int):
                    max_tokens = max(mt, max_tokens or 0)
                if model is None and isinstance(body.get("model"), str):
                    model = body["model"]
        stats = RunStats(
            role="speculative", concurrency=int(conc), requests=ok, failed=failed, errors=errors,
            wall_s=round(duration, 4), output_tokens=out_tokens,
            requests_per_s=ok / duration if ok else None, output_tokens_per_s=out_tokens / duration if ok else None,
            ttft_s=_dist(m, "time_to_first_token_ms", 1e-3),
            tpot_s=_dist(m, "inter_token_latency_ms", 1e-3),  # GuideLLM's ITL: after the first token, as specplug's TPOT
            latency_s=_dist(m, "request_latency"),
        )
        runs.append(ForeignRun(int(conc), stats, _num(b.get("start_time")), _num(b.get("end_time"))))
    spec = ((data.get("config") or {}).get("spec") or {}).get("backend") or {}
    model = model or (spec.get("model") if isinstance(spec.get("model"), str) else None)
    notes = []
    temperature = next(iter(temps)) if len(temps) == 1 else None
    if len(temps) > 1:
        notes.append("The requests were sent at several temperatures; calibration assumes the server's default.")
    return ForeignReport(tool=GUIDELLM, path=path, model=model, runs=runs, temperature=temperature,
                         max_tokens=max_tokens, notes=notes)


def _request_body(r: Any) -> dict | None:
    """The JSON body GuideLLM sent for one request (kept as a string in ``request_args``)."""
    args = r.get("request_args") if isinstance(r, dict) else None
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    body = args.get("body") if isinstance(args, dict) else None
    return body if isinstance(body, dict) else None


# ------------------------------------------------------------------------------------------ as a bench record


def to_record(
    reports: list[ForeignReport],
    *,
    baseline: list[ForeignReport] | None = None,
    acceptance: Acceptance | None = None,
    acceptance_note: str = "",
    stack: str | None = None,
    endpoint: str | None = None,
    temperature: float | None = None,
    min_speedup: float = 1.0,
) -> BenchRecord:
    """One bench record from client reports: their runs are the levels (speculative), ``baseline``'s runs the
    baseline at the same concurrencies, and ``acceptance`` (read from scrapes around the client's run) goes to
    the runs whose report had none."""
    import datetime

    from specplug import __version__
    from specplug.bench.record import Level

    if not reports:
        raise SpecplugError("No report to read.")
    levels: dict[int, Level] = {}
    notes = [f"Read from {r.tool} report {r.path}." for r in reports]
    for r in reports:
        for run in r.runs:
            if run.concurrency in levels:
                raise SpecplugError(
                    f"Two runs at concurrency {run.concurrency} (in {r.path}).",
                    "Pass one report per concurrency, or the baseline's with --baseline-from.",
                )
            levels[run.concurrency] = Level(concurrency=run.concurrency, speculative=run.stats)
    for r in baseline or []:
        for run in r.runs:
            lv = levels.get(run.concurrency)
            if lv is None:
                raise SpecplugError(f"The baseline report {r.path} has a run at concurrency {run.concurrency}, "
                                    "which the speculative reports do not.")
            lv.baseline = run.stats.model_copy(update={"role": "baseline"})
    missing = [lv for lv in sorted(levels.values(), key=lambda x: x.concurrency) if lv.speculative.acceptance is None]
    if acceptance is not None and missing:
        missing[0].speculative.acceptance = acceptance
        if acceptance_note:
            notes.append(acceptance_note)
        if len(missing) > 1:
            notes.append(
                f"Acceptance was scraped once around the whole client run, so it covers concurrencies "
                f"{', '.join(str(lv.concurrency) for lv in missing)} together; it is shown at {missing[0].concurrency}."
            )
    if temperature is None:
        temps = {r.temperature for r in reports}
        temperature = temps.pop() if len(temps) == 1 else None
    if temperature is None:
        temperature = SERVER_DEFAULT_TEMPERATURE
        if any(r.temperature_unknown for r in reports):
            notes.append(f"The report does not say which temperature was used (pass --temperature); the server's "
                         f"default ({SERVER_DEFAULT_TEMPERATURE}) is assumed.")
        else:
            notes.append(f"The client sent no temperature: the server's default ({SERVER_DEFAULT_TEMPERATURE}) is "
                         "assumed (pass --temperature if it differs).")
    for r in reports:
        notes += r.notes
    max_tokens = max((r.max_tokens for r in reports if r.max_tokens), default=None)
    ordered = sorted(levels.values(), key=lambda lv: lv.concurrency)
    record = BenchRecord(
        specplug_version=__version__,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        endpoint=endpoint or reports[0].path, baseline=(baseline[0].path if baseline else None),
        model=reports[0].model, stack=stack, prompts_file=None, workload=None,
        num_prompts=sum(lv.speculative.requests + lv.speculative.failed for lv in ordered),
        max_tokens=max_tokens or 256, temperature=temperature, concurrency=[lv.concurrency for lv in ordered],
        levels=ordered, complete=True, notes=notes,
    )
    record.finish(min_speedup)
    if not baseline:
        record.verdict = "no speedup measured (needs --baseline-from FILE: the same client's run against the baseline)"
    return record


def record_from_files(
    paths: list[str],
    baseline_paths: list[str] | None = None,
    *,
    client: list[str] | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    stack: str | None = None,
    temperature: float | None = None,
    min_speedup: float = 1.0,
) -> BenchRecord:
    """What ``--from`` reads: one specplug bench.json, or client reports (run ``client`` first, with ``endpoint``'s
    ``/metrics`` scraped around it, when given)."""
    from specplug.bench.record import load_record

    scraped = None
    if client:
        if not endpoint:
            raise SpecplugError("Scraping the server's counters around the client needs --endpoint URL.")
        from specplug.bench.clientrun import run_client

        started = time.time()
        scraped = run_client(client, endpoint, api_key=api_key, stack=stack)
        for p in paths:
            _written_since(p, started)
    elif endpoint:
        raise SpecplugError(
            "The server's counters can only be read around the client's run.",
            "Put the client's command after '--' (e.g. ... --endpoint URL -- vllm bench serve ...), or drop --endpoint.",
        )
    docs = [(p, load_json(p)) for p in paths]
    kinds = [detect(d) for _, d in docs]
    if "specplug" in kinds:
        if len(paths) > 1 or baseline_paths or client:
            raise SpecplugError("A specplug bench.json is read alone (it already holds its levels and baseline).")
        return load_record(paths[0])
    reports = [read_report(p, d) for p, d in docs]
    if client:
        # The client's own command line says what it sent: with no --temperature, vLLM's client sends none.
        sent = argv_temperature(client)
        for r in reports:
            if r.temperature_unknown:
                r.temperature, r.temperature_unknown = sent, False
    baseline = [read_report(p) for p in baseline_paths or []]
    return to_record(
        reports, baseline=baseline, acceptance=scraped.acceptance if scraped else None,
        acceptance_note=scraped.note if scraped else "", stack=stack or (scraped.stack if scraped else None),
        endpoint=endpoint, temperature=temperature, min_speedup=min_speedup,
    )


def _written_since(path: str, started: float) -> None:
    """The client ran to write ``path``: one it left as it was holds an earlier run's numbers."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = None
    if mtime is None or mtime < started - MTIME_SLACK_S:
        what = "did not write" if mtime is None else "did not rewrite"
        raise SpecplugError(
            f"The client {what} {path} (it is older than the client's run), so its numbers are not this run's.",
            "Point --from at the file the client writes (vLLM: --result-filename; GuideLLM: --output kind=json,path=FILE).",
        )
