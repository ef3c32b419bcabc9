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


# Planning with what discovery finds: a target the catalog does not hold plans with the heads published for it.
BASE = "meta-llama/Meta-Llama-3.1-8B"  # on the fake Hub, not a catalog row; specforge's EAGLE-3 head names it


def _api_requests(hub) -> list[str]:
    return [path for _, path in hub.requests if path.startswith("/api/models")]


def test_a_target_outside_the_catalog_plans_with_a_head_found_on_the_hub(fake_hub):
    from specplug.planning import recommend

    plan = recommend(model=BASE, gpu="h100")
    eagle3 = next(c for c in plan.candidates if c.method == "eagle3")
    assert eagle3.drafter == "specforge/llama3-8B-eagle3" and eagle3.ruled_out is None and eagle3.speedup
    assert (plan.speculation.method, plan.speculation.drafter) == ("eagle3", "specforge/llama3-8B-eagle3")
    why = next(r for r in plan.reasons if "not a catalog drafter" in r)
    assert f"base_model tag names {BASE}" in why and "LlamaForCausalLMEagle3" in why
    # Without discovery the same target has no head to plan with.
    plain = recommend(model=BASE, gpu="h100", discover=False)
    assert next(c for c in plain.candidates if c.method == "eagle3").ruled_out


def test_a_method_named_without_a_drafter_takes_the_found_head(fake_hub):
    from specplug.planning import recommend

    plan = recommend(model=BASE, gpu="h100", method="eagle3")
    assert plan.speculation.drafter == "specforge/llama3-8B-eagle3"


def test_offline_planning_finds_the_head_in_the_local_cache_without_a_request(fake_hub, monkeypatch):
    from huggingface_hub import constants

    from specplug.planning import recommend

    recommend(model=BASE, gpu="h100")  # the model's and the head's files are now in the local cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    before = len(fake_hub.requests)
    plan = recommend(model=BASE, gpu="h100", batch_size=2)
    assert plan.speculation.drafter == "specforge/llama3-8B-eagle3"
    assert any("found in local cache" in r for r in plan.reasons)
    assert len(fake_hub.requests) == before


def test_a_catalog_target_keeps_to_the_catalog_unless_asked(fake_hub):
    from specplug.planning import recommend

    curated = recommend(model="Qwen/Qwen3-8B", gpu="h100")
    assert _api_requests(fake_hub) == []  # the same plan on every machine, online or not
    assert not any("not a catalog drafter" in r for r in curated.reasons)
    wider = recommend(model="Qwen/Qwen3-8B", gpu="h100", discover=True)
    assert _api_requests(fake_hub)  # searched: specforge's DFlash and DSpark heads for Qwen3-8B are found ...
    # ... and rank after the catalog's own heads for the same methods, whose published figures they lack.
    assert [(c.method, c.drafter) for c in wider.candidates] == [(c.method, c.drafter) for c in curated.candidates]


def test_recommend_cli_plans_with_the_found_head_unless_told_not_to(fake_hub):
    import json

    from click.testing import CliRunner

    from specplug.cli import cli

    out = CliRunner().invoke(cli, ["recommend", "--model", BASE, "--gpu", "h100", "--output", "json"])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)
    assert plan["speculation"]["drafter"] == "specforge/llama3-8B-eagle3"
    off = CliRunner().invoke(cli, ["recommend", "--model", BASE, "--gpu", "h100", "--no-discover", "--output", "json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.stdout)["speculation"].get("drafter") != "specforge/llama3-8B-eagle3"


def test_the_plan_lists_every_drafter_found_with_where_and_what_became_of_it(fake_hub):
    from specplug.planning import recommend

    plan = recommend(model=BASE, gpu="h100")
    listed = next(r for r in plan.reasons if r.startswith("Drafters found outside the catalog"))
    assert "specforge/llama3-8B-eagle3 (eagle3; Hub: base_model tag names" in listed and "; chosen)" in listed


def _cached_head(cache, repo: str, trained_for: str) -> None:
    """A head in the local Hugging Face cache whose config.json names the checkpoint it was trained for."""
    import json

    snap = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "draft_vocab_size": 32000, "vocab_size": 128256, "base_model_name_or_path": trained_for}), encoding="utf-8")


def test_a_head_trained_for_a_sibling_checkpoint_is_planned_with_the_cross_target_discount(fake_hub, hub_env, monkeypatch):
    from huggingface_hub import constants

    from specplug.catalog.discovery import siblings
    from specplug.planning import recommend

    assert siblings("meta-llama/Meta-Llama-3.1-8B-Instruct", BASE) and siblings("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B-FP8")
    assert not siblings("meta-llama/Meta-Llama-3.1-70B", BASE) and not siblings("other/Meta-Llama-3.1-8B", BASE)
    recommend(model=BASE, gpu="h100", discover=False)  # the model's config.json, now cached
    _cached_head(hub_env, "someone/llama31-8b-instruct-eagle3", "meta-llama/Meta-Llama-3.1-8B-Instruct")
    _cached_head(hub_env, "someone/llama31-70b-eagle3", "meta-llama/Meta-Llama-3.1-70B")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    plan = recommend(model=BASE, gpu="h100", method="eagle3")
    assert plan.speculation.drafter == "someone/llama31-8b-instruct-eagle3"  # the 70B's head is no candidate
    assert any("was trained on meta-llama/Meta-Llama-3.1-8B-Instruct" in w and "discounts" in w for w in plan.warnings)
    listed = next(r for r in plan.reasons if r.startswith("Drafters found outside the catalog"))
    assert "trained for meta-llama/Meta-Llama-3.1-8B-Instruct" in listed and "70b" not in listed


def test_a_hub_target_drafts_with_catalog_models_of_its_vocabulary(fake_hub):
    from specplug.planning import recommend

    plan = recommend(model="meta-llama/Meta-Llama-3.1-70B", gpu="h100")
    drafts = [c for c in plan.candidates if c.method == "draft_model" and c.ruled_out is None]
    assert drafts and drafts[0].drafter == "meta-llama/Llama-3.2-1B-Instruct"  # 128,256 tokens, like the target
    # Its tokenizer files are not on this fake Hub: the plan says the check could not be made.
    assert plan.speculation.drafter == drafts[0].drafter
    assert any("tokenizer of target unknown" in w for w in plan.warnings)
