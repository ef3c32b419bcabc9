"""Text streaming per decode step: specplug's incremental TextStream vs decoding the whole output each step.

    python benchmarks/detokenize.py [--lengths 100,500,2000] [--per-step 1] [--repeats 5]

With SmolLM2's tokenizer (the packaged model; fetched and converted on first use), streams an output of each
length ``--per-step`` tokens at a time, as a request's rows do in a batch, and prints the time per step of each
way (median over repeats), and the ratio, measured in the same run. The baseline is what specplug did before
(``tokenizer.decode`` of the whole output at every step); the cost per step of the baseline grows with the
output's length, TextStream's should not.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="100,500,2000")
    ap.add_argument("--per-step", type=int, default=1, help="tokens a step adds (a speculative step adds several)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from specplug.runtime import smollm2
    from specplug.runtime.textstream import TextStream

    tok = AutoTokenizer.from_pretrained(str(smollm2.ensure_target()))
    corpus = Path(__file__).read_text(encoding="utf-8") + "Grüße 🚀 東京 ½\n"
    ids = tok(corpus * 40, add_special_tokens=False).input_ids
    step = args.per_step

    def whole(n: int) -> None:
        for i in range(step, n + 1, step):
            tok.decode(ids[:i], skip_special_tokens=True)

    def stream(n: int) -> None:
        s = TextStream(tok, ["\n\n\n\n"])  # a stop string that never matches: its search is part of the cost
        for i in range(0, n, step):
            s.push(ids[i : i + step], final=i + step >= n)

    print(f"tokenizer={type(tok).__name__} tokens per step={step}")
    print(f"{'output tokens':>14} {'whole decode us/step':>21} {'TextStream us/step':>19} {'ratio':>7}")
    for n in (int(x) for x in args.lengths.split(",")):
        if n > len(ids):
            raise SystemExit(f"--lengths: at most {len(ids)} tokens here")
        times: dict[str, list[float]] = {"whole": [], "stream": []}
        for rep in range(args.repeats):
            for name, fn in (("whole", whole), ("stream", stream))[:: -1 if rep % 2 else 1]:
                t = time.perf_counter()
                fn(n)
                times[name].append((time.perf_counter() - t) / (n / step) * 1e6)
        w, s = statistics.median(times["whole"]), statistics.median(times["stream"])
        print(f"{n:>14} {w:>21.1f} {s:>19.1f} {w / s:>6.1f}x")


if __name__ == "__main__":
    main()
