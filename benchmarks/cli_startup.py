"""Cold start of `specplug recommend` vs a bare `python -c pass`, measured in the same run.

    python benchmarks/cli_startup.py [--runs 7]

Prints the median wall time of each and their ratio; the target is under 0.3 s for recommend.
Also checks that no numpy/scipy/torch is imported on that path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CMD = [sys.executable, "-m", "specplug.cli", "recommend", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
       "--batch-size", "1", "--stack", "vllm", "--output", "json"]


# An installed specplug has its bytecode compiled (pip does it at install time); some environments set
# PYTHONDONTWRITEBYTECODE, which would make every run recompile specplug from source. Measure the former.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _time(cmd: list[str], runs: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)  # warm-up
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    runs = ap.parse_args().runs
    base = _time([sys.executable, "-c", "pass"], runs)
    rec = _time(CMD, runs)
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv=" + repr(["specplug", *CMD[3:]]) + "\n"
         "try:\n    runpy.run_module('specplug.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "print(sorted(m for m in ('numpy','scipy','torch','transformers') if m in sys.modules), file=sys.stderr)"],
        capture_output=True, text=True,
    )
    heavy = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
    print(f"python -c pass: {base:.3f} s   specplug recommend: {rec:.3f} s   ratio: {rec / base:.1f}x   heavy imports: {heavy}")
    print("target: < 0.300 s  ->", "OK" if rec < 0.3 else "OVER")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
