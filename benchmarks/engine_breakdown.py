"""Where a closed-loop round's time goes, plain against paced n-gram: passes by kind and batch, tokens computed.

    python benchmarks/engine_breakdown.py [--concurrency 8,16] [--repeats 3] [--threads 2]

The same engines, prompts and rounds as engine_closed_loop.py (16 prompts, 64 output tokens, greedy, ``c`` in
flight). Per round it prints output tokens/s and the round's steps split into admissions (prefill passes) and
decode passes (``mixed``: a decode pass that also fed a joining prompt), each with a ``*`` where the pacer ran it to time a pass size; the decode passes by running batch
(count x median ms); what speculation did (``spec_steps``); and the tokens the target computed in decode passes
(plain computes one per row per pass). A ratio below 1 is then read as: more passes, dearer passes of the same
batch, or more admissions. Needs the ``[runtime]`` extra.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling server_ab (its prompts and model)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="8,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    from engine_closed_loop import build_engines, load_prompts, run_round

    from specplug.runtime.engine import DecodeBatch

    torch.set_num_threads(args.threads)
    prompts, params = load_prompts()
    steps_log: list[tuple[str, int, float]] = []  # (kind, running batch, seconds)
    fed: list[int] = []  # tokens each decode pass computed
    last_fed = [0]  # tokens the latest timed pass computed (the pacer is told after each decode pass)
    plain_step = DecodeBatch.step

    def step(self: DecodeBatch) -> list:
        rows, queued = len(self.rows), len(self._queue)
        # A prompt joins in a pass of its own, or rides in the running rows' pass (mixed).
        mixed = bool(self._joining) or (queued and self._mixing())
        t = time.perf_counter()
        outs = plain_step(self)
        seconds = time.perf_counter() - t
        pacer = self.engine.pacer
        # An admission runs no pacer: its ``measuring`` is the previous decode pass's.
        timing = (mixed or not queued) and pacer is not None and pacer.measuring
        kind = ("mixed" if mixed else "admit" if queued else "decode") + ("*" if timing else "")
        steps_log.append((kind, rows, seconds))
        if not queued and not mixed:
            fed.append(rows if pacer is None else last_fed[0])
        return outs

    DecodeBatch.step = step  # type: ignore[method-assign]
    engines = build_engines()
    for engine in engines.values():
        if engine.pacer is not None:
            observe = engine.pacer.observe_pass

            def observed(tokens: int, seconds: float, rows: int | None = None, observe=observe) -> None:  # noqa: ANN001
                last_fed[0] = tokens
                observe(tokens, seconds, rows)

            engine.pacer.observe_pass = observed  # type: ignore[method-assign]
        run_round(engine, prompts, params, 4)
    for c in [int(x) for x in args.concurrency.split(",")]:
        for _ in range(args.repeats):
            for method, engine in engines.items():
                steps_log.clear()
                fed.clear()
                before = dict(engine.spec_steps)
                rate = run_round(engine, prompts, params, c)[0]
                kinds: dict[str, list[float]] = collections.defaultdict(list)
                by_batch: dict[int, list[float]] = collections.defaultdict(list)
                for kind, rows, seconds in steps_log:
                    kinds[kind].append(seconds)
                    if kind == "decode":
                        by_batch[rows].append(seconds)
                spec = {k: engine.spec_steps[k] - before.get(k, 0) for k in engine.spec_steps}
                print(f"c={c} {method:5s} {rate:6.1f} tok/s | "
                      + " ".join(f"{k}: {len(v)} passes {sum(v):.2f} s" for k, v in sorted(kinds.items()))
                      + f" | decode tokens computed {sum(fed)}" + (f" | spec_steps {spec}" if engine.pacer else ""))
                print("    decode passes by batch: " + " ".join(
                    f"{b}: {len(v)} x {1000 * statistics.median(v):.1f} ms" for b, v in sorted(by_batch.items())),
                    flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
