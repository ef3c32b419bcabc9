"""Plans for the whole catalog x 5 stacks x 3 batch sizes, as one JSON file: run before and after a refactor of the
planner and compare the two files (they must be byte-identical unless a fix says otherwise).

    .venv/bin/python scripts/plan_snapshot.py /tmp/before.json
    .venv/bin/python scripts/plan_snapshot.py /tmp/after.json && cmp /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import json
import sys

import specplug
from specplug.catalog import models
from specplug.errors import SpecplugError

STACKS = (("vllm", "0.32.0"), ("sglang", None), ("trtllm", "1.3.0rc22"), ("llamacpp", "b10576"), ("embedded", None))
BATCHES = (1, 16, 128)
# Paths the batch sweep does not take, on a few models: a request rate with SLOs, a long context, sampling, a pinned
# technique, a small GPU (lighter weights, a lowered context, or the fixes of a plan that does not fit).
VARIANTS: dict[str, dict[str, object]] = {
    "rate": {"request_rate": 4.0, "input_len": 2048, "output_len": 256, "slo_tpot_ms": 20.0, "slo_ttft_ms": 500.0},
    "long": {"input_len": 32768, "output_len": 512},
    "sampled": {"temperature": 1.0, "workload": "code"},
    "ngram": {"method": "ngram", "num_speculative_tokens": 5},
    "l4": {"gpu": "l4", "num_gpus": 1},
    "l4-auto": {"gpu": "l4"},
}
VARIANT_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-8B",
                  "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b")


def main(out: str) -> int:
    shots: dict[str, object] = {}
    for m in sorted((m for m in models() if not m.local_path), key=lambda m: m.hf_id):
        for stack, version in STACKS:
            for batch in BATCHES:
                key = f"{m.hf_id}|{stack}|{batch}"
                try:
                    p = specplug.recommend(m.hf_id, gpu="h100", concurrency=batch, stack=stack, stack_version=version)
                    shots[key] = p.model_dump(mode="json")
                except SpecplugError as e:
                    shots[key] = {"error": str(e)}
    for hf_id in VARIANT_MODELS:
        for stack, version in STACKS[:3]:
            for name, flags in VARIANTS.items():
                key = f"{hf_id}|{stack}|{name}"
                try:
                    p = specplug.recommend(hf_id, **{"gpu": "h100", **flags}, stack=stack, stack_version=version)
                    shots[key] = p.model_dump(mode="json")
                except SpecplugError as e:
                    shots[key] = {"error": str(e)}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(shots, f, sort_keys=True, indent=0)
    print(f"{len(shots)} plans -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
