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
    with open(out, "w", encoding="utf-8") as f:
        json.dump(shots, f, sort_keys=True, indent=0)
    print(f"{len(shots)} plans -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
