"""Drafter discovery for a target against the fake Hub's model search, the local cache and the catalog."""

from __future__ import annotations

from specplug.catalog.discovery import discover
from specplug.catalog.drafterconfig import read_drafter


def _by_id(found):
    return {f.drafter_id: f for f in found}


def test_the_hub_search_finds_heads_trained_for_the_target(fake_hub):
    found, notes = discover("Qwen/Qwen3-8B", online=True)
    hits = _by_id(found)
    assert hits["specforge/qwen3-8b-dflash"].method == "dflash"
    assert hits["specforge/qwen3-8b-dspark"].method == "dspark"
    assert "base_model tag names Qwen/Qwen3-8B" in hits["specforge/qwen3-8b-dflash"].where
    # A head for another target is never listed, and the target itself is not its own drafter.
    assert "specforge/qwen3-30B-A3B-eagle3.1" not in hits and "Qwen/Qwen3-8B" not in hits
    # The catalog's published drafters come first, each with its source.
    catalog = [f for f in found if f.where.startswith("catalog: ")]
    assert catalog and found.index(catalog[0]) == 0
    assert any(f.method == "eagle3" for f in catalog)
    assert notes == []
    assert any(path.startswith("/api/models") for _, path in fake_hub.requests)


def test_offline_lists_the_catalog_and_the_local_cache_and_says_the_hub_was_not_searched(fake_hub):
    read_drafter("specforge/llama3-8B-eagle3")  # now in the local Hugging Face cache
    found, notes = discover("meta-llama/Meta-Llama-3.1-8B", online=False)
    hits = _by_id(found)
    assert hits["specforge/llama3-8B-eagle3"].where.startswith("local cache: ")
    assert "model card base_model" in hits["specforge/llama3-8B-eagle3"].where
    assert any("not searched" in n for n in notes)
    before = len(fake_hub.requests)
    discover("Qwen/Qwen3-8B", online=False)
    assert len(fake_hub.requests) == before  # offline means no request at all


def test_an_unreachable_hub_is_a_note_not_a_failure(hub_env, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
    found, notes = discover("Qwen/Qwen3-8B", online=True)
    assert found and all(f.where.startswith("catalog: ") for f in found)
    assert notes and "not searched" in notes[0]
