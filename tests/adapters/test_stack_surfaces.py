"""Late-2026 stack surfaces a user would notice: PARD parallel drafting, speculators-format heads served as the
model, the schedule under data parallelism, per-request acceptance, SGLang's adaptive steps, NGRAM's lookup flags
and DP-attention limits (TensorRT-LLM's draft_len_schedule is pinned in tests/stacks/test_trtllm_fields.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from specplug.errors import StackError
from specplug.rendering import render_plan

from .conftest import make_plan

PARD = "amd/PARD-Qwen3-0.6B"
SPECULATOR = "RedHatAI/Qwen3-8B-speculator.eagle3"
SCHEDULE = [{"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 4}, {"min_batch": 9, "num_speculative_tokens": 0}]


def spec_of(stack, version, **kw):
    return render_plan(make_plan(stack, version, **kw)).spec


def vllm_cfg(spec):
    return json.loads(spec.argv[spec.argv.index("--speculative-config") + 1])


def test_vllm_pard_drafter_drafts_in_parallel_where_the_version_has_it():
    new = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-1.7B", method="draft_model", drafter=PARD, k=8)
    assert vllm_cfg(new)["parallel_drafting"] is True
    old = spec_of("vllm", "0.20.0", model="Qwen/Qwen3-1.7B", method="draft_model", drafter=PARD, k=8)
    assert "parallel_drafting" not in vllm_cfg(old)
    assert any("runs autoregressively" in n for n in old.notes)
    plain = spec_of("vllm", "0.32.0", method="draft_model", drafter="meta-llama/Llama-3.2-1B-Instruct", k=4)
    assert "parallel_drafting" not in vllm_cfg(plain)  # only PARD-format drafters are trained for it


def test_vllm_serves_a_speculators_head_as_the_model_only_for_its_own_verifier():
    spec = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-8B", method="eagle3", drafter=SPECULATOR, k=3)
    assert spec.argv[:3] == ["vllm", "serve", SPECULATOR]
    assert spec.argv[spec.argv.index("--served-model-name") + 1] == "Qwen/Qwen3-8B"
    assert vllm_cfg(spec) == {"num_speculative_tokens": 3}
    # Another target (here a 14B) keeps the explicit form: vLLM would otherwise load the speculator's verifier.
    other = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-14B", method="eagle3", drafter=SPECULATOR, k=3)
    assert other.argv[2] == "Qwen/Qwen3-14B" and vllm_cfg(other)["model"] == SPECULATOR
    # Before overrides merge, k comes from the speculator's config, and the render says so.
    bare = spec_of("vllm", "0.20.0", model="Qwen/Qwen3-8B", method="eagle3", drafter=SPECULATOR, k=3)
    assert "--speculative-config" not in bare.argv and any("k=3 and the schedule are not rendered" in n for n in bare.notes)


def test_vllm_reads_a_local_speculator_folders_verifier(tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"speculators_config": {"verifier": {"name_or_path": "Qwen/Qwen3-8B"}}}))
    spec = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-8B", method="eagle3", drafter=str(head), k=2)
    assert spec.argv[2] == str(head)


def test_vllm_leaves_the_schedule_out_under_data_parallelism():
    spec = spec_of("vllm", "0.32.0", method="ngram", schedule=SCHEDULE, serve={"extra_args": ["--data-parallel-size", "2"]})
    assert "num_speculative_tokens_per_batch_size" not in vllm_cfg(spec)
    assert any("data parallelism" in n for n in spec.notes)
    single = spec_of("vllm", "0.32.0", method="ngram", schedule=SCHEDULE, serve={"extra_args": ["--data-parallel-size=1"]})
    assert "num_speculative_tokens_per_batch_size" in vllm_cfg(single)


def test_vllm_per_request_acceptance_only_where_the_flag_exists_and_once():
    assert spec_of("vllm", "0.32.0", method="ngram").argv[-2:] == ["--per-request-spec-decode-metrics", "summary"]
    assert "--per-request-spec-decode-metrics" not in spec_of("vllm", "0.20.0", method="ngram").argv
    assert "--per-request-spec-decode-metrics" not in spec_of("vllm", "0.32.0", method="none").argv
    user = spec_of("vllm", "0.32.0", method="ngram", serve={"extra_args": ["--per-request-spec-decode-metrics", "detailed"]})
    assert user.argv.count("--per-request-spec-decode-metrics") == 1


def test_sglang_schedule_becomes_adaptive_slots_that_never_exceed_the_plan():
    r = render_plan(make_plan("sglang", "0.5.23", model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3",
                              drafter="x/eagle3", k=4, schedule=SCHEDULE))
    cfg = json.loads(r.files["sglang-adaptive.json"])
    assert cfg == {"1": {"candidate_steps": [0, 4]}, "9": {"candidate_steps": [0]}}
    argv = r.spec.argv
    assert "--speculative-adaptive" in argv and argv[argv.index("--speculative-num-steps") + 1] == "4"


@pytest.mark.parametrize("kw,why", [
    (dict(version="0.5.2"), "no --speculative-adaptive"),
    (dict(tree={"steps": 3, "topk": 4, "num_draft_tokens": 8}), "need topk 1"),
    (dict(serve={"extra_args": ["--enable-dp-attention"]}), "turns adaptive steps off with --enable-dp-attention"),
])
def test_sglang_without_adaptive_steps_says_why(kw, why):
    version = kw.pop("version", "0.5.23")
    r = render_plan(make_plan("sglang", version, model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3",
                              drafter="x/eagle3", k=4, schedule=SCHEDULE, **kw))
    assert "--speculative-adaptive" not in r.spec.argv and not r.files
    assert any(why in n for n in r.spec.notes), r.spec.notes


def test_sglang_ngram_lookup_window_in_each_versions_own_flags():
    old = spec_of("sglang", "0.5.3", method="ngram", k=8, prompt_lookup_min=2, prompt_lookup_max=6)
    assert old.argv[old.argv.index("--speculative-ngram-max-match-window-size") + 1] == "6"
    assert "--speculative-ngram-max-trie-depth" not in old.argv
    # 0.5.23 has no match window: its trie paths hold the match and the drafts, raised past the default 18 where a
    # plan's longest match and its drafts need more, never lowered, and stated even at the default (pinned, so a
    # release that changes it cannot shorten the drafts).
    new = spec_of("sglang", "0.5.23", method="ngram", k=8, prompt_lookup_min=2, prompt_lookup_max=6)
    assert not any("match-window" in a for a in new.argv)
    assert new.argv[new.argv.index("--speculative-ngram-max-trie-depth") + 1] == "18"
    assert new.argv[new.argv.index("--speculative-num-draft-tokens") + 1] == "9"  # the root plus k=8 drafts
    deep = spec_of("sglang", "0.5.23", method="ngram", k=8, prompt_lookup_min=2, prompt_lookup_max=16)
    assert deep.argv[deep.argv.index("--speculative-ngram-max-trie-depth") + 1] == "24"


@pytest.mark.parametrize("method,drafter", [("ngram", None), ("draft_model", "x/small")])
def test_sglang_ngram_and_standalone_refuse_dp_attention(method, drafter):
    # A compatibility row (compat_sglang.yaml), cited with the SGLang source that refuses it.
    with pytest.raises(StackError, match="does not support dp attention"):
        spec_of("sglang", "0.5.23", method=method, drafter=drafter, serve={"extra_args": ["--enable-dp-attention"]})
    spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", serve={"extra_args": ["--enable-dp-attention"]})


DFLASH = "z-lab/Qwen3-8B-DFlash-b16"


def test_sglang_schedules_the_eagle_family_only_and_the_planner_is_told_per_method():
    from specplug import stackcaps

    caps = stackcaps.resolve("sglang", flag="0.5.23")
    assert {"eagle", "eagle3", "mtp"} <= caps.schedule_methods
    assert caps.schedules_for("eagle3") and not caps.schedules_for("ngram") and not caps.schedules_for("dflash")
    # Before adaptive steps SGLang has no per-batch control at all; vLLM's schedule is method-blind.
    assert not stackcaps.resolve("sglang", flag="0.5.3").schedule_methods
    vllm = stackcaps.resolve("vllm", flag="0.32.0")
    assert vllm.schedules_for("ngram") and vllm.schedules_for("dflash")


def test_sglang_dflash_drafts_a_block_and_keeps_one_pipeline_stage():
    spec = spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=7, schedule=SCHEDULE)
    argv = spec.argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    # The anchor plus k masks, as DFLASH's own block flag (SGLang copies it to the draft tokens; both set and
    # different is an error, so the alias is not rendered beside it).
    assert argv[argv.index("--speculative-dflash-block-size") + 1] == "8"
    assert "--speculative-num-draft-tokens" not in argv
    assert "--speculative-num-steps" not in argv and "--speculative-adaptive" not in argv
    assert any("DFLASH drafts k=7 at every batch size" in n for n in spec.notes)
    with pytest.raises(StackError, match="only supports pp_size == 1"):
        spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=7, pp=2, num_gpus=2)


@pytest.mark.parametrize("cfg,says", [({"block_size": 16}, 16), ({"block_size": 8, "dflash_config": {"block_size": 12}}, 12)])
def test_sglang_dflash_block_against_a_local_drafters_trained_block(tmp_path, cfg, says):
    # SGLang reads dflash_config.block_size before the top-level one (dflash_utils.parse_dflash_draft_config).
    head = tmp_path / "dflash"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], **cfg}))
    off = spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter=str(head), k=7)
    assert off.argv[off.argv.index("--speculative-dflash-block-size") + 1] == "8"  # the plan's k, as predicted
    assert any(f"block_size {says}" in n and f"k={says - 1} matches" in n for n in off.notes), off.notes
    same = spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter=str(head), k=says - 1)
    assert same.argv[same.argv.index("--speculative-dflash-block-size") + 1] == str(says)
    assert not any("block_size" in n for n in same.notes)


@pytest.mark.parametrize("version,entry", [
    ("0.5.23", ["sglang", "serve", "--model-type", "llm", "--model-path"]),
    (None, ["sglang", "serve", "--model-type", "llm", "--model-path"]),
    ("0.5.22", ["python3", "-m", "sglang.launch_server", "--model-path"]),
    ("0.5.2", ["python3", "-m", "sglang.launch_server", "--model-path"]),
])
def test_sglang_starts_through_sglang_serve_from_0_5_23(version, entry):
    # 0.5.23's launch_server.py warns that 'sglang serve' is the recommended entry point; --model-type llm skips
    # serve's Hub probe for a diffusion model_index.json.
    spec = spec_of("sglang", version, model="Qwen/Qwen3-8B", method="ngram", k=4)
    assert spec.argv[:len(entry)] == entry


@pytest.mark.parametrize("stack,version,needs", [
    ("vllm", "0.19.0", "vLLM 0.20.0"),
    ("sglang", "0.5.3", "SGLang 0.5.23"),
    ("trtllm", "1.3.0rc13", "TensorRT-LLM 1.3.0rc14"),
])
def test_dflash_before_a_stack_ships_it_is_refused_with_what_works(stack, version, needs):
    with pytest.raises(StackError) as err:
        spec_of(stack, version, model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=7)
    assert needs in str(err.value) and "Supported there: ngram" in str(err.value)


@pytest.mark.parametrize("method,stacks", [
    ("dflash", (("vllm", "0.32.0"), ("sglang", "0.5.23"), ("trtllm", "1.3.0rc14"), ("llamacpp", "b10576"))),
    ("dspark", (("vllm", "0.32.0"), ("sglang", "0.5.23"), ("trtllm", "1.3.0rc22"))),
])
def test_block_drafters_need_a_drafter_on_every_stack_that_runs_them(method, stacks):
    for stack, version in stacks:
        with pytest.raises(StackError, match="(?i)drafter"):
            spec_of(stack, version, model="Qwen/Qwen3-8B", method=method, k=7)


def test_tensorrt_llm_ships_dspark_from_1_3_0rc22_and_dflash_from_rc14():
    new = spec_of("trtllm", "1.3.0rc22", model="Qwen/Qwen3-8B", method="dspark", drafter="x/dspark", k=7)
    cfg = yaml.safe_load(new.files["trtllm-config.yaml"])["speculative_config"]
    assert cfg == {"decoding_type": "DSpark", "max_draft_len": 7, "speculative_model": "x/dspark"}
    with pytest.raises(StackError, match="'dspark' needs TensorRT-LLM 1.3.0rc22"):
        spec_of("trtllm", "1.3.0rc21", model="Qwen/Qwen3-8B", method="dspark", drafter="x/dspark", k=7)
    with pytest.raises(StackError, match="'dflash' needs TensorRT-LLM 1.3.0rc14"):
        spec_of("trtllm", "1.3.0rc13", model="Qwen/Qwen3-8B", method="dflash", drafter="x/dflash", k=7)


def test_vllm_per_request_acceptance_is_kept_from_the_last_streamed_chunk_and_read_as_vllms():
    import asyncio

    import httpx

    from specplug.bench.client import Endpoint, stream_request
    from specplug.bench.metrics import read_acceptance
    from specplug.bench.prompts import Prompt

    spec = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.375, "acceptance_histogram": [1, 0, 1, 0, 0],
            "num_spec_steps": 2, "num_accepted_draft_tokens": 3, "num_draft_tokens": 8, "num_spec_tokens": 4}
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "Hello"}}]},
        {"choices": [{"index": 0, "delta": {"content": " there"}}]},
        # vLLM 0.32's final usage chunk under --per-request-spec-decode-metrics (stream_options include_usage)
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5}, "metrics": {"speculative_decoding": spec}},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    async def run():
        transport = httpx.MockTransport(lambda req: httpx.Response(200, text=body))
        async with httpx.AsyncClient(transport=transport) as client:
            return await stream_request(client, Endpoint("http://127.0.0.1:8000", "m"), Prompt("p", "hi"), "chat", 16, 0.0)

    res = asyncio.run(run())
    assert res.ok and res.output_tokens == 5 and res.timings == spec
    acc = read_acceptance(None, None, timings=[res.timings], stack="vllm")
    assert acc is not None and acc.source == "vLLM per-request spec-decode metrics"
    assert acc.draft_tokens == 8 and acc.accepted_tokens == 3 and acc.acceptance_rate == pytest.approx(0.375)


@pytest.mark.parametrize("stack,version", [("trtllm", "1.3.0rc8"), ("llamacpp", "b10576"), ("tgi", "3.3.7"),
                                           ("vllm", "0.27.1"), ("sglang", "0.5.3")])
def test_block_verification_is_refused_where_a_stack_verifies_token_by_token(stack, version):
    method, drafter = ("ngram", None) if stack == "tgi" else ("draft_model", "x/small")
    with pytest.raises(StackError, match="verifies drafts token by token only"):
        spec_of(stack, version, method=method, drafter=drafter, verification="block")


def test_block_verification_renders_per_stack_and_sglang_refuses_it_for_ngram():
    v = spec_of("vllm", "0.32.0", method="ngram", k=4, verification="block")
    assert json.loads(v.argv[v.argv.index("--speculative-config") + 1])["rejection_sample_method"] == "block"
    s = spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", k=3, verification="block")
    assert "--speculative-use-block-verification" in s.argv
    with pytest.raises(StackError, match="verifies blocks for EAGLE"):
        spec_of("sglang", "0.5.23", method="ngram", k=4, verification="block")


@pytest.mark.parametrize("stack,version", [("trtllm", "1.3.0rc8"), ("llamacpp", "b10576"), ("vllm", "0.27.1")])
def test_sampled_drafts_are_refused_where_a_stack_scores_only_the_argmax(stack, version):
    with pytest.raises(StackError, match="scores drafts as the drafter's argmax only"):
        spec_of(stack, version, method="draft_model", drafter="x/small", draft_sampling="probabilistic")


def test_sampled_drafts_render_per_stack_and_sglang_holds_them_to_eagle_chains():
    v = spec_of("vllm", "0.32.0", method="eagle3", drafter="x/eagle3", k=3, draft_sampling="probabilistic")
    assert vllm_cfg(v)["draft_sample_method"] == "probabilistic"
    s = spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", k=3, draft_sampling="probabilistic")
    assert "--speculative-use-rejection-sampling" in s.argv
    with pytest.raises(StackError, match="EAGLE/EAGLE3 heads only, not DFLASH"):
        spec_of("sglang", "0.5.23", method="dflash", drafter=DFLASH, k=15, draft_sampling="probabilistic")
    with pytest.raises(StackError, match="needs a chain"):
        spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", k=3, draft_sampling="probabilistic",
                tree={"steps": 3, "topk": 4, "num_draft_tokens": 8})


def test_the_acceptance_gate_renders_in_each_tensorrt_llm_generations_names_and_units():
    def gate(version):
        spec = spec_of("trtllm", version, method="eagle3", drafter="x/eagle3", k=4, acceptance_floor=0.3)
        cfg = yaml.safe_load(spec.files["trtllm-config.yaml"])["speculative_config"]
        return {k: v for k, v in cfg.items() if k.startswith("acceptance")}

    # Before PR #12905: accepted draft tokens per step (0.3 of k=4) over completed requests.
    assert gate("1.3.0rc20") == {"acceptance_window": 100, "acceptance_length_threshold": 1.2}
    # From 1.3.0rc21: the acceptance rate itself, over speculating iterations.
    assert gate("1.3.0rc21") == {"acceptance_rate_window_size": 1000, "acceptance_rate_threshold": 0.3}
    for stack, version in (("trtllm", "1.1.0"), ("vllm", "0.32.0"), ("sglang", "0.5.23")):
        with pytest.raises(StackError, match="has no acceptance gate"):
            spec_of(stack, version, method="eagle3", drafter="x/eagle3", k=4, acceptance_floor=0.3)


def test_sglang_refuses_an_eagle_tree_under_the_rejection_sampling_block_verification_turns_on():
    tree = {"steps": 4, "topk": 4, "num_draft_tokens": 8}
    with pytest.raises(StackError, match="which verification turns on for EAGLE3\\) needs a chain"):
        spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", k=4, verification="block", tree=tree)
    chain = spec_of("sglang", "0.5.23", method="eagle3", drafter="x/eagle3", k=4, verification="block")
    assert "--speculative-use-block-verification" in chain.argv
    # DFlash drafts are sampled with their distributions already: no chain rule there.
    spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=15, verification="block")


@pytest.mark.parametrize(("args", "why"), [
    (["--enforce-eager"], "eager mode"),
    (["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'], "cudagraph_mode PIECEWISE"),
    (["-cc.cudagraph_mode=NONE"], "cudagraph_mode NONE"),
    (["--compilation-config.cudagraph_mode", "piecewise"], "cudagraph_mode PIECEWISE"),
])
def test_vllm_leaves_adaptive_verification_off_without_full_cuda_graphs_and_says_why(args, why):
    # VllmConfig refuses enable_adaptive_verification without full CUDA graphs (config/vllm.py, 0.32.0).
    spec = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-8B", method="dspark", drafter="x/dspark", k=7,
                   serve={"extra_args": args})
    assert "enable_adaptive_verification" not in vllm_cfg(spec)
    assert any(why in n and "Adaptive verification is off" in n for n in spec.notes)


@pytest.mark.parametrize("mode", ["FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"])
def test_vllm_keeps_adaptive_verification_with_full_cuda_graphs(mode):
    spec = spec_of("vllm", "0.32.0", model="Qwen/Qwen3-8B", method="dspark", drafter="x/dspark", k=7,
                   serve={"extra_args": ["-cc", json.dumps({"cudagraph_mode": mode})]})
    assert vllm_cfg(spec)["enable_adaptive_verification"] is True


def test_an_old_acceptance_gate_warns_when_the_schedule_lowers_k():
    sched = [{"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 4}, {"min_batch": 9, "num_speculative_tokens": 2}]
    old = spec_of("trtllm", "1.3.0rc20", method="eagle3", drafter="x/eagle3", k=4, acceptance_floor=0.3, schedule=sched)
    assert any("averages whole requests" in n for n in old.notes)
    new = spec_of("trtllm", "1.3.0rc21", method="eagle3", drafter="x/eagle3", k=4, acceptance_floor=0.3, schedule=sched)
    assert not any("averages whole requests" in n for n in new.notes)


# TensorRT-LLM's late-2026 field lists, as each release's API reference renders llm_args.py (trtllm_fields.yaml).
@pytest.mark.parametrize("version,has,lacks", [
    ("1.3.0rc22", [], ["moe_backend", "spec_dec_variant", "moe_tactic"]),
    ("1.3.0rc29", ["moe_backend"], ["spec_dec_variant", "moe_tactic"]),
    ("1.4.0rc1", ["moe_backend", "spec_dec_variant"], ["moe_tactic"]),
    ("1.4.0rc4", ["moe_backend", "spec_dec_variant", "moe_tactic"], []),
])
def test_tensorrt_llm_base_fields_of_1_3_0rc29_and_1_4_0(version, has, lacks):
    from specplug.adapters.trtllm import generation

    base = generation(version)["base"]
    assert all(f in base for f in has) and not any(f in base for f in lacks), base


def test_tensorrt_llm_1_4_0_per_method_fields():
    from specplug.adapters.trtllm import check_against_fields, generation

    assert "attention_backend" not in generation("1.3.0rc22")["fields"]["DFlash"]
    assert "attention_backend" in generation("1.3.0rc27")["fields"]["DFlash"]
    assert {"draft_lm_head_dtype", "draft_moe_dtype"} <= set(generation("1.4.0rc4")["fields"]["MTP"])
    assert "draft_lm_head_dtype" not in generation("1.4.0rc1")["fields"]["MTP"]
    eagle3 = generation("1.4.0rc4")["fields"]["Eagle3"]
    assert "eagle3_model_arch" in eagle3 and "eagle3_one_model" not in eagle3 and "num_eagle_layers" not in eagle3
    assert generation("1.4.0rc4")["decoding_types"]["AUTO"] == ["pytorch"]
    # A field the release lacks is refused; the same field where the release has it passes.
    spec = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "x/e3", "spec_dec_variant": 3}
    with pytest.raises(StackError, match="spec_dec_variant"):
        check_against_fields(spec, "pytorch", "1.3.0rc29")
    check_against_fields(spec, "pytorch", "1.4.0rc1")
    with pytest.raises(StackError, match="eagle3_one_model"):
        check_against_fields({**spec, "eagle3_one_model": True}, "pytorch", "1.4.0rc4")


@pytest.mark.parametrize("version", ["1.3.0rc29", "1.4.0rc1", "1.4.0rc4"])
@pytest.mark.parametrize("method,drafter", [("eagle3", "x/eagle3"), ("mtp", None), ("dflash", "x/dflash"), ("dspark", "x/dspark"),
                                            ("ngram", None), ("draft_model", "x/small"), ("suffix", None)])
def test_tensorrt_llm_1_3_0rc29_and_1_4_0_renders_pass_their_field_lists(version, method, drafter):
    from specplug.adapters.trtllm import check_against_fields

    spec = spec_of("trtllm", version, model="Qwen/Qwen3-8B", method=method, drafter=drafter, k=3,
                   tree={"steps": 3, "topk": 2, "num_draft_tokens": 6} if method == "eagle3" else None)
    cfg = yaml.safe_load(spec.files["trtllm-config.yaml"])["speculative_config"]
    check_against_fields(cfg, "pytorch", version)
    assert spec.argv[spec.argv.index("--backend") + 1] == "pytorch"


# SGLang gives a drafter the target's --quantization unless --speculative-draft-model-quantization says otherwise
# (0.5.23 serving_hook.py); specplug costs the drafter in its own checkpoint's format, so it keeps it so.
L8, E3 = "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DRAFT_QUANT = "--speculative-draft-model-quantization"


def test_sglang_keeps_the_drafter_in_its_own_format_when_the_target_is_quantized_at_load():
    spec = spec_of("sglang", "0.5.23", model=L8, method="eagle3", drafter=E3, k=3, serve={"quantization": "fp8"})
    argv = spec.argv
    assert argv[argv.index("--quantization") + 1] == "fp8" and argv[argv.index(DRAFT_QUANT) + 1] == "unquant"
    assert any(n.startswith(f"{DRAFT_QUANT} unquant:") and "own checkpoint's format" in n for n in spec.notes)
    for method, drafter in (("draft_model", "meta-llama/Llama-3.2-1B-Instruct"), ("eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B")):
        assert DRAFT_QUANT in spec_of("sglang", "0.5.23", model=L8, method=method, drafter=drafter, k=3,
                                      serve={"quantization": "fp8"}).argv, method


def test_sglang_renders_no_draft_quantization_without_a_reason():
    # No drafter checkpoint (NGRAM), the target's own MTP layers (quantized like the target), no --quantization.
    assert DRAFT_QUANT not in spec_of("sglang", "0.5.23", model=L8, method="ngram", k=3, serve={"quantization": "fp8"}).argv
    mtp = spec_of("sglang", "0.5.23", model="deepseek-ai/DeepSeek-V3", method="mtp", k=1, tp=8, weight_format="bf16",
                  serve={"quantization": "fp8"}).argv
    assert "--quantization" in mtp and DRAFT_QUANT not in mtp
    assert DRAFT_QUANT not in spec_of("sglang", "0.5.23", model=L8, method="eagle3", drafter=E3, k=3).argv
    # The user's own value stands.
    own = spec_of("sglang", "0.5.23", model=L8, method="eagle3", drafter=E3, k=3,
                  serve={"quantization": "fp8", "extra_args": [DRAFT_QUANT, "fp8"]}).argv
    assert own.count(DRAFT_QUANT) == 1 and own[own.index(DRAFT_QUANT) + 1] == "fp8"
    # Before the release it is confirmed in: not rendered, and the note says what SGLang may do instead.
    old = spec_of("sglang", "0.5.3", model=L8, method="eagle3", drafter=E3, k=3, serve={"quantization": "fp8"})
    assert DRAFT_QUANT not in old.argv and any("may quantize the drafter with the target" in n for n in old.notes)
    # The draft attention backend is SGLang's own choice (resolved per platform): never rendered.
    assert "--speculative-draft-attention-backend" not in " ".join(
        spec_of("sglang", "0.5.23", model="Qwen/Qwen3-8B", method="dflash", drafter="z-lab/Qwen3-8B-DFlash-b16", k=15,
                serve={"quantization": "fp8"}).argv)
