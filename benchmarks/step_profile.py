"""How the embedded engine's decode step grows with the batch, on the packaged SmolLM2-135M.

For each batch size it fills a :class:`~specplug.runtime.engine.DecodeBatch` with that many requests of
different prompt lengths (as a server's batch has), lets them all reach decoding, then times plain decode
steps (no drafts) and prints milliseconds per step and per output token, and the ratio of a step to the
batch-1 step measured in the same run. Alongside, the same model's bare forward over the same batch with
equal lengths and no mask (the arithmetic alone) shows what the engine adds: masks, padding, per-row Python.

    python benchmarks/step_profile.py [--batches 1,4,16] [--threads 2] [--steps 24] [--context 120]
                                      [--py-spy OUT.txt]

``--py-spy`` records the batch-16 steps with py-spy (from the same venv) into OUT.txt as folded stacks.
Needs the ``[runtime]`` extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch


def _engine(threads: int):  # noqa: ANN202 - SpeculativeEngine, imported lazily
    from transformers import AutoModelForCausalLM

    from specplug.runtime import smollm2
    from specplug.runtime.engine import SpeculativeEngine

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(
        str(smollm2.ensure_target()), dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    engine = SpeculativeEngine(model, None, None)
    job = engine.target.huge_pages_now() if hasattr(engine.target, "huge_pages_now") else None
    if job is not None:
        job.join()
    return engine


def engine_steps(engine, batch: int, context: int, steps: int) -> list[float]:  # noqa: ANN001
    """Seconds of each plain decode step over ``batch`` requests whose prompts are ``context`` tokens on
    average, spread from half to one and a half of it (so rows differ in length, as in a server)."""
    from specplug.runtime.engine import GenerationParams

    gen = torch.Generator().manual_seed(batch)
    b = engine.start()
    for i in range(batch):
        length = max(1, context // 2 + (context * i) // max(1, batch - 1)) if batch > 1 else context
        prompt = torch.randint(100, 20000, (length,), generator=gen).tolist()
        b.add(prompt, GenerationParams(max_new_tokens=steps + 8, ignore_eos=True))
    while b.pending or len(b.active) < batch:
        b.step()
    for _ in range(3):  # warm-up at this shape
        b.step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        b.step()
        times.append(time.perf_counter() - t)
    return times


def bare_steps(engine, batch: int, context: int, steps: int) -> list[float]:  # noqa: ANN001
    """Seconds of the model's own forward for one token per row over ``batch`` rows of ``context`` tokens."""
    target = engine.target
    cache = target.new_cache() if hasattr(target, "new_cache") else None
    ids = torch.randint(100, 20000, (batch, context))
    with torch.inference_mode():
        target(input_ids=ids, cache=cache, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = torch.randint(100, 20000, (batch, 1))
        times = []
        for _ in range(steps + 3):
            t = time.perf_counter()
            out = target(input_ids=nxt, cache=cache, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t)
    return times[3:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--context", type=int, default=120, help="mean prompt length")
    ap.add_argument("--py-spy", dest="py_spy", default=None, help="write py-spy folded stacks of batch 16 here")
    args = ap.parse_args()
    batches = [int(x) for x in args.batches.split(",") if x]
    engine = _engine(args.threads)
    print(f"threads={torch.get_num_threads()} mean prompt={args.context} steps={args.steps} "
          f"load average={os.getloadavg()[0]:.2f}")
    base_e = base_b = None
    for batch in batches:
        e = statistics.median(engine_steps(engine, batch, args.context, args.steps)) * 1e3
        bare = statistics.median(bare_steps(engine, batch, args.context, args.steps)) * 1e3
        base_e = base_e or e
        base_b = base_b or bare
        print(f"batch {batch:3d}: engine step {e:7.2f} ms ({e / batch:6.2f} ms/token, x{e / base_e:5.2f} of batch 1)"
              f"   bare forward {bare:7.2f} ms (x{bare / base_b:5.2f})   engine/bare {e / bare:4.2f}")
    if args.py_spy:
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if not os.path.exists(spy):
            print("py-spy not found; skipped the profile")
            return
        cmd = [spy, "record", "--format", "raw", "--rate", "200", "-o", args.py_spy, "--",
               sys.executable, __file__, "--batches", "16", "--threads", str(args.threads),
               "--steps", str(4 * args.steps), "--context", str(args.context)]
        subprocess.run(cmd, check=False)


if __name__ == "__main__":
    main()
