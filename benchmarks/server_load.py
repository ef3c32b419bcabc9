"""Load benchmark for the embedded server: 64 concurrent clients, speculation on vs off, in one run.

    .venv/bin/python benchmarks/server_load.py                      # smollm2-135m, ngram k=4 vs none
    .venv/bin/python benchmarks/server_load.py --clients 64 --requests-per-client 2 --max-tokens 48

Starts `python -m specplug.runtime.server` on 127.0.0.1 once per setting (same model, prompts, batch size),
sends the same bounded load, and prints requests/s, p50/p99 latency, tokens/s, errors and the
speculative-decoding counters read from /metrics; then the on/off ratio. Loopback only; bounded in count
and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling _servers and _prompts
from _servers import free_port, start, stop  # noqa: E402

from specplug.runtime.serving.loadgen import run_load  # noqa: E402

# Workloads where speculation has something to find (code edits, quoting) and one where it has little.
PROMPTS = [
    "Rename the variable total to acc in this code and print it back:\n\ndef total_of(xs):\n    total = 0\n"
    "    for x in xs:\n        total += x\n    return total\n\nRenamed code:\n\ndef total_of(xs):\n",
    "Context: The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.\n"
    "Question: Who is the Eiffel Tower named after? Quote the context.\nAnswer: It is named after",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n  <li>cherry</li>\n</ul>\nThe same list with a fourth item:\n<ul>\n",
    "Write a short poem about the sea.\n",
]


def metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0] if "position" not in name else name] = out.get(name, 0) + float(value)
    return out


def server_argv(args: argparse.Namespace, method: str, port: int) -> list[str]:
    argv = [sys.executable, "-m", "specplug.runtime.server", "--model", args.model, "--method", method,
            "-k", str(args.k), "--port", str(port), "--max-batch-size", str(args.max_batch_size),
            "--max-queue", str(max(256, args.clients)), "--log-level", "warning"]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    return argv


def run_one(args: argparse.Namespace, method: str) -> dict:
    port = free_port()
    log = Path(args.log_dir) / f"server-{method}.log"
    proc, base = start(server_argv(args, method, port), {**os.environ, "HF_HUB_OFFLINE": "1"}, REPO, log, "server", port)
    try:
        # Warm-up: first passes allocate and pick kernels; keep them out of the figures.
        asyncio.run(run_load(base, args.model, PROMPTS, clients=2, requests_per_client=1, max_tokens=4, timeout_s=300))
        before = metrics(base)
        res = asyncio.run(run_load(base, args.model, PROMPTS, clients=args.clients,
                                   requests_per_client=args.requests_per_client, max_tokens=args.max_tokens,
                                   timeout_s=args.time_budget))
        after = metrics(base)
    finally:
        stop(proc)
    row = {"method": method, **res.summary()}
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    drafts = d.get("vllm:spec_decode_num_drafts_total", 0)
    if drafts:
        accepted = d.get("vllm:spec_decode_num_accepted_tokens_total", 0)
        row["acceptance_rate"] = round(accepted / d["vllm:spec_decode_num_draft_tokens_total"], 3)
        row["mean_acceptance_length"] = round(1 + accepted / drafts, 3)
    row["engine_steps"] = int(d.get("specplug:engine_steps_total", 0))
    if res.errors:
        row["first_errors"] = res.errors[:3]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--method", default="ngram", choices=("ngram", "draft_model"), help="Speculation for the 'on' run.")
    p.add_argument("-k", type=int, default=4)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests-per-client", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--time-budget", type=float, default=900, help="Seconds per run before clients give up.")
    p.add_argument("--log-dir", default="/tmp")
    p.add_argument("--json", action="store_true", help="Print the rows as JSON too.")
    args = p.parse_args()

    rows = [run_one(args, args.method), run_one(args, "none")]
    cols = ["method", "clients", "ok", "errors", "wall_s", "requests_per_s", "p50_latency_s", "p99_latency_s",
            "tokens_per_s", "acceptance_rate", "mean_acceptance_length", "engine_steps"]
    print(f"model {args.model}, {args.clients} clients x {args.requests_per_client} requests, max_tokens "
          f"{args.max_tokens}, batch {args.max_batch_size}, k={args.k}, {os.cpu_count()} CPUs")
    print("  ".join(f"{c:>14}" for c in cols))
    for r in rows:
        print("  ".join(f"{str(r.get(c, '-')):>14}" for c in cols))
    on, off = rows
    if off["tokens_per_s"]:
        print(f"speculation on/off: tokens/s x{on['tokens_per_s'] / off['tokens_per_s']:.2f}, "
              f"requests/s x{on['requests_per_s'] / max(off['requests_per_s'], 1e-9):.2f}, "
              f"p50 latency x{on['p50_latency_s'] / max(off['p50_latency_s'], 1e-9):.2f}")
    if args.json:
        print(json.dumps(rows, indent=2))
    if any(r["errors"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
