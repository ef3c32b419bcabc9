"""This machine's CPU as a device the cost model can plan for, where a stack serves on the CPU (the embedded
runtime without a GPU): cores from the process's CPU affinity, memory from /proc/meminfo, and bandwidth and
throughput stated per core from the CPU's vector width and clock, as a GPU spec string (specplug.catalog.gpuspec)
that the plan records and the note explains. The server measures its own pass costs when it starts; this is
what the plan is made with before it does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specplug.catalog.gpuspec import spec_string

# Weight bytes a decode step streams per second per core, float32 (benchmarks/step_profile.py: SmolLM2-135M's
# 540 MB step took 36 ms on 2 cores), up to what one socket's memory channels give.
GBS_PER_CORE = 7.5
MAX_GBS = 200.0
# Sustained float32 FLOPs per cycle per core by vector extension: half of two FMA pipes' peak, as matmuls reach.
FLOPS_PER_CYCLE = (("avx512f", 32), ("avx2", 16), ("asimd", 8))
DEFAULT_FLOPS_PER_CYCLE = 4
DEFAULT_GHZ = 2.5


@dataclass(frozen=True)
class HostCPU:
    spec: str  # the GPU spec string the plan is made for
    memory_gib: float
    note: str


def host_cpu(cpuinfo: str | None = None, meminfo: str | None = None, cores: int | None = None) -> HostCPU:
    """This machine's CPU as a planning device; the arguments stand in for /proc files and the affinity in tests."""
    cores = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    cpuinfo = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    meminfo = _read("/proc/meminfo") if meminfo is None else meminfo
    flags = set()
    mhz: list[float] = []
    name = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features"):
            flags.update(value.split())
        elif key == "cpu MHz":
            mhz.append(_float(value))
        elif key == "model name" and not name:
            name = value.strip()
    per_cycle = next((n for flag, n in FLOPS_PER_CYCLE if flag in flags), DEFAULT_FLOPS_PER_CYCLE)
    ghz = max(mhz) / 1000 if mhz and max(mhz) > 0 else DEFAULT_GHZ
    kib = next((_float(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0.0)
    memory = round(kib / 2**20, 1) if kib else 16.0
    fp32_gbs = min(MAX_GBS, GBS_PER_CORE * cores)
    tflops = cores * ghz * per_cycle / 1000
    # The runtime serves float32 on a CPU, twice the bytes of the 16-bit weights a plan counts: the stated
    # bandwidth is halved so that a step costs what it will.
    spec = spec_string(memory, round(fp32_gbs / 2, 2), round(tflops, 3), name=f"CPU x{cores}")
    vector = next((flag for flag, _ in FLOPS_PER_CYCLE if flag in flags), "no vector extension read")
    note = (
        f"No GPU: planned for this machine's CPU ({name or 'unnamed'}, {cores} cores, {memory:g} GiB): "
        f"{GBS_PER_CORE:g} GB/s of float32 weights per core (at most {MAX_GBS:g}), {per_cycle} FLOPs per cycle per core "
        f"({vector}) at {ghz:.2f} GHz, stated as {fp32_gbs / 2:g} GB/s for the 16-bit weights the plan counts. The "
        "server times its own passes at start and drafts only where they pay; name other hardware with --gpu."
    )
    return HostCPU(spec, memory, note)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        return 0.0
