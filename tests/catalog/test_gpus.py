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


def test_every_gpu_row_has_memory_bandwidth_and_tensor_throughput():
    """A row missing a figure makes `estimate` refuse that GPU; fill it (with its source) rather than leave it."""
    missing = [
        (g.name, field)
        for g in gpus()
        for field, value in (("memory", g.memory_gb), ("bandwidth", g.memory_bw_gbs), ("16-bit tensor", g.tensor_tflops()))
        if not value
    ]
    assert missing == []
    assert all(g.source and g.confirmed in ("yes", "partial") for g in gpus())


def test_every_gpus_csv_row_has_the_headers_field_count():
    import csv
    from importlib import resources

    text = resources.files("specplug.catalog").joinpath("data", "gpus.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines()))
    bad = [(r[0], len(r)) for r in rows[1:] if len(r) != len(rows[0])]
    assert bad == []


@pytest.mark.parametrize(
    "alias,name",
    [("rtx6000-ada", "RTX-6000-Ada"), ("gh200", "GH200"), ("rtx-pro-4500", "RTX-PRO-4500"), ("r9700", "Radeon-AI-PRO-R9700"),
     ("mi350x", "MI350X"), ("arc-pro-b70", "Arc-Pro-B70"), ("strix-halo", "Ryzen-AI-Max"), ("l40", "L40")],
)
def test_2026_gpus_resolve(alias, name):
    assert get_gpu(alias).name == name


def test_a_spec_string_is_a_gpu():
    g = get_gpu("memory_gib=80, bandwidth_gbs=3350, bf16_tflops=989, nvlink=yes, name=My H100")
    assert (g.memory_gb, g.memory_bw_gbs, g.tensor_tflops(), g.nvlink) == (80, 3350, 989, True)
    assert get_gpu(g.name) == g  # its name is its canonical spec, so it resolves again


@pytest.mark.parametrize(
    "spec,says",
    [
        ("memory_gib=80,bandwidth_gbs=3350", "lacks bf16_tflops"),
        ("memory_gib=80,bandwidth_gbs=fast,bf16_tflops=989", "bandwidth_gbs must be a number"),
        ("memory_gib=80,bandwidth_gbs=3350,bf16_tflops=989,hbm=3", "Unknown key 'hbm'"),
        ("memory_gib=81920,bandwidth_gbs=3350,bf16_tflops=989", "outside"),
        ("memory_gib=80,memory_gib=40,bandwidth_gbs=3350,bf16_tflops=989", "twice"),
        ("memory_gib=80,bandwidth_gbs=3350,bf16_tflops=989,nvlink=maybe", "nvlink must be yes or no"),
    ],
)
def test_bad_gpu_specs_say_what_is_wrong_and_how_to_write_one(spec, says):
    with pytest.raises(CatalogError) as exc:
        get_gpu(spec)
    assert says in str(exc.value) and "memory_gib=80,bandwidth_gbs=3350,bf16_tflops=989" in str(exc.value)


def test_unknown_gpu_name_points_at_the_spec_form():
    with pytest.raises(CatalogError, match="memory_gib="):
        get_gpu("tpu-v9")
