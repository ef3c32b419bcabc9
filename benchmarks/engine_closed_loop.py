"""The embedded engine under closed-loop load without a server or client: what the step alone sustains.

    python benchmarks/engine_closed_loop.py [--concurrency 4,8,16] [--repeats 3] [--threads 2]
                                            [--hog 0.25]

Serves server_ab.py's 16 prompts (chat template applied, 64 output tokens each, greedy, ignore_eos) straight
through a :class:`~specplug.runtime.engine.DecodeBatch`: ``c`` requests in flight, the next prompt joining as
one finishes, as a closed-loop client keeps a server. Plain decoding and paced n-gram speculation (k=8, matches
of 2-4 tokens, as server_ab runs them) each have their own engine with the prefix cache on, warmed by one round;
the rounds then alternate between them. Printed per concurrency: output tokens/s of each round, the ratio of the
medians (n-gram / plain), what speculation did in the last n-gram round's steps, and whether every greedy text
was the same.

``--hog F`` runs a process that keeps a core busy a share F of the time (in 4 ms periods), as a load generator
on the same machine would: on a 2-core machine this shows what the server's neighbours cost the step.
Needs the ``[runtime]`` extra.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling server_ab (its prompts and model)

import torch  # noqa: E402

HOG = """
import time, sys
duty, period = float(sys.argv[1]), 0.004
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < period * duty:
        pass
    time.sleep(period * (1 - duty))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="4,8,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hog", type=float, default=0.0, help="share of a core a neighbouring process keeps busy")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    prompts, params = load_prompts()
    engines = build_engines()

    for engine in engines.values():
        run_round(engine, prompts, params, 4)
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(args.hog)]) if args.hog > 0 else None
    try:
        for c in [int(x) for x in args.concurrency.split(",")]:
            rates: dict[str, list[float]] = {m: [] for m in engines}
            texts = {}
            for _ in range(args.repeats):
                for method, engine in engines.items():
                    before = dict(engine.spec_steps)
                    rate, texts[method] = run_round(engine, prompts, params, c)
                    rates[method].append(rate)
            steps = {k: engines["ngram"].spec_steps[k] - before.get(k, 0) for k in engines["ngram"].spec_steps}
            ratio = statistics.median(rates["ngram"]) / statistics.median(rates["none"])
            print(f"c={c}: plain {[round(r, 1) for r in rates['none']]} tok/s, n-gram "
                  f"{[round(r, 1) for r in rates['ngram']]}: n-gram / plain {ratio:.3f}; last n-gram round's steps "
                  f"{steps}; same greedy texts: {texts['none'] == texts['ngram']}", flush=True)
    finally:
        if hog is not None:
            hog.kill()
    return 0


def load_prompts() -> tuple[list[list[int]], object]:
    """server_ab's 16 prompts with the model's chat template applied, and their GenerationParams (64 tokens,
    greedy, ignore_eos)."""
    from server_ab import MODEL_DIR, PROMPTS
    from transformers import AutoTokenizer

    from specplug.runtime.engine import GenerationParams

    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    prompts = []
    for p in PROMPTS:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
        prompts.append(ids if isinstance(ids, list) else ids["input_ids"])
    return prompts, GenerationParams(max_new_tokens=64, ignore_eos=True)


def build_engines() -> dict:
    """{"none": plain engine, "ngram": paced n-gram (k=8, matches of 2-4)}, both with the prefix cache on, the
    n-gram one calibrated."""
    from server_ab import MODEL_DIR

    from specplug.runtime.models import build_engine

    engines = {}
    for method in ("none", "ngram"):
        engine = build_engine(str(MODEL_DIR), method=method, k=8, dtype="float32", ngram_min=2, ngram_max=4,
                              paced=True, prefix_cache_mb=256)
        if engine.pacer is not None:
            engine.calibrate(16)
        job = engine.target.huge_pages_now() if hasattr(engine.target, "huge_pages_now") else None
        if job is not None:
            job.join()  # moving weights into huge pages takes seconds: not inside a measured round
        engines[method] = engine
    return engines


def run_round(engine, prompts: list[list[int]], params, c: int) -> tuple[float, list[list[int]]]:  # noqa: ANN001
    """All prompts through one engine, ``c`` in flight, the next joining as one finishes: (output tokens/s, the
    texts' token ids in prompt order)."""
    batch, todo, live, out = engine.start(), list(range(len(prompts))), set(), {}
    t = time.perf_counter()
    while todo or live:
        while todo and len(live) < c:
            live.add(batch.add(prompts[todo.pop(0)], params))
        for o in batch.step():
            if o.finished:
                live.discard(o.request_id)
                out[o.request_id] = batch.result(o.request_id).tokens
    return len(prompts) * params.max_new_tokens / (time.perf_counter() - t), [out[k] for k in sorted(out)]


if __name__ == "__main__":
    sys.exit(main())
