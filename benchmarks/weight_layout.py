"""Which weight layout multiplies faster on this CPU: torch's (out, in) or transposed (in, out)?

Backs ``specplug.runtime.decoder.CPU_LAYOUT``. For each weight of the packaged SmolLM2-135M (or the
``--config`` given), one copy per layer (so that, as in a real forward pass, the weights are not in cache),
it times ``x @ W.T`` for 1-5 rows of ``x`` with W stored either way, interleaved, and prints the median time
over all layers and the ratio (above 1: transposed is faster). The last lines add the weights up, torch's
layout against the mix specplug uses.

    python benchmarks/weight_layout.py [--rows 1,2,3,4,5] [--repeats 15] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def shapes(cfg: dict) -> dict[str, tuple[int, int, int]]:
    """Weight kind -> (out, in, copies) for a Llama-shaped config."""
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    dim = cfg.get("head_dim") or d // heads
    kv = cfg.get("num_key_value_heads") or heads
    inter = cfg["intermediate_size"]
    return {
        "qkv": ((heads + 2 * kv) * dim, d, layers),
        "o": (d, heads * dim, layers),
        "gate_up": (2 * inter, d, layers),
        "down": (d, inter, layers),
        "lm_head": (cfg["vocab_size"], d, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", help="a model's config.json (default: the packaged SmolLM2-135M)")
    ap.add_argument("--rows", default="1,2,3,4,5")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from specplug.runtime import decoder

    if args.config:
        path = Path(args.config)
    else:
        from specplug.runtime import smollm2

        path = Path(smollm2.ensure_target()) / "config.json"
    kinds = shapes(json.loads(path.read_text()))
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    weights = {k: [torch.randn(o, i) * 0.02 for _ in range(n)] for k, (o, i, n) in kinds.items()}
    relaid = {k: [w.t().contiguous().t() for w in ws] for k, ws in weights.items()}

    def once(ws: list[torch.Tensor], m: int) -> float:
        x = torch.randn(m, ws[0].shape[1])
        t = time.perf_counter()
        for w in ws:
            F.linear(x, w)
        return time.perf_counter() - t

    times: dict[tuple[str, int, bool], list[float]] = {}
    with torch.inference_mode():
        for r in range(args.repeats):
            for k in kinds:
                for m in rows:
                    # Alternate which layout goes first, so that a drift in load favours neither.
                    for t in ((False, True) if r % 2 else (True, False)):
                        times.setdefault((k, m, t), []).append(once((relaid if t else weights)[k], m))
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    print(f"threads={torch.get_num_threads()} config={path}")
    print("ms for all copies of a weight (torch layout / transposed = ratio; above 1: transposed is faster)")
    print(f"{'weight':<8} {'copies':>6}  " + "  ".join(f"{m} row{'s' if m > 1 else ' '}".center(20) for m in rows))
    for k, (_, _, n) in kinds.items():
        cells = [f"{med[(k, m, False)]:6.2f}/{med[(k, m, True)]:6.2f}={med[(k, m, False)] / med[(k, m, True)]:4.2f}"
                 for m in rows]
        print(f"{k:<8} {n:>6}  " + "  ".join(cells) + f"  specplug: {decoder.CPU_LAYOUT.get(k, 'torch')}")

    def chosen(k: str, m: int) -> bool:  # does specplug multiply ``k`` transposed at ``m`` rows?
        how = decoder.CPU_LAYOUT.get(k, "torch")
        return how == "transposed" or (how == "both" and m not in decoder.TORCH_LAYOUT_ROWS)

    for m in rows:
        base = sum(med[(k, m, False)] for k in kinds)
        mix = sum(med[(k, m, chosen(k, m))] for k in kinds)
        print(f"{m} row{'s' if m > 1 else ' '}: all products {base:6.2f} ms in torch's layout, {mix:6.2f} ms as "
              f"specplug lays them out ({base / mix:.2f}x)")


if __name__ == "__main__":
    main()
