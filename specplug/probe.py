"""Hardware probe: what GPUs this machine has, read through NVML (pynvml), mapped onto the GPU catalog.

Without a driver or a GPU the probe says so and returns an empty result; planning then uses a named GPU
(``--gpu NAME --num-gpus N``) or the stated default deployment.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType

from pydantic import BaseModel, Field

from specplug.catalog import GPU, get_gpu, match_nvml_name

# When nothing is probed and nothing is named, plan for the most common production deployment.
DEFAULT_GPU = "H100-SXM"
DEFAULT_NUM_GPUS = 1


class GPUDevice(BaseModel):
    index: int
    name: str
    memory_total_gb: float
    memory_free_gb: float | None = None
    compute_capability: str | None = None
    catalog_name: str | None = Field(None, description="The GPU catalog entry this device maps to, if any.")
    nvlink_active_links: int | None = None
    # Read for GPUs the catalog lacks: bandwidth and throughput are estimated from them (specplug.catalog.gpuspec).
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    cuda_cores: int | None = None
    max_sm_clock_mhz: int | None = None


class ProbeResult(BaseModel):
    available: bool
    driver_version: str | None = None
    devices: list[GPUDevice] = Field(default_factory=list)
    nvlink: bool | None = None
    message: str

    @property
    def count(self) -> int:
        return len(self.devices)


class Hardware(BaseModel):
    """What a plan is made for: one kind of GPU, a count, and where that came from."""

    gpu: str = Field(description="GPU catalog name")
    num_gpus: int = Field(1, ge=1)
    memory_gb: float = Field(description="Memory per GPU used for planning, in GiB (probed total, else catalog)")
    source: str = Field(description="'probed', 'named', 'default' or 'host' (this machine's CPU, for a stack that serves on it)")
    note: str = ""
    # What the probe found where it found no GPU to plan for (the default's note starts with it); kept out of the Plan.
    probe_message: str = Field("", exclude=True)

    def catalog_entry(self) -> GPU:
        return get_gpu(self.gpu)


def _load_pynvml() -> ModuleType | None:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe(nvml: ModuleType | None = None) -> ProbeResult:
    """Read GPUs through NVML. Never raises: a missing driver or library is reported in ``message``."""
    nv = nvml if nvml is not None else _load_pynvml()
    if nv is None:
        return ProbeResult(available=False, message="pynvml (nvidia-ml-py) is not installed; no GPU probed.")
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: all mean "no usable GPU"
        return ProbeResult(available=False, message=f"No NVIDIA driver found ({_nvml_reason(exc)}); no GPU probed.")
    try:
        try:
            driver = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
        count = nv.nvmlDeviceGetCount()
        devices = [_read_device(nv, i) for i in range(count)]
    except Exception as exc:
        return ProbeResult(available=False, message=f"The NVIDIA driver answered with an error ({_nvml_reason(exc)}).")
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    if not devices:
        return ProbeResult(available=False, driver_version=driver, message="The NVIDIA driver is loaded but sees no GPU.")
    links = [d.nvlink_active_links for d in devices if d.nvlink_active_links is not None]
    nvlink = (any(n > 0 for n in links)) if links else None
    names = sorted({d.name for d in devices})
    msg = f"{len(devices)} GPU(s): " + ", ".join(names)
    unknown = sorted({d.name for d in devices if d.catalog_name is None})
    if unknown:
        msg += (f". Not in the GPU catalog: {', '.join(unknown)} (planned from NVML estimates; pass "
                "--gpu memory_gib=..,bandwidth_gbs=..,bf16_tflops=.. to give datasheet figures)")
    return ProbeResult(available=True, driver_version=driver, devices=devices, nvlink=nvlink, message=msg)


def _nvml_reason(exc: Exception) -> str:
    return type(exc).__name__.replace("NVMLError_", "") + (f": {exc}" if str(exc) else "")


def _read_device(nv: ModuleType, index: int) -> GPUDevice:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    name = _text(nv.nvmlDeviceGetName(h))
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
        cc = f"{major}.{minor}"
    except Exception:
        cc = None
    entry = match_nvml_name(name)
    return GPUDevice(
        index=index,
        name=name,
        memory_total_gb=round(mem.total / 1024**3, 2),
        memory_free_gb=round(mem.free / 1024**3, 2),
        compute_capability=cc,
        catalog_name=entry.name if entry else None,
        nvlink_active_links=_nvlink_links(nv, h),
        memory_bus_width_bits=_optional(lambda: nv.nvmlDeviceGetMemoryBusWidth(h)),
        max_memory_clock_mhz=_optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, getattr(nv, "NVML_CLOCK_MEM", 2))),
        cuda_cores=_optional(lambda: nv.nvmlDeviceGetNumGpuCores(h)),
        max_sm_clock_mhz=_optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, getattr(nv, "NVML_CLOCK_SM", 1))),
    )


def _optional(read) -> int | None:
    """A positive integer NVML reading, or None where the driver or pynvml lacks the call."""
    try:
        value = int(read())
    except Exception:  # NVMLError_NotSupported, AttributeError on an older pynvml, ...
        return None
    return value if value > 0 else None


def _nvlink_links(nv: ModuleType, handle) -> int | None:
    """Active NVLink links, or None where the call is unsupported (PCIe cards answer NotSupported)."""
    max_links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
    active = 0
    try:
        for link in range(max_links):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link):
                    active += 1
            except Exception as exc:
                if link == 0:
                    raise exc
                break
    except Exception:
        return None
    return active


def _readings(d: GPUDevice):
    from specplug.catalog.gpuspec import NvmlReadings

    return NvmlReadings(name=d.name, memory_gib=d.memory_total_gb, bus_width_bits=d.memory_bus_width_bits,
                        max_mem_clock_mhz=d.max_memory_clock_mhz, cuda_cores=d.cuda_cores,
                        max_sm_clock_mhz=d.max_sm_clock_mhz, compute_capability=d.compute_capability)


def resolve_hardware(gpu: str | None = None, num_gpus: int | None = None, probed: ProbeResult | None = None) -> Hardware:
    """The hardware a plan is made for: a named GPU wins, then what the probe found, then the default."""
    if gpu:
        entry = get_gpu(gpu)
        return Hardware(
            gpu=entry.name,
            num_gpus=num_gpus or DEFAULT_NUM_GPUS,
            memory_gb=entry.memory_gb or 0.0,
            source="named",
        )
    result = probed if probed is not None else probe()
    if result.available and result.devices:
        first = result.devices[0]
        same = [d for d in result.devices if d.name == first.name]
        note = ""
        if len(same) != len(result.devices):
            note = f"Mixed GPU models; planning for the {len(same)} x {first.name} at index 0 and alike."
        gpu_name = first.catalog_name
        if gpu_name is None:
            from specplug.catalog.gpuspec import gpu_from_nvml

            estimated, how = gpu_from_nvml(_readings(first))
            gpu_name = estimated.name
            note = (note + " " if note else "") + how
        n = num_gpus or len(same)
        if n > len(same):
            note = (note + " " if note else "") + f"Planning for {n} GPUs although {len(same)} were found."
        return Hardware(
            gpu=gpu_name,
            num_gpus=n,
            memory_gb=first.memory_total_gb,
            source="probed",
            note=note,
        )
    entry = get_gpu(DEFAULT_GPU)
    return Hardware(
        gpu=entry.name,
        num_gpus=num_gpus or DEFAULT_NUM_GPUS,
        memory_gb=entry.memory_gb or 0.0,
        source="default",
        probe_message=result.message,
        note=(
            f"{result.message} Planning for the default deployment: {num_gpus or DEFAULT_NUM_GPUS} x {entry.name} "
            f"({entry.memory_gb:g} GiB). Change it with --gpu NAME --num-gpus N or 'hardware:' in specplug.yaml."
        ),
    )
