import pytest

from specplug.catalog import get_gpu, gpus, match_nvml_name
from specplug.errors import CatalogError

REQUIRED = ["A10G", "L4", "L40S", "A100-40GB-SXM", "A100-40GB-PCIe", "A100-80GB-SXM", "A100-80GB-PCIe",
            "H100-SXM", "H100-PCIe", "H100-NVL", "H200", "GH200", "B200", "RTX-3090", "RTX-4090", "RTX-5090",
            "RTX-6000-Ada", "MI300X"]


def test_catalog_has_the_required_gpus_with_memory_and_sources():
    names = {g.name for g in gpus()}
    assert set(REQUIRED) <= names
    for name in REQUIRED:
        g = get_gpu(name)
        assert g.memory_gb and g.memory_gb > 0
        assert g.source, f"{name} has no source note"


@pytest.mark.parametrize("alias", ["h100", "H100", "h100-80gb", "h100-sxm", "H100 SXM", "h100_sxm"])
def test_h100_aliases_resolve(alias):
    assert get_gpu(alias).name == "H100-SXM"


def test_amd_is_planning_only():
    assert get_gpu("mi300x").planning_only
    assert not get_gpu("h100").planning_only


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(CatalogError) as exc:
        get_gpu("h1000")
    assert "h100" in str(exc.value)


@pytest.mark.parametrize(
    "nvml,expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ],
)
def test_nvml_names_map_to_the_right_entry(nvml, expected):
    assert match_nvml_name(nvml).name == expected


def test_unknown_nvml_name_maps_to_nothing():
    assert match_nvml_name("NVIDIA Quantum Accelerator 9000") is None
