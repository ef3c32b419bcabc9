"""The probe against substituted pynvml modules: no driver, 0/1/8 GPUs, mixed and unknown models."""

from __future__ import annotations

import types

import pytest

from specplug.errors import CatalogError
from specplug.probe import probe, resolve_hardware


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's own spelling
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


def fake_nvml(devices: list[tuple[str, int]], *, driver="550.54.15", init_error=None, nvlink=0, cc=(9, 0),
              shape: dict[str, int] | None = None):
    """A stand-in for the pynvml module: devices are (name, total GiB); ``shape`` holds what NVML reads about
    memory bus width and clocks and CUDA cores (left out: the calls raise NotSupported, as on some drivers)."""
    nv = types.SimpleNamespace(NVML_NVLINK_MAX_LINKS=18, shutdowns=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2)

    def reading(key):
        def read(*_):
            if not shape or key not in shape:
                raise NVMLError_NotSupported()
            return shape[key]
        return read

    def nvmlInit():
        if init_error:
            raise init_error

    def nvmlShutdown():
        nv.shutdowns += 1

    def mem(i):
        total = devices[i][1] * 1024**3
        return types.SimpleNamespace(total=total, free=total - 1024**3, used=1024**3)

    def link_state(h, link):
        if nvlink is None:
            raise NVMLError_NotSupported()
        if link >= nvlink:
            raise NVMLError_NotSupported()
        return 1

    nv.nvmlInit = nvmlInit
    nv.nvmlShutdown = nvmlShutdown
    nv.nvmlSystemGetDriverVersion = lambda: driver.encode()
    nv.nvmlDeviceGetCount = lambda: len(devices)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: devices[h][0].encode()
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: cc
    nv.nvmlDeviceGetNvLinkState = link_state
    nv.nvmlDeviceGetMemoryBusWidth = reading("bus")
    nv.nvmlDeviceGetNumGpuCores = reading("cores")
    nv.nvmlDeviceGetMaxClockInfo = lambda h, clock: reading("sm_mhz" if clock == 1 else "mem_mhz")()
    return nv


def test_no_driver_is_reported_plainly():
    r = probe(fake_nvml([], init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))
    assert not r.available and r.devices == []
    assert "No NVIDIA driver" in r.message


def test_zero_gpus():
    r = probe(fake_nvml([]))
    assert not r.available and "sees no GPU" in r.message


def test_one_h100():
    nv = fake_nvml([("NVIDIA H100 80GB HBM3", 80)], nvlink=None)
    r = probe(nv)
    assert r.available and r.count == 1 and r.driver_version == "550.54.15"
    d = r.devices[0]
    assert d.catalog_name == "H100-SXM" and d.memory_total_gb == 80 and d.compute_capability == "9.0"
    assert r.nvlink is None  # unsupported: unknown, not False
    assert nv.shutdowns == 1


def test_eight_gpus_with_nvlink_plan_for_all_of_them():
    r = probe(fake_nvml([("NVIDIA H100 80GB HBM3", 80)] * 8, nvlink=18))
    assert r.count == 8 and r.nvlink is True
    hw = resolve_hardware(probed=r)
    assert hw.gpu == "H100-SXM" and hw.num_gpus == 8 and hw.source == "probed"


def test_mixed_models_plan_for_the_first_kind_and_say_so():
    r = probe(fake_nvml([("NVIDIA A100-SXM4-80GB", 80), ("NVIDIA A100-SXM4-80GB", 80), ("NVIDIA L4", 24)]))
    hw = resolve_hardware(probed=r)
    assert hw.gpu == "A100-80GB-SXM" and hw.num_gpus == 2 and "Mixed" in hw.note


def test_unknown_gpu_name_is_kept_and_explained():
    r = probe(fake_nvml([("NVIDIA Quantum 9000", 100)]))
    assert r.available and r.devices[0].catalog_name is None
    assert "Not in the GPU catalog" in r.message
    with pytest.raises(CatalogError, match="--gpu"):
        resolve_hardware(probed=r)


