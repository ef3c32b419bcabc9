"""Every committed example passes 'specplug check' (lock and renders current) and its manifests validate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specplug.check import check
from specplug.lock import build_lock, dump_lock, plan_fresh

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples").iterdir() if (p / "specplug.yaml").is_file())


def test_at_least_the_five_setups_are_there():
    names = {p.name for p in EXAMPLES}
    assert len(names) >= 5
    stacks = {yaml.safe_load((p / "specplug.yaml").read_text())["stack"]["name"] for p in EXAMPLES}
    assert stacks >= {"vllm", "sglang", "trtllm", "llamacpp", "embedded"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_check(example):
    report = check(example / "specplug.yaml", [example / "deploy"])
    assert report.ok, "\n".join(p.text() for p in report.problems)
    assert yaml.safe_load((example / "specplug.yaml").read_text())["stack"].get("version"), "examples pin stack.version"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_lock_is_what_plan_writes_today(example):
    from specplug.config import load_config

    cfg_path = example / "specplug.yaml"
    cfg = load_config(cfg_path)
    text = dump_lock(build_lock(cfg, cfg_path, plan_fresh(cfg, cfg_path)))
    assert text == (example / "specplug.lock.yaml").read_text(), "run scripts/regen_examples.sh"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_k8s_manifests_validate(example):
    kv = pytest.importorskip("kubernetes_validate", reason="test dependency kubernetes-validate")
    docs = sorted((example / "deploy").glob("k8s/*.yaml"))
    assert docs
    for f in docs:
        kv.validate(yaml.safe_load(f.read_text()), "1.30.0", strict=True)
