"""Which stored form of a weight multiplies fastest on this CPU.

Backs ``specplug.runtime.decoder.CPU_LAYOUT``, ``CPU_PACKED`` and ``PACKED_ROWS``. For each weight of the
packaged SmolLM2-135M (or the ``--config`` given), one copy per layer (so that, as in a real forward pass, the
weights are not in cache), it times ``x @ W.T`` for 1-8 rows of ``x`` with W stored as torch's (out, in),
transposed (in, out), and packed by MKL where the decoder packs that weight (at the row counts it does, each
padded to its pack's); interleaved, and prints the median time over all layers. As in the decoder, the first
two forms lie in huge pages (on Linux) and the packs do not. The last lines add the weights up, torch's layout
against the mix specplug uses.

    python benchmarks/weight_layout.py [--rows 1,2,3,4,5,6,8] [--repeats 15] [--threads N]
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
    ap.add_argument("--rows", default="1,2,3,4,5,6,8")
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
    forms: dict[str, dict[str, list]] = {"torch": {}, "transposed": {}, "packed": {}}
    for k, (o, i, n) in kinds.items():
        forms["torch"][k] = [torch.randn(o, i) * 0.02 for _ in range(n)]
        forms["transposed"][k] = [w.t().contiguous().t() for w in forms["torch"][k]]
        # In huge pages where the decoder puts them (decoder.HUGE_PAGES); MKL's packs cannot be moved.
        decoder.huge_pages(forms["torch"][k] + forms["transposed"][k])
        if k in decoder.CPU_PACKED and decoder._mkl_packing():
            forms["packed"][k] = [decoder._Packed(w) for w in forms["torch"][k]]

    def once(form: str, k: str, m: int) -> float:
        x = torch.randn(m, kinds[k][1])
        t = time.perf_counter()
        for w in forms[form][k]:
            w(x) if form == "packed" else F.linear(x, w)
        return time.perf_counter() - t

    times: dict[tuple[str, int, str], list[float]] = {}
    with torch.inference_mode():
        for r in range(args.repeats):
            for k in kinds:
                for m in rows:
                    names = [f for f in forms if k in forms[f] and (f != "packed" or m in decoder.PACKED_ROWS)]
                    # Alternate the order, so that a drift in load favours none.
                    for f in names[:: -1 if r % 2 else 1]:
                        times.setdefault((k, m, f), []).append(once(f, k, m))
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    print(f"threads={torch.get_num_threads()} config={path}")
    print("ms for all copies of a weight: torch's layout / transposed / MKL packed (where specplug packs it)")
    print(f"{'weight':<8} {'copies':>6}  " + "  ".join(f"{m} row{'s' if m > 1 else ' '}".center(20) for m in rows))
    for k, (_, _, n) in kinds.items():
        cells = ["/".join(f"{med[(k, m, f)]:6.2f}" for f in ("torch", "transposed", "packed") if (k, m, f) in med)
                 for m in rows]
        how = decoder.CPU_LAYOUT.get(k, "torch") + (" + packed" if k in forms["packed"] else "")
        print(f"{k:<8} {n:>6}  " + "  ".join(c.center(20) for c in cells) + f"  specplug: {how}")

    def chosen(k: str, m: int) -> str:  # which stored form specplug multiplies ``k`` by at ``m`` rows
        how = decoder.CPU_LAYOUT.get(k, "torch")
        if k in forms["packed"] and m in decoder.PACKED_ROWS:
            return "packed"
        return "transposed" if how == "transposed" or (how == "both" and m not in decoder.TORCH_LAYOUT_ROWS) else "torch"

    for m in rows:
        base = sum(med[(k, m, "torch")] for k in kinds)
        mix = sum(med[(k, m, chosen(k, m))] for k in kinds)
        print(f"{m} row{'s' if m > 1 else ' '}: all products {base:6.2f} ms in torch's layout, {mix:6.2f} ms as "
              f"specplug stores them ({base / mix:.2f}x)")


if __name__ == "__main__":
    main()
