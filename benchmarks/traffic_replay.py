"""How fast a traffic file replays: builds a JSONL log of N requests (default 100,000: code-edit answers
that copy their prompt's code with small edits, and free-text chat answers, alternating), then times
``specplug.traffic.load_traffic`` on it (reading, tokenizing, n-gram and suffix replay at k = 1..8).

    python benchmarks/traffic_replay.py [--requests N] [--tokenizer PATH/tokenizer.json | --proxy] [--keep FILE]

Prints the file's size, the tokenizer used, wall and CPU seconds, and the measured figures. Files above
MAX_REPLAY requests (specplug/traffic/profile.py) are parsed whole and replayed in evenly spaced blocks.

Measured on the project's 2-core machine (2026-12-01, other jobs running): 100,000 requests (180 MB, 208
tokens in / 319 out on average, 10,144 replayed) in 44.9 s wall / 36.5 s CPU with SmolLM2's tokenizer, and
25.5 s wall / 24.1 s CPU with the proxy. Tokenizing is about a third of it with the real tokenizer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.traffic import logs  # noqa: E402


def build_file(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    edits, chats = logs.prompts("code-edit"), logs.prompts("chat")
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            if i % 2:
                p = chats[i // 2 % len(chats)]
                rec = {"prompt": p, "completion": logs.chat_answer(rng, words=rng.randint(60, 200))}
            else:
                p = edits[i // 2 % len(edits)]
                rec = {"request": {"messages": [{"role": "user", "content": p}]},
                       "response": {"choices": [{"message": {"content": logs.edit_answer(p, rng)}}]}}
            fh.write(json.dumps(rec) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--tokenizer", default=None, help="a model folder with tokenizer.json (default: SmolLM2's, if cached)")
    ap.add_argument("--proxy", action="store_true", help="use the regex proxy tokenizer")
    ap.add_argument("--keep", default=None, help="write the built file here and keep it")
    args = ap.parse_args()

    from specplug.catalog import Model, get_model
    from specplug.traffic import load_traffic

    if args.proxy:
        model = Model(hf_id="bench/no-tokenizer")
    else:
        folder = args.tokenizer
        if folder is None:
            from specplug.runtime.smollm2 import TARGET_NAME, cache_dir

            cand = cache_dir() / "models" / TARGET_NAME
            folder = str(cand) if (cand / "tokenizer.json").is_file() else None
        model = get_model(folder) if folder else Model(hf_id="bench/no-tokenizer")
    tmp = None
    if args.keep:
        path = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "traffic.jsonl"
    t0 = time.perf_counter()
    build_file(path, args.requests)
    t_build = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    prof = load_traffic(path, model)
    t, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = path.stat().st_size / 1e6
    print(f"file: {args.requests} requests, {size:.1f} MB (built in {t_build:.1f} s)")
    print(f"tokenizer: {prof.tokenizer}")
    print(f"replay: {t:.1f} s wall, {cpu:.1f} s CPU (all threads; the wall time counts whatever else runs here); "
          f"{prof.requests} requests ({prof.replayed} replayed), {prof.malformed} malformed")
    print(f"mean tokens: {prof.input_len:.0f} in / {prof.output_len:.0f} out; "
          f"overlap {prof.overlap:.3f}, repetition {prof.repetition:.3f}, workload shift {prof.workload_shift():+.2f}")
    for m in ("ngram", "suffix"):
        rates = ", ".join(f"{r:.2f}" for r in prof.position_rates(m) or [])
        taus = ", ".join(f"{prof.acceptance_length(m, k):.2f}" for k in (1, 2, 4, 8))
        print(f"{m}: position rates [{rates}]; acceptance length at k=1,2,4,8: {taus}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
