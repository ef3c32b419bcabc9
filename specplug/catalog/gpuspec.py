"""GPUs the catalog does not list: a spec string the user writes, or what NVML reads from an unknown NVIDIA GPU.

A spec string ``memory_gib=..,bandwidth_gbs=..,bf16_tflops=..`` (optionally ``fp8_tflops=``, ``nvlink=yes|no``,
``name=``) parses into the catalog's GPU type. Its canonical form is also the GPU's name, so that anything holding
only a name (a plan's hardware, a config's ``gpu:``) resolves it again through ``get_gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specplug.catalog.gpus import GPU
from specplug.errors import CatalogError

_REQUIRED = {
    "memory_gib": "memory per GPU in GiB",
    "bandwidth_gbs": "memory bandwidth in GB/s",
    "bf16_tflops": "dense BF16/FP16 tensor throughput in TFLOPS",
}
_OPTIONAL = {"fp8_tflops": "dense FP8 tensor throughput in TFLOPS", "nvlink": "yes or no", "name": "a label"}
# Beyond these a figure is a typo (bandwidth in MB/s, memory in MiB), not a device; the floors admit one CPU core.
_LIMITS = {"memory_gib": (0.5, 4096.0), "bandwidth_gbs": (1.0, 100_000.0), "bf16_tflops": (0.01, 100_000.0),
           "fp8_tflops": (0.1, 200_000.0)}
_EXAMPLE = "memory_gib=80,bandwidth_gbs=3350,bf16_tflops=989"


def is_gpu_spec(text: str) -> bool:
    """A GPU argument is a spec string when it holds key=value pairs; catalog names never contain '='."""
    return "=" in text


def parse_gpu_spec(text: str) -> GPU:
    """The GPU a spec string describes; CatalogError naming the bad or missing key and what would work."""
    values: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not value.strip():
            raise _error(f"'{item}' in the GPU spec is not key=value.")
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise _error(f"Unknown key '{key}' in the GPU spec.")
        if key in values:
            raise _error(f"'{key}' is given twice in the GPU spec.")
        values[key] = value.strip()
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise _error("The GPU spec lacks " + ", ".join(f"{k} ({_REQUIRED[k]})" for k in missing) + ".")
    nums = {k: _number(k, v) for k, v in values.items() if k in _LIMITS}
    nvlink = values.get("nvlink", "no").lower()
    if nvlink not in ("yes", "no", "true", "false", "1", "0"):
        raise _error(f"nvlink must be yes or no, not '{values['nvlink']}'.")
    linked = nvlink in ("yes", "true", "1")
    label = values.get("name", "")
    return GPU(
        name=spec_string(nums["memory_gib"], nums["bandwidth_gbs"], nums["bf16_tflops"], nums.get("fp8_tflops"),
                         linked, label),
        vendor="unspecified",
        memory_gb=nums["memory_gib"],
        memory_bw_gbs=nums["bandwidth_gbs"],
        bf16_tflops=nums["bf16_tflops"],
        fp16_tflops=nums["bf16_tflops"],
        fp8_tflops=nums.get("fp8_tflops"),
        interconnect="NVLink (from the GPU spec)" if linked else "PCIe (from the GPU spec)",
        source=f"GPU spec '{text.strip()}'" if not label else f"GPU spec for {label}",
        confirmed="user",
    )


def spec_string(memory_gib: float, bandwidth_gbs: float, bf16_tflops: float, fp8_tflops: float | None = None,
                nvlink: bool = False, name: str = "") -> str:
    """The canonical spec string: keys in a fixed order, so one GPU has one name."""
    parts = [f"memory_gib={memory_gib:g}", f"bandwidth_gbs={bandwidth_gbs:g}", f"bf16_tflops={bf16_tflops:g}"]
    if fp8_tflops:
        parts.append(f"fp8_tflops={fp8_tflops:g}")
    if nvlink:
        parts.append("nvlink=yes")
    if name:
        parts.append("name=" + name.replace(",", " ").replace("=", " ").strip())
    return ",".join(parts)


def _number(key: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise _error(f"{key} must be a number, not '{value}'.") from None
    lo, hi = _LIMITS[key]
    if not lo <= x <= hi:
        raise _error(f"{key}={value} is outside {lo:g}..{hi:g} ({_REQUIRED.get(key) or _OPTIONAL.get(key)}).")
    return x


def _error(what: str) -> CatalogError:
    keys = ", ".join([*_REQUIRED, *_OPTIONAL])
    return CatalogError(what, f"Write the GPU as {_EXAMPLE} (keys: {keys}), or name a catalog GPU (specplug gpus).")


# ----------------------------------------------------------------------------------------- from NVML readings

# Per compute capability: CUDA cores per SM, and dense FP16 tensor flops per SM per clock with FP16 accumulate
# (GeForce parts run FP32 accumulate at half of it). Checked against catalog rows: A100 108 SMs x 1.41 GHz x 2048
# = 312, H100 SXM 132 x 1.83 x 4096 = 989, L40S 142 x 2.52 x 1024 = 366, RTX PRO 6000 188 x 2.43 x 1024 = 468.
_PER_SM: dict[str, tuple[int, int]] = {
    "7.0": (64, 1024), "7.2": (64, 1024), "7.5": (64, 1024),
    "8.0": (64, 2048), "8.6": (128, 1024), "8.7": (128, 2048), "8.9": (128, 1024),
    "9.0": (128, 4096),
    "10.0": (128, 8192), "10.3": (128, 8192), "11.0": (128, 8192),
    "12.0": (128, 1024), "12.1": (128, 1024),
}


@dataclass(frozen=True)
class NvmlReadings:
    """What NVML says about one device; None where the driver did not answer."""

    name: str
    memory_gib: float
    bus_width_bits: int | None = None
    max_mem_clock_mhz: int | None = None
    cuda_cores: int | None = None
    max_sm_clock_mhz: int | None = None
    compute_capability: str | None = None


def gpu_from_nvml(r: NvmlReadings) -> tuple[GPU, str]:
    """A GPU for a device the catalog lacks, estimated from NVML, and the note that says how; CatalogError when
    NVML did not give enough to estimate bandwidth and throughput."""
    gaps = []
    if not (r.bus_width_bits and r.max_mem_clock_mhz):
        gaps.append("memory bus width and clock")
    per_sm = _PER_SM.get(r.compute_capability or "")
    if not (r.cuda_cores and r.max_sm_clock_mhz and per_sm):
        gaps.append("CUDA cores, SM clock and a compute capability specplug has tensor rates for"
                    + (f" (it read {r.compute_capability})" if r.compute_capability and not per_sm else ""))
    if gaps:
        raise CatalogError(
            f"The probed GPU '{r.name}' is not in the GPU catalog, and NVML did not give its "
            + " or ".join(gaps) + ", so its bandwidth and throughput cannot be estimated.",
            f"Describe it with --gpu {_EXAMPLE} (its datasheet figures), or pass the closest catalog GPU "
            "(see 'specplug gpus').",
        )
    assert per_sm and r.bus_width_bits and r.max_mem_clock_mhz and r.cuda_cores and r.max_sm_clock_mhz
    # Double data rate: NVML's memory clock times two transfers per clock (H100: 5120 bits x 2619 MHz -> 3352 GB/s).
    bandwidth = round(r.bus_width_bits / 8 * r.max_mem_clock_mhz * 2 / 1000, 1)
    cores_per_sm, flops = per_sm
    sms = r.cuda_cores // cores_per_sm
    geforce = "geforce" in r.name.lower()
    tflops = round(sms * r.max_sm_clock_mhz * 1e6 * flops / (2 if geforce else 1) / 1e12, 1)
    name = spec_string(round(r.memory_gib, 2), bandwidth, tflops, name=r.name)
    gpu = GPU(name=name, vendor="NVIDIA", memory_gb=round(r.memory_gib, 2), memory_bw_gbs=bandwidth, bf16_tflops=tflops,
              fp16_tflops=tflops, source=f"NVML readings of '{r.name}'", confirmed="estimated",
              notes="bandwidth and throughput estimated from NVML")
    note = (
        f"'{r.name}' is not in the GPU catalog; planned from NVML: {r.memory_gib:.1f} GiB, bandwidth "
        f"{r.bus_width_bits}-bit x {r.max_mem_clock_mhz} MHz x 2 = {bandwidth:g} GB/s, throughput {sms} SMs x "
        f"{r.max_sm_clock_mhz} MHz x {flops} flops/clock{' / 2 (GeForce FP32 accumulate)' if geforce else ''} = "
        f"{tflops:g} dense BF16 TFLOPS (estimates: pass --gpu {spec_string(round(r.memory_gib, 2), bandwidth, tflops)} "
        "with datasheet figures to correct them)."
    )
    return gpu, note
