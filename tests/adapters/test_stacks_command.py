"""specplug stacks: lists adapters, installed versions, techniques, and reports broken plugins."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from specplug.stacks import registry


@pytest.fixture
def broken_plugin(monkeypatch):
    import importlib.metadata as md

    orig = md.entry_points

    def fake(**kw):
        eps = list(orig(**kw))
        if kw.get("group") == registry.ENTRY_POINT_GROUP:
            eps.append(EntryPoint(name="mystack", value="specplug_no_such_module:adapter", group=registry.ENTRY_POINT_GROUP))
        return eps

    monkeypatch.setattr(md, "entry_points", fake)
    registry._load.cache_clear()
    yield
    registry._load.cache_clear()


def test_stacks_json_lists_adapters_and_techniques(run_cli):
    res = run_cli("stacks", "--output", "json")
    assert res.exit_code == 0, res.stderr
    rows = {r["name"]: r for r in res.json()["stacks"]}
    assert {"vllm", "sglang", "trtllm", "llamacpp", "tgi"} <= set(rows)
    assert "eagle3" in rows["vllm"]["supported"] and "lookahead" in rows["vllm"]["unsupported"]
    assert rows["tgi"]["supported"] == ["ngram", "medusa", "mlp_speculator"]
    assert rows["sglang"]["acceptance_metrics"].startswith("sglang gauges")


def test_broken_plugin_is_reported_not_fatal(run_cli, broken_plugin):
    res = run_cli("stacks", "--output", "json")
    assert res.exit_code == 0, res.stderr
    broken = {b["name"]: b for b in res.json()["broken_plugins"]}
    assert "ModuleNotFoundError" in broken["mystack"]["error"]
    assert "vllm" in {r["name"] for r in res.json()["stacks"]}
    table = run_cli("stacks")
    assert "Broken plugins" in table.stdout and "mystack" in table.stdout


def test_stacks_for_one_stack_lists_what_each_release_renders(run_cli):
    res = run_cli("stacks", "trtllm", "--output", "json")
    assert res.exit_code == 0, res.stderr
    (row,) = res.json()["stacks"]
    by_version = {v["version"]: v for v in row["versions"]}
    assert "schedule" not in by_version["1.0.0"]["controls"] and "cutoff" in by_version["1.0.0"]["controls"]
    assert "schedule" in by_version["1.2.0"]["controls"] and "1.3.0rc8" in by_version
    assert "pard" in by_version["1.3.0rc7"]["controls"] and "pard" not in by_version["1.2.0"]["controls"]
    assert "medusa" in by_version["1.3.0rc8"]["methods"] and "medusa" not in by_version["1.3.0rc21"]["methods"]
    table = run_cli("stacks", "vllm")
    assert table.exit_code == 0 and "0.27.1" in table.stdout and "parallel_drafting" in table.stdout


def test_stacks_for_an_unknown_stack_names_the_known_ones(run_cli):
    res = run_cli("stacks", "nosuch")
    assert res.exit_code != 0
    assert "Unknown stack 'nosuch'" in res.stderr and "vllm" in res.stderr and "Traceback" not in res.stderr
