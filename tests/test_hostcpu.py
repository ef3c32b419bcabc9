"""This machine's CPU as a planning device, from /proc text given in place of the files."""

from __future__ import annotations

from specplug.catalog import get_gpu
from specplug.hostcpu import host_cpu


def test_an_arm_server_reads_its_vector_unit_and_its_memory() -> None:
    cpu = host_cpu("Features\t: fp asimd sve\nBogoMIPS\t: 50.00\n", "MemTotal:  134217728 kB\n", cores=64)
    gpu = get_gpu(cpu.spec)  # the plan names it by this spec, which the GPU reader takes back
    assert (gpu.memory_gb, gpu.memory_bw_gbs) == (128.0, 100.0)  # 64 x 7.5 GB/s capped at 200, halved
    assert gpu.bf16_tflops == 64 * 2.5 * 8 / 1000  # no clock read: 2.5 GHz stated, asimd's 8 FLOPs a cycle
    assert "asimd" in cpu.note and "2.50 GHz" in cpu.note


def test_unreadable_files_give_stated_defaults_not_a_failure() -> None:
    cpu = host_cpu("", "", cores=1)
    gpu = get_gpu(cpu.spec)
    assert gpu.memory_gb == 16.0 and gpu.memory_bw_gbs == 3.75 and gpu.bf16_tflops == 0.01
    assert "no vector extension read" in cpu.note
