"""`specplug models show/search` as a user types them: drafters with format, vocabularies, stacks and acceptance."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from specplug.cli import cli


def _invoke(*args: str):
    # COLUMNS keeps rich from folding drafter ids across lines, so plain substring checks work.
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)


def test_show_llama_3_1_70b_lists_its_eagle_heads_and_stacks_column() -> None:
    r = _invoke("models", "show", "llama-3.1-70b")
    assert r.exit_code == 0, r.output
    assert "known drafters" in r.output and "stacks (first version)" in r.output
    assert "lmzheng/sglang-EAGLE-LLaMA3.1-Instruct-70B" in r.output
    assert "yuhuili/EAGLE-LLaMA3.1-Instruct-70B" in r.output
    assert "eagle1" in r.output
    # The EAGLE ids are placeholders (not confirmed to exist), and the output says so.
    assert "not confirmed to exist" in r.output
    # Draft models shown loading in vLLM keep their stacks.
    assert "amd/PARD-Llama-3.2-1B" in r.output and "vllm, trtllm" in r.output


def test_show_json_carries_parsed_stacks_and_acceptance() -> None:
    r = _invoke("models", "show", "llama-3.1-8b", "--output", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    heads = {d["drafter_hf_id"]: d for d in data["known_drafters"]}
    e3 = heads["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
    assert e3["method"] == "eagle3" and e3["format"] == "eagle3"
    assert e3["draft_vocab_size"] == 32000 and e3["vocab_size"] == 128256
    assert e3["stacks"]["vllm"] == "0.8.5" and e3["stacks"]["trtllm"] == "1.0"
    assert "vllm>=0.8.5" in e3["stacks_text"]
    sb = heads["lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"]
    assert sb["acceptance_length"] == 2.93 and "MT-Bench" in sb["acceptance_basis"]
    assert heads["RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"]["format"] == "speculators"


def test_show_table_prints_versions_and_published_acceptance() -> None:
    r = _invoke("models", "show", "llama-3.1-8b")
    assert r.exit_code == 0, r.output
    assert "vllm>=0.8.5" in r.output and "llamacpp>=b9606" in r.output
    assert "published acceptance" in r.output and "2.93" in r.output
    assert "32000 of 128256" in r.output


def test_show_yaml_includes_placeholder_drafters() -> None:
    r = _invoke("models", "show", "llama-3.1-70b", "--output", "yaml")
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(r.output)
    confirmed = {d["drafter_hf_id"]: d["confirmed"] for d in data["known_drafters"]}
    assert confirmed["yuhuili/EAGLE-LLaMA3.1-Instruct-70B"] == "no"
    assert confirmed["meta-llama/Llama-3.2-1B-Instruct"] == "yes"


def test_search_still_searches_the_model_catalog() -> None:
    r = _invoke("models", "search", "llama", "3.1", "--output", "json")
    assert r.exit_code == 0, r.output
    assert "meta-llama/Llama-3.1-70B-Instruct" in {m["hf_id"] for m in json.loads(r.output)}


def test_drafters_offline_lists_the_catalogs_with_where_each_was_found() -> None:
    r = CliRunner().invoke(cli, ["models", "drafters", "qwen3-8b", "--offline", "--output", "json"],
                           env={"COLUMNS": "250", "HF_HUB_OFFLINE": "1"}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["target"] == "Qwen/Qwen3-8B"
    ids = {d["drafter_id"]: d for d in data["drafters"]}
    assert ids["amd/PARD-Qwen3-0.6B"]["where"].startswith("catalog: ")
    assert all(d["where"] for d in data["drafters"])
    assert any("not searched" in n for n in data["notes"])


def test_show_a_catalog_draft_model() -> None:
    r = _invoke("models", "show", "amd/PARD-Llama-3.2-1B")
    assert r.exit_code == 0, r.output
    assert "128256" in r.output and "Unknown model" not in r.output
