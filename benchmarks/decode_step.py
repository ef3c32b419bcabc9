"""Where a decode step's time goes, in specplug's lean decoder on the packaged SmolLM2-135M.

For each width (tokens fed per pass: 1 is plain decoding, k + 1 a verification pass), over a fixed context, it
times the whole step, then replays the step's own matrix products and attention calls alone (captured from a
real step, so the same weights, stored forms and shapes), and prints each one's share of the step; the rest
is the step's other operators and Python. The products' bytes per second are printed as a ratio to a plain
``sum`` streaming as many bytes, measured in the same run: the memory bandwidth a step could reach here.

    python benchmarks/decode_step.py [--context 300] [--widths 1,2,5] [--repeats 7] [--threads N]

Needs the ``[runtime]`` extra.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _median_ms(fn: Callable[[], Any], repeats: int, inner: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=300, help="tokens already in the KV cache")
    ap.add_argument("--widths", default="1,2,5", help="tokens fed per pass")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM

    from specplug.runtime import decoder, smollm2

    model = AutoModelForCausalLM.from_pretrained(str(smollm2.ensure_target()), dtype=torch.float32).eval()
    dec = decoder.LeanDecoder(model)
    job = dec.huge_pages_now()
    if job is not None:
        job.join()
    torch.manual_seed(0)
    cache = dec.new_cache()
    with torch.inference_mode():
        dec(torch.randint(0, 1000, (1, args.context)), cache=cache)

    print(f"threads={torch.get_num_threads()} context={args.context} (ms per step; shares of the step)")
    for width in [int(w) for w in args.widths.split(",") if w]:
        whole, mm, att, stream, streamed = measure(dec, cache, args.context, width, args.repeats)
        rest = whole - mm - att
        print(f"width {width}: step {whole:6.2f}  products {mm:6.2f} ({mm / whole:4.0%})  attention {att:5.2f} "
              f"({att / whole:4.0%})  rest {rest:5.2f} ({rest / whole:4.0%})  products at {stream / mm:4.0%} of "
              f"a streaming sum over the same {streamed / 2**20:.0f} MB ({streamed / stream / 1e6:.1f} GB/s)")


def measure(dec: Any, cache: Any, context: int, width: int, repeats: int) -> tuple[float, float, float, float, int]:
    """Milliseconds of a step feeding ``width`` tokens, of its products and of its attention replayed alone, and
    of a ``sum`` over as many bytes as the products read; and that byte count."""
    from specplug.runtime import decoder

    tokens = torch.randint(0, 1000, (1, width))

    def step() -> None:
        dec(tokens, cache=cache)
        cache.crop_to(context)

    # One real step, its products and attention calls recorded with their arguments.
    products: list[tuple[Any, ...]] = []
    attention: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    linear, sdpa = decoder._linear, F.scaled_dot_product_attention

    def record_linear(*a: Any) -> torch.Tensor:
        products.append((a[0].clone(), *a[1:]))
        return linear(*a)

    def record_sdpa(*a: Any, **kw: Any) -> torch.Tensor:
        attention.append((tuple(t.clone() for t in a), kw))
        return sdpa(*a, **kw)

    decoder._linear, F.scaled_dot_product_attention = record_linear, record_sdpa
    try:
        with torch.inference_mode():
            step()
    finally:
        decoder._linear, F.scaled_dot_product_attention = linear, sdpa

    def replay_products() -> None:
        for a in products:
            linear(*a)

    def replay_attention() -> None:
        for a, kw in attention:
            sdpa(*a, **kw)

    # A packed product reads its pack, about as large as the weight it was made from.
    streamed = sum((a[2].weight if a[2] is not None else a[1]).nbytes for a in products)
    buf = torch.ones(streamed // 4)
    decoder.huge_pages([buf])
    with torch.inference_mode():
        times = [_median_ms(fn, repeats, 10) for fn in (step, replay_products, replay_attention, buf.sum)]
    return (*times, streamed)

if __name__ == "__main__":
    main()
