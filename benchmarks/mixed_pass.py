"""What a joining prompt costs the running requests, in specplug's lean decoder on the packaged SmolLM2-135M.

For each prompt length it times, over a batch of running rows with a fixed context: the prompt prefilled in a pass
of its own plus one decode pass of the running rows (what the embedded engine did before prompts joined in the
decode pass), and one mixed pass feeding both, as ``DecodeBatch`` runs it (``parts``: the running rows attend
over their own columns), and the same pass with every row carrying the prompt's width (no ``parts``); the passes
alone, not the cache bookkeeping around them (the defaults stay within the cache's spare columns, so no pass
grows it). Each figure is the median of interleaved repeats; the ratios are to
the two passes apart, measured in the same run.

    python benchmarks/mixed_pass.py [--rows 8] [--context 250] [--prompts 60,150] [--repeats 8] [--threads 2]

Needs the ``[runtime]`` extra.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling server_ab (the model's folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=8, help="running requests")
    ap.add_argument("--context", type=int, default=250, help="tokens in each running row's cache")
    ap.add_argument("--prompts", default="60,150", help="joining prompt lengths")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    from server_ab import MODEL_DIR

    from specplug.runtime.cache import KVState
    from specplug.runtime.models import build_engine

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)  # as the engine runs: no autograd history on the cache, which batch() copies
    engine = build_engine(str(MODEL_DIR), method="none", dtype="float32", paced=False)
    target, dev, b = engine.target, engine.device, args.rows
    job = target.huge_pages_now() if hasattr(target, "huge_pages_now") else None
    if job is not None:
        job.join()
    gen = torch.Generator().manual_seed(0)
    running = KVState(target, b, dev)
    running.forward(torch.randint(0, 1000, (b, args.context), generator=gen), last_only=True)
    running.holes = True  # as after any join: the decode pass apart pays an attention mask too

    def batch() -> KVState:
        # A copy of the running rows' cache, and one joining row with nothing cached (as DecodeBatch adds it).
        kv = KVState(target, b, dev)
        kv.cache, kv.valid, kv.next_pos = copy.deepcopy(running.cache), running.valid.clone(), running.next_pos.clone()
        kv.merge(KVState(target, 1, dev))
        return kv

    def timed(fn: Callable[[], None]) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def measure(n: int) -> dict[str, float]:
        """Median ms of the passes apart, mixed in runs of rows, and mixed at one width, for an ``n``-token prompt."""
        prompt = torch.randint(0, 1000, (1, n), generator=gen)
        tokens = torch.zeros(b + 1, n, dtype=torch.long)
        real = torch.zeros(b + 1, n, dtype=torch.bool)
        tokens[:b, 0], real[:b, 0] = 5, True
        tokens[b], real[b] = prompt[0], True
        wanted = real.clone()
        wanted[b] = torch.arange(n) == n - 1

        def apart() -> None:
            KVState(target, 1, dev).forward(prompt, last_only=True).argmax(-1).tolist()
            running.forward(torch.randint(0, 1000, (b, 1), generator=gen)).argmax(-1).tolist()
            running.rollback(torch.zeros(b, dtype=torch.long, device=dev))

        def mixed(parts: list[tuple[int, int]] | None) -> Callable[[], None]:
            kv = batch()  # not timed: the pass alone is
            return lambda: kv.forward(tokens, real, fed=real, logits_at=wanted, parts=parts).argmax(-1).tolist()

        times: dict[str, list[float]] = {"apart": [], "runs": [], "one": []}
        for _ in range(args.repeats):  # interleaved, so that a slow spell of the machine hits each alike
            times["apart"].append(timed(apart))
            times["runs"].append(timed(mixed([(b, 1), (1, n)])))
            times["one"].append(timed(mixed(None)))
        return {k: 1e3 * statistics.median(v) for k, v in times.items()}

    print(f"{b} running rows, {args.context} tokens of context each; ms, median of {args.repeats}")
    print("prompt  apart (prefill + decode)  mixed, runs of rows  ratio  mixed, one width  ratio")
    with torch.inference_mode():
        for n in [int(x) for x in args.prompts.split(",")]:
            ms = measure(n)
            print(f"{n:6d}  {ms['apart']:24.1f}  {ms['runs']:19.1f}  {ms['runs'] / ms['apart']:5.2f}  "
                  f"{ms['one']:16.1f}  {ms['one'] / ms['apart']:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
