"""How fast a traffic file replays: builds a JSONL log of N requests (default 100,000: code-edit answers
that copy their prompt's code with small edits, and free-text chat answers, alternating), then times
``specplug.traffic.load_traffic`` on it: reading, tokenizing and replaying every request (n-gram and suffix at
k = 1..8, overlap, repetition and BLEU-4).

    python benchmarks/traffic_replay.py [--requests N] [--compare M] [--tokenizer FOLDER | --proxy] [--keep FILE]

Prints the file's size, the tokenizer used, wall and CPU seconds, and the measured figures, then the figure the
target is about: wall seconds per 100,000 requests against the 60 s budget. In the same run it times the first
M requests (default 2,000) stage by stage: tokenizing, the vectorised replay (its two parts overlapped in two
threads, and in one thread) and the plain Python replay (the one used without numpy), and checks that all of
them give the same tallies.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0  # wall seconds to replay 100,000 requests on a 2-core machine

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
    ap.add_argument("--compare", type=int, default=2_000, help="requests timed stage by stage (0: skip)")
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
    print(f"mean tokens: {prof.input_len:.0f} in / {prof.output_len:.0f} out; overlap {prof.overlap:.3f}, "
          f"BLEU-4 {prof.bleu4:.3f}, repetition {prof.repetition:.3f}, workload shift {prof.workload_shift():+.2f}")
    for m in ("ngram", "suffix"):
        rates = ", ".join(f"{r:.2f}" for r in prof.position_rates(m) or [])
        taus = ", ".join(f"{prof.acceptance_length(m, k):.2f}" for k in (1, 2, 4, 8))
        print(f"{m}: position rates [{rates}]; acceptance length at k=1,2,4,8: {taus}")
    per100k = t * 100_000 / max(prof.requests, 1)
    scaled = "" if prof.requests == 100_000 else f" (scaled from {prof.requests})"
    print(f"figure: {per100k:.1f} s wall per 100,000 requests{scaled}, against a target of under {TARGET_S:.0f} s: "
          f"{'met' if per100k < TARGET_S else 'NOT met'}")
    if args.compare:
        compare(path, model, min(args.compare, args.requests), prof.requests)
    if tmp:
        tmp.cleanup()


def compare(path: Path, model, n: int, total: int) -> None:
    """Stage by stage on the first n requests: tokenizing, the vectorised replay, the plain one."""
    from specplug.traffic.fastreplay import FastReplay
    from specplug.traffic.profile import BATCH
    from specplug.traffic.records import ReadStats, read_records
    from specplug.traffic.replay import PyReplay
    from specplug.traffic.tokens import choose

    with path.open("rb") as fh:
        recs = [r for _, r in zip(range(n), read_records(fh, ReadStats()), strict=False)]
    tok = choose(model)

    def timed(f):
        t0, c0 = time.perf_counter(), time.process_time()
        out = f()
        return out, time.perf_counter() - t0, time.process_time() - c0

    enc, tw, tc = timed(lambda: tok.encode_batch([r.prompt for r in recs] + [r.completion for r in recs]))
    prompts, outs = enc[:n], enc[n:]
    two, one, plain = FastReplay(8), FastReplay(8, threaded=False), PyReplay(8)

    def replay(r):
        for i in range(0, n, BATCH):  # the batches load_traffic hands over
            r.add(prompts[i:i + BATCH], outs[i:i + BATCH])
        return [vars(r.ngram), vars(r.suffix), vars(r.shape)]

    a, fw, fc = timed(lambda: replay(two))
    b, ow, oc = timed(lambda: replay(one))
    c, pw, pc = timed(lambda: replay(plain))
    two.close()
    # BLEU sums are floats added in another order: equal to rounding.
    same = all(x[:2] == c[:2] and {k: v for k, v in x[2].items() if k != "bleu_sum"}
               == {k: v for k, v in c[2].items() if k != "bleu_sum"}
               and abs(x[2]["bleu_sum"] - c[2]["bleu_sum"]) < 1e-6 for x in (a, b))
    per = 1e3 / n
    print(f"first {n} requests, ms per request (wall / CPU): tokenize {tw * per:.2f} / {tc * per:.2f}, "
          f"vectorised replay {fw * per:.2f} / {fc * per:.2f} (one thread: {ow * per:.2f} / {oc * per:.2f}), "
          f"plain replay {pw * per:.2f} / {pc * per:.2f} (x{pc / max(fc, 1e-9):.1f} CPU); tallies equal: {same}")
    print(f"at these rates all {total} requests: tokenize {tw * total / n:.0f} s, vectorised replay "
          f"{fw * total / n:.0f} s, plain replay {pw * total / n:.0f} s (wall)")

if __name__ == "__main__":
    main()
