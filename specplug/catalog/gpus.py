"""GPU catalog: memory, bandwidth, dense tensor throughput and interconnect per accelerator."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from specplug.catalog._csv import aliases, norm, num, read_rows, unknown


# Plain dataclasses, not pydantic: catalog rows are trusted data, and class building is start-up time.
@dataclass(frozen=True, kw_only=True)
class GPU:
    name: str
    aliases: list[str] = field(default_factory=list)
    vendor: str
    memory_gb: float | None = None  # GiB, as vendors size GPU memory
    memory_bw_gbs: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    fp8_tflops: float | None = None
    int8_tops: float | None = None
    interconnect: str = ""
    tdp_w: float | None = None
    nvml_name_patterns: list[str] = field(default_factory=list)
    source: str = ""
    confirmed: str = ""
    notes: str = ""

    @property
    def planning_only(self) -> bool:
        """specplug can plan for it, but the probe (pynvml) cannot see it: AMD parts."""
        return self.vendor.upper() != "NVIDIA"

    @property
    def nvlink(self) -> bool:
        return "nvlink" in self.interconnect.lower() or "xgmi" in self.interconnect.lower()

    def tensor_tflops(self) -> float | None:
        """Dense 16-bit throughput, the figure the cost model uses for bf16/fp16 weights."""
        return self.bf16_tflops or self.fp16_tflops


@cache
def gpus() -> tuple[GPU, ...]:
    out = []
    for r in read_rows("gpus.csv"):
        out.append(
            GPU(
                name=r["name"],
                aliases=aliases(r["aliases"]),
                vendor=r["vendor"],
                memory_gb=num(r["memory_gb"]),
                memory_bw_gbs=num(r["memory_bw_gbs"]),
                bf16_tflops=num(r["bf16_dense_tflops"]),
                fp16_tflops=num(r["fp16_dense_tflops"]),
                fp8_tflops=num(r["fp8_dense_tflops"]),
                int8_tops=num(r["int8_dense_tops"]),
                interconnect=r["interconnect"],
                tdp_w=num(r["tdp_w"]),
                nvml_name_patterns=aliases(r["nvml_name_patterns"]),
                source=r["source"],
                confirmed=r["confirmed"],
                notes=r["notes"],
            )
        )
    return tuple(out)


@cache
def _index() -> dict[str, GPU]:
    idx: dict[str, GPU] = {}
    for g in gpus():
        for key in [g.name, *g.aliases]:
            idx.setdefault(norm(key), g)
    return idx


def get_gpu(name: str) -> GPU:
    """Resolve a catalog name or alias ('h100', 'H100-SXM', 'h100-80gb'), or a GPU spec string
    ('memory_gib=80,bandwidth_gbs=3350,bf16_tflops=989'); CatalogError if unknown or malformed."""
    if "=" in name:
        from specplug.catalog.gpuspec import parse_gpu_spec

        return parse_gpu_spec(name)
    g = _index().get(norm(name))
    if g is None:
        err = unknown("GPU", name, sorted(_index()), "specplug gpus")
        raise type(err)(err.message, (err.hint or "") + " Describe any other accelerator as memory_gib=..,bandwidth_gbs=..,bf16_tflops=..")
    return g


def match_nvml_name(device_name: str) -> GPU | None:
    """Map an NVML device name ('NVIDIA H100 80GB HBM3') to a catalog entry, or None.

    An exact name wins; otherwise the longest pattern contained in the device name, so
    'NVIDIA A100-SXM4-80GB' is not taken for an A10 nor 'NVIDIA H200 NVL' for an H200.
    """
    dev = norm(device_name)
    best: tuple[int, GPU] | None = None
    for g in gpus():
        for pat in g.nvml_name_patterns:
            p = norm(pat)
            if p == dev:
                return g
            if p and p in dev and (best is None or len(p) > best[0]):
                best = (len(p), g)
    return best[1] if best else None