def test_driver_error_during_reads_is_not_fatal():
    nv = fake_nvml([("NVIDIA L4", 24)])

    def boom():
        raise NVMLError("Unknown Error")

    nv.nvmlDeviceGetCount = boom
    r = probe(nv)
    assert not r.available and "error" in r.message


def test_named_gpu_wins_over_probe():
    r = probe(fake_nvml([("NVIDIA L4", 24)]))
    hw = resolve_hardware("h200", 2, probed=r)
    assert (hw.gpu, hw.num_gpus, hw.source, hw.memory_gb) == ("H200", 2, "named", 141)


def test_no_gpu_plans_for_a_stated_default():
    r = probe(fake_nvml([], init_error=NVMLError_LibraryNotFound()))
    hw = resolve_hardware(probed=r)
    assert hw.source == "default" and hw.gpu == "H100-SXM"
    assert "--gpu" in hw.note


def test_real_machine_probe_never_raises():
    r = probe()
    assert isinstance(r.available, bool) and r.message


# An H100 SXM as NVML describes it (5120-bit HBM3 at 2619 MHz, 16896 CUDA cores at 1830 MHz), under a name the
# catalog does not know: the estimate must land on the catalog's own H100 figures.
H100_SHAPE = {"bus": 5120, "mem_mhz": 2619, "cores": 16896, "sm_mhz": 1830}


def test_unknown_gpu_is_planned_from_what_nvml_reads():
    from specplug.catalog import get_gpu

    r = probe(fake_nvml([("NVIDIA H100 Renamed", 80)], shape=H100_SHAPE))
    assert r.devices[0].memory_bus_width_bits == 5120 and r.devices[0].cuda_cores == 16896
    hw = resolve_hardware(probed=r)
    g = hw.catalog_entry()
    h100 = get_gpu("H100-SXM")
    assert g.memory_bw_gbs == pytest.approx(h100.memory_bw_gbs, rel=0.01)
    assert g.bf16_tflops == pytest.approx(h100.bf16_tflops, rel=0.01)
    assert (hw.source, hw.memory_gb, g.memory_gb) == ("probed", 80, 80)
    assert "not in the GPU catalog" in hw.note and "NVML" in hw.note and "--gpu" in hw.note
    assert get_gpu(hw.gpu) == g  # the plan's GPU name resolves again wherever it is passed on


def test_geforce_estimate_uses_the_fp32_accumulate_rate():
    # RTX 4090's shape (384-bit at 10501 MHz, 16384 cores at 2520 MHz): the catalog row says 1008 GB/s, 165.2.
    shape = {"bus": 384, "mem_mhz": 10501, "cores": 16384, "sm_mhz": 2520}
    hw = resolve_hardware(probed=probe(fake_nvml([("NVIDIA GeForce RTX 4090 Ti Prototype", 24)], cc=(8, 9), shape=shape)))
    g = hw.catalog_entry()
    assert g.memory_bw_gbs == pytest.approx(1008, rel=0.01) and g.bf16_tflops == pytest.approx(165.2, rel=0.01)


def test_unknown_gpu_with_an_unknown_architecture_says_to_describe_it():
    r = probe(fake_nvml([("NVIDIA Future 1", 200)], cc=(13, 0), shape=H100_SHAPE))
    with pytest.raises(CatalogError, match="memory_gib=") as exc:
        resolve_hardware(probed=r)
    assert "13.0" in str(exc.value)


def test_a_gpu_spec_plans_any_accelerator():
    hw = resolve_hardware("memory_gib=32,bandwidth_gbs=608,bf16_tflops=183.5", 2)
    g = hw.catalog_entry()
    assert (hw.source, hw.num_gpus, hw.memory_gb) == ("named", 2, 32)
    assert (g.memory_bw_gbs, g.tensor_tflops(), g.nvlink) == (608, 183.5, False)
