"""Models read from config.json through a fake Hugging Face Hub (tests/catalog/hubfake.py) serving verbatim
config copies (hub_configs/SOURCES.md): every fact derived with its basis, the catalog's curated figures agreeing
with what config.json implies, revisions and the cache honoured, and the commands a user runs working on Hub ids."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specplug.catalog import get_model, models
from specplug.catalog.derive import derive
from specplug.catalog.models import Model
from tests.catalog.hubfake import CONFIGS, FakeHub, Repo, fixture_repos

FIXTURES = fixture_repos()
# Architectures specplug refuses rather than guesses at (test_hub_errors checks the message).
UNREADABLE = {"deepseek-ai/DeepSeek-V4-Flash", "moonshotai/Kimi-K3", "stepfun-ai/Step-3.7-Flash"}
READABLE = sorted(set(FIXTURES) - UNREADABLE)
CATALOG = {m.hf_id.lower(): m for m in models()}
# Base releases whose catalog row is the instruct release of the same architecture (same config.json sizes).
TWINS = {
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Meta-Llama-3.1-70B": "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Meta-Llama-3.1-405B": "meta-llama/Llama-3.1-405B-Instruct",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-v0.1": "mistralai/Mixtral-8x22B-Instruct-v0.1",
}
ROWS = {r: CATALOG[TWINS.get(r, r).lower()] for r in READABLE if TWINS.get(r, r).lower() in CATALOG}
IN_CATALOG = sorted(ROWS)


def _config(repo: str) -> dict:
    return json.loads(FIXTURES[repo].files["config.json"])


def _derived(repo: str) -> Model:
    facts = derive(_config(repo)).values
    return Model(hf_id=repo, **{k: v for k, v in facts.items() if k in Model.__dataclass_fields__})


def test_the_fixtures_cover_the_families_of_2026() -> None:
    assert len(READABLE) >= 25
    assert len([r for r in READABLE if r.lower() not in CATALOG]) >= 5
    types = {derive(_config(r)).values["family"] for r in READABLE}
    assert types >= {
        "llama", "llama4_text", "mistral", "ministral3", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen3_vl_text",
        "qwen3_5_text", "qwen3_5_moe_text", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa", "gpt_oss",
        "gemma2", "gemma3_text", "gemma4_text", "phi3", "olmo3", "exaone4", "minimax_m2", "minimax_m3", "nemotron_h",
        "nemotron-nas", "mimo", "mimo_v2_flash",
    }
    sources = (CONFIGS / "SOURCES.md").read_text(encoding="utf-8")
    for folder in (p.name for p in CONFIGS.iterdir() if p.is_dir()):
        assert f"`{folder}`" in sources, f"{folder} has no source in hub_configs/SOURCES.md"


@pytest.mark.parametrize("repo", READABLE)
def test_every_fixture_gives_every_fact_with_its_basis(repo: str) -> None:
    f = derive(_config(repo), "config.json at revision abc1234")
    v = f.values
    for name in ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size",
                 "max_position_embeddings", "params_b", "kv_values_per_token", "architecture", "family"):
        assert v.get(name), name
        assert f.basis[name].startswith(("config.json at revision abc1234", "computed from config.json at revision abc1234"))
    assert v["kv_values_per_token"] > 0 and 0.01 < v["params_b"] < 2000
    if v.get("moe_num_experts"):
        assert 0 < v["active_params_b"] < v["params_b"] and v["moe_experts_per_token"] <= v["moe_num_experts"]
    if v.get("attention_layers") is not None:  # hybrids: only the attention layers hold a growing KV cache
        assert v["attention_layers"] < v["num_layers"]


# Where config.json says more than the catalog row: each entry is what config.json implies, worked out by hand.
KV_VALUES_NOT_IN_THE_CATALOG = {
    # hybrids: the row counts every layer, config.json's layer_types says which keep a KV cache
    "qwen/qwen3.5-27b": 16 * 4 * 256 * 2,
    "qwen/qwen3.5-35b-a3b": 10 * 2 * 256 * 2,
    "qwen/qwen3.5-122b-a10b": 12 * 2 * 256 * 2,
    "qwen/qwen3.5-397b-a17b": 15 * 2 * 256 * 2,
    "nvidia/nvidia-nemotron-3-nano-30b-a3b-bf16": 6 * 2 * 128 * 2,  # 6 '*' blocks in hybrid_override_pattern
    # 9 full layers with 4 KV heads, 39 sliding ones with 8 (swa_num_key_value_heads); K 192-d, V 128-d
    "xiaomimimo/mimo-v2-flash": 9 * 4 * (192 + 128) + 39 * 8 * (192 + 128),
    # DeciLM: 49 blocks keep attention, with 64 / n_heads_in_group KV heads each (block_configs)
    "nvidia/llama-3_3-nemotron-super-49b-v1": None,
}
@pytest.mark.parametrize("repo", IN_CATALOG)
def test_catalog_rows_agree_with_their_config(repo: str) -> None:
    row, derived = ROWS[repo], _derived(repo)
    assert derived.params_b == pytest.approx(row.params_b, rel=0.03), (derived.params_b, row.params_b)
    if repo.lower() in KV_VALUES_NOT_IN_THE_CATALOG:
        values = KV_VALUES_NOT_IN_THE_CATALOG[repo.lower()]
        if values is None:
            blocks = _config(repo)["block_configs"]
            values = sum(2 * (64 // b["attention"]["n_heads_in_group"]) * 128 for b in blocks
                         if not b["attention"].get("no_op") and not b["attention"].get("replace_with_linear"))
        assert derived.kv_bytes_per_token() == values * 2.0
    else:
        assert derived.kv_bytes_per_token() == row.kv_bytes_per_token()


def test_parameter_error_over_the_catalog_is_small() -> None:
    errors = [abs(_derived(r).params_b / ROWS[r].params_b - 1) for r in IN_CATALOG]
    assert len(errors) >= 30
    assert max(errors) < 0.03 and sorted(errors)[len(errors) // 2] < 0.001


def test_sliding_and_hybrid_layers_shrink_the_cache_a_long_sequence_keeps() -> None:
    gemma = _derived("google/gemma-4-26B-A4B")
    assert (gemma.sliding_window, gemma.sliding_layers, gemma.layer_kinds) == (1024, 25, {"sliding_attention": 25, "full_attention": 5})
    # 25 sliding layers hold 102400 of the 112640 KV values a token adds; past the window they keep 1024 tokens.
    assert gemma.kv_share(131072) == pytest.approx(1 - 102400 / 112640 * (1 - 1024 / 131072))
    qwen = _derived("Qwen/Qwen3.5-27B")
    assert qwen.attention_layers == 16 and qwen.kv_share(131072) == 1.0
    nemotron = _derived("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert nemotron.layer_kinds == {"mamba": 40, "none": 40, "full_attention": 8} and nemotron.attention_layers == 8


@pytest.mark.parametrize(("repo", "fmt"), [
    ("Qwen/Qwen3-32B-FP8", "fp8"), ("openai/gpt-oss-20b", "mxfp4"), ("moonshotai/Kimi-K2.5", "int4-gptq"),
    ("nvidia/Qwen3-235B-A22B-NVFP4", "nvfp4"), ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8"),
    ("nvidia/Qwen3.6-27B-NVFP4", "nvfp4"), ("nvidia/Gemma-4-31B-IT-NVFP4", "nvfp4"),
    ("mistralai/Devstral-Small-2-24B-Instruct", "fp8"), ("google/gemma-3-4b-it", "bf16"),
])
def test_weight_format_from_quantization_config_or_modelopt(fake_hub, repo: str, fmt: str) -> None:
    # Catalog rows would answer from the catalog: @main reads config.json (and hf_quant_config.json) instead.
    m = get_model(f"{repo}@main")
    assert m.weight_format == fmt
    assert "quant" in m.basis["weight_format"] or "dtype" in m.basis["weight_format"]


def test_show_prints_each_derived_fact_with_its_basis(fake_hub, run_cli) -> None:
    r = run_cli("models", "show", "google/gemma-4-26B-A4B")
    assert r.exit_code == 0, r.stderr
    assert "text_config.num_key_value_heads" in r.stdout and "text_config.top_k_experts" in r.stdout
    assert "sliding_attention 25, full_attention 5" in r.stdout and "config.json at revision" in r.stdout
    data = run_cli("models", "show", "google/gemma-4-26B-A4B", "--output", "json").json()
    commit = FIXTURES["google/gemma-4-26B-A4B"].commit
    assert data["revision"] == commit and data["confirmed"] == "hub"
    assert data["basis"]["num_kv_heads"] == f"config.json at revision {commit[:10]} text_config.num_key_value_heads"
    assert data["basis"]["params_b"].startswith(f"computed from config.json at revision {commit[:10]}")


def test_a_catalog_row_read_at_a_revision_keeps_its_curated_facts(fake_hub) -> None:
    m = get_model("Qwen/Qwen3.5-27B", revision="main")
    row = CATALOG["qwen/qwen3.5-27b"]
    assert m.params_b == row.params_b and m.basis["params_b"].startswith("catalog: ")
    assert m.tokenizer_family == row.tokenizer_family and m.aliases == row.aliases
    # What the row lacks comes from config.json: 16 of 64 layers keep a KV cache.
    assert m.attention_layers == 16 and m.basis["attention_layers"].startswith("config.json at revision")
    assert m.kv_bytes_per_token() == 16 * 4 * 256 * 2 * 2.0
    assert get_model("Qwen/Qwen3.5-27B") == row  # without a revision: the catalog, and no Hub request


def test_revisions_branches_tags_and_commits(fake_hub) -> None:
    repo = fake_hub.repos["zai-org/GLM-5.2"]
    repo.refs["v1"] = repo.commit
    assert get_model("zai-org/GLM-5.2@v1").revision == repo.commit
    assert get_model(f"zai-org/GLM-5.2@{repo.commit}").revision == repo.commit
    assert get_model("zai-org/GLM-5.2").revision == repo.commit


def test_the_cache_serves_pinned_commits_and_offline_runs(fake_hub, monkeypatch) -> None:
    from specplug.catalog import hubmodel

    repo = "MiniMaxAI/MiniMax-M3"
    commit = FIXTURES[repo].commit
    first = get_model(repo)
    assert any("/resolve/main/config.json" in p for _, p in fake_hub.requests)
    hubmodel._READ.clear()
    fake_hub.requests.clear()
    pinned = get_model(f"{repo}@{commit}")  # a cached commit needs no request, even online
    assert (pinned.revision, pinned.params_b, pinned.kv_values_per_token) == (commit, first.params_b, first.kv_values_per_token)
    assert fake_hub.requests == []
    hubmodel._READ.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert get_model(repo).params_b == first.params_b  # offline: refs/main in the cache says which commit
    assert fake_hub.requests == []


def test_the_safetensors_index_gives_an_exact_count_for_unquantized_weights(hub_env, monkeypatch) -> None:
    # A synthetic index (not a real release's) beside a real config: total_parameters wins over the estimate.
    cfg = FIXTURES["Qwen/Qwen3.5-9B"].files["config.json"]
    index = json.dumps({"metadata": {"total_parameters": 9_653_104_368}, "weight_map": {}}).encode()
    repos = {"example/unquantized": Repo({"config.json": cfg, "model.safetensors.index.json": index}, "1" * 40),
             "example/fp8": Repo({"config.json": FIXTURES["Qwen/Qwen3-32B-FP8"].files["config.json"],
                                  "model.safetensors.index.json": index}, "2" * 40)}
    with FakeHub(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        m = get_model("example/unquantized")
        assert m.params_b == 9.6531 and m.basis["params_b"].startswith("model.safetensors.index.json at revision")
        # Quantized tensors are stored packed: their element count is no parameter count.
        assert get_model("example/fp8").params_b == pytest.approx(32.76, rel=0.01)


def test_a_local_folder_is_read_the_same_way(tmp_path) -> None:
    folder = tmp_path / "Qwen3.6-27B-NVFP4"
    shutil.copytree(CONFIGS / "nvidia--Qwen3.6-27B-NVFP4", folder)
    local = get_model(str(folder))
    derived = _derived("nvidia/Qwen3.6-27B-NVFP4")
    assert (local.params_b, local.kv_values_per_token, local.attention_layers) == (
        derived.params_b, derived.kv_values_per_token, derived.attention_layers)
    assert local.weight_format == "nvfp4" and local.confirmed == "local"
    assert local.basis["num_layers"] == f"config.json in {folder.resolve()} text_config.num_hidden_layers"


def test_importing_the_cli_loads_no_huggingface_hub() -> None:
    code = "import sys, specplug.cli, specplug.catalog; print('huggingface_hub' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------- the commands users run


def _gpus(run_cli, repo: str) -> int:
    r = run_cli("recommend", "--model", repo, "--gpu", "h100", "--output", "json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert data["model"]["hf_id"] == (CATALOG[repo.lower()].hf_id if repo.lower() in CATALOG else repo)
    return data["hardware"]["num_gpus"]


@pytest.mark.parametrize("repo", READABLE)
def test_show_recommend_estimate_plan_and_render_work_on_each_fixture(fake_hub, run_cli, repo: str) -> None:
    shown = run_cli("models", "show", repo, "--output", "json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["basis"]["num_layers"]
    n = str(_gpus(run_cli, repo))
    est = run_cli("estimate", "--model", repo, "--gpu", "h100", "--num-gpus", n, "--method", "ngram", "--output", "json")
    assert est.exit_code == 0, est.stderr
    assert run_cli("init", "--model", repo, "--stack", "vllm", "--gpu", "h100", "--num-gpus", n).exit_code == 0
    planned = run_cli("plan")
    assert planned.exit_code == 0, planned.stderr
    rendered = run_cli("render", "vllm", "-o", "deploy")
    assert rendered.exit_code == 0, rendered.stderr
    hf_id = CATALOG[repo.lower()].hf_id if repo.lower() in CATALOG else repo
    assert hf_id in Path("deploy", "launch-vllm.sh").read_text(encoding="utf-8")


# TensorRT-LLM takes it as the LLM API's revision field, in the extra options YAML the script writes.
@pytest.mark.parametrize(("stack", "flag"), [("vllm", "--revision"), ("sglang", "--revision"),
                                             ("trtllm", "revision:"), ("tgi", "--revision")])
def test_a_model_named_at_a_revision_is_served_at_that_commit(fake_hub, run_cli, stack: str, flag: str) -> None:
    repo = fake_hub.repos["Qwen/Qwen3-8B"]
    repo.refs["v1"] = repo.commit
    planned = run_cli("recommend", "--model", "Qwen/Qwen3-8B@v1", "--gpu", "h100", "--stack", stack,
                      "--output", "json")
    assert planned.exit_code == 0, planned.stderr
    assert planned.json()["model"]["revision"] == repo.commit  # the commit its facts were read at, not the tag

    def rendered(model: str, folder: str) -> str:
        r = run_cli("render", stack, "--model", model, "--gpu", "h100", "--method", "ngram", "-o", folder)
        assert r.exit_code == 0, r.stderr
        return "".join(p.read_text(encoding="utf-8") for p in sorted(Path(folder).iterdir()))

    assert f"{flag} {repo.commit}" in rendered("Qwen/Qwen3-8B@v1", "pinned")
    assert flag not in rendered("Qwen/Qwen3-8B", "plain")  # no revision named: the default branch


def test_a_stack_that_cannot_load_a_revision_refuses_it_with_the_way_round(fake_hub, run_cli) -> None:
    repo = fake_hub.repos["Qwen/Qwen3-8B"]
    r = run_cli("render", "llamacpp", "--model", f"Qwen/Qwen3-8B@{repo.commit}", "--gpu", "h100", "--method", "ngram")
    assert r.exit_code != 0 and "Traceback" not in r.stderr
    assert "cannot be told a Hub revision" in r.stderr and f"--revision {repo.commit} --local-dir DIR" in r.stderr


def test_a_lock_of_a_model_at_a_revision_keeps_it_and_older_readers_refuse_it(fake_hub, run_cli) -> None:
    import yaml

    from specplug.lock import LOCK_NAME, parse_lock

    repo = fake_hub.repos["Qwen/Qwen3-8B"]
    assert run_cli("init", "--model", "Qwen/Qwen3-8B@main", "--stack", "vllm", "--gpu", "h100").exit_code == 0
    assert run_cli("plan").exit_code == 0
    text = Path(LOCK_NAME).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    # lock_version 2: a specplug that reads only version 1 would drop the revision and serve the default branch.
    assert data["lock_version"] == 2 and data["summary"]["model"] == f"Qwen/Qwen3-8B@{repo.commit}"
    assert parse_lock(text).plan.model.revision == repo.commit
    r = run_cli("render", "vllm", "-o", "deploy")
    assert r.exit_code == 0, r.stderr
    assert f"--revision {repo.commit}" in Path("deploy", "launch-vllm.sh").read_text(encoding="utf-8")


def _speculative_config(run_cli, model: str, method: str, drafter: str) -> dict:
    r = run_cli("render", "vllm", "--model", model, "--gpu", "h100", "--method", method, "--drafter", drafter,
                "--output", "json")
    assert r.exit_code == 0, r.stderr
    argv = r.json()["argv"]
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_a_drafter_named_at_a_revision_is_planned_and_drafted_from_it(fake_hub, run_cli) -> None:
    cfg = _speculative_config(run_cli, "llama-3.1-8b", "eagle3", "specforge/llama3-8B-eagle3@main")
    assert cfg["model"] == "specforge/llama3-8B-eagle3" and cfg["revision"] == "main"  # a head: as named
    # A draft model named at a revision is drafted from the commit its config.json was read at.
    cfg = _speculative_config(run_cli, "qwen3-8b", "draft_model", "Qwen/Qwen3-0.6B@main")
    assert cfg["model"] == "Qwen/Qwen3-0.6B" and cfg["revision"] == fake_hub.repos["Qwen/Qwen3-0.6B"].commit
    refused = run_cli("render", "llamacpp", "--model", "qwen3-8b", "--gpu", "h100", "--method", "draft_model",
                      "--drafter", "Qwen/Qwen3-0.6B@main")
    assert refused.exit_code != 0 and "cannot be told a drafter's revision" in refused.stderr
