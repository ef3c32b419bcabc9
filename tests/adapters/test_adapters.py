"""Adapter rules a user would trip over: each is an error that says what would work, or a visible note."""

from __future__ import annotations

import json

import pytest

from specplug.errors import StackError
from specplug.rendering import render_plan
from specplug.stacks.registry import get_adapter

from .conftest import make_plan


def spec_of(stack, version, **kw):
    return render_plan(make_plan(stack, version, **kw)).spec


def vllm_cfg(spec):
    return json.loads(spec.argv[spec.argv.index("--speculative-config") + 1])


def test_vllm_method_is_always_explicit_and_mtp_name_follows_the_version():
    for method, drafter in (("eagle3", "x/eagle3-head"), ("draft_model", "x/small"), ("ngram", None)):
        assert vllm_cfg(spec_of("vllm", "0.32.0", method=method, drafter=drafter))["method"] == method
    assert vllm_cfg(spec_of("vllm", "0.32.0", model="Qwen/Qwen3-Next-80B-A3B-Instruct", method="mtp", k=2))["method"] == "mtp"
    assert vllm_cfg(spec_of("vllm", "0.10.1", model="Qwen/Qwen3-Next-80B-A3B-Instruct", method="mtp", k=2))["method"] == "qwen3_next_mtp"
    with pytest.raises(StackError, match="names MTP per model family"):
        spec_of("vllm", "0.10.1", model="some/unknown-mtp-model", method="mtp", k=1)


def test_vllm_draft_tp_must_be_one_or_the_target_tp():
    assert vllm_cfg(spec_of("vllm", "0.32.0", method="eagle3", drafter="h", tp=4, draft_tensor_parallel_size=4))[
        "draft_tensor_parallel_size"] == 4
    with pytest.raises(StackError, match="1 or the target's tensor parallel size \\(4\\)"):
        spec_of("vllm", "0.32.0", method="eagle3", drafter="h", tp=4, draft_tensor_parallel_size=2)


def test_vllm_prompt_lookup_min_above_max_is_refused():
    with pytest.raises(StackError, match="prompt_lookup_min \\(5\\) is larger than prompt_lookup_max \\(2\\)"):
        spec_of("vllm", "0.32.0", method="ngram", prompt_lookup_min=5, prompt_lookup_max=2)


def test_vllm_draft_model_gap_between_v0_removal_and_v1_support():
    with pytest.raises(StackError, match="0.5.0 to before 0.10.0, 0.12.0 and newer"):
        spec_of("vllm", "0.11.0", method="draft_model", drafter="x/small")
    assert vllm_cfg(spec_of("vllm", "0.12.0", method="draft_model", drafter="x/small"))["model"] == "x/small"


def test_vllm_schedule_only_where_supported_else_a_note():
    sched = [{"min_batch": 1, "max_batch": 4, "num_speculative_tokens": 4}, {"min_batch": 5, "num_speculative_tokens": 1}]
    new = spec_of("vllm", "0.32.0", method="ngram", schedule=sched)
    assert vllm_cfg(new)["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 1 << 20, 1]]
    old = spec_of("vllm", "0.20.0", method="ngram", schedule=sched)
    assert "num_speculative_tokens_per_batch_size" not in vllm_cfg(old)
    assert any("per-batch-size" in n for n in old.notes)
    with pytest.raises(StackError, match="above the plan's k=4"):
        spec_of("vllm", "0.32.0", method="ngram", schedule=[{"min_batch": 1, "num_speculative_tokens": 6}])


def test_sglang_names_knobs_and_running_requests():
    def args(spec):
        a = spec.argv
        return {a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("--speculative") or a[i] in (
            "--max-running-requests", "--attention-backend")}

    assert args(spec_of("sglang", "0.5.2", method="ngram"))["--speculative-algorithm"] == "LOOKAHEAD"
    assert args(spec_of("sglang", "0.5.3", method="ngram"))["--speculative-algorithm"] == "NGRAM"
    chain = args(spec_of("sglang", "0.5.23", method="eagle3", drafter="h", k=3))
    assert (chain["--speculative-num-steps"], chain["--speculative-eagle-topk"], chain["--speculative-num-draft-tokens"]) == ("3", "1", "4")
    assert chain["--max-running-requests"] == "48" and "--attention-backend" not in chain
    forced = spec_of("sglang", "0.5.23", method="eagle", drafter="h", tree={"steps": 3, "topk": 1, "num_draft_tokens": 9})
    assert args(forced)["--speculative-num-draft-tokens"] == "4" and any("steps+1" in n for n in forced.notes)
    tree = args(spec_of("sglang", "0.5.23", method="eagle", drafter="h", tree={"steps": 3, "topk": 4, "num_draft_tokens": 8}))
    assert tree["--attention-backend"] == "flashinfer"
    with pytest.raises(StackError, match="needs a drafter"):
        spec_of("sglang", "0.5.23", method="eagle3")
    with pytest.raises(StackError, match="Supported there: "):
        spec_of("sglang", "0.5.1", method="ngram")


def test_sglang_and_trtllm_refuse_api_keys_they_could_only_take_in_argv():
    for stack, v in (("sglang", "0.5.23"), ("trtllm", "1.2.0")):
        with pytest.raises(StackError, match="API key"):
            spec_of(stack, v, method="ngram", serve={"api_key_env": "MY_KEY"})


def test_trtllm_backend_follows_the_decoding_type_and_renders_match_recorded_fields():
    from specplug.adapters.trtllm import check_against_fields

    medusa = spec_of("trtllm", "1.2.0", method="medusa", drafter="m")
    assert medusa.argv[medusa.argv.index("--backend") + 1] == "tensorrt"
    ngram = spec_of("trtllm", "1.2.0", method="ngram")
    assert ngram.argv[ngram.argv.index("--backend") + 1] == "pytorch"
    with pytest.raises(StackError, match="has no field\\(s\\) speculative_model_dir"):
        check_against_fields({"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "x"}, "pytorch", "0.18.0")
    with pytest.raises(StackError, match="does not run on the 'pytorch' backend"):
        check_against_fields({"decoding_type": "Medusa", "max_draft_len": 3}, "pytorch", "1.2.0")


def test_llamacpp_generations_and_support():
    old = spec_of("llamacpp", "b5000", model="t.gguf", method="draft_model", drafter="d.gguf", k=8).argv
    assert "--draft-max" in old and "-md" in old and "--spec-type" not in old
    new = spec_of("llamacpp", "b10576", model="t.gguf", method="draft_model", drafter="d.gguf", k=8).argv
    assert new[new.index("--spec-type") + 1] == "draft-simple" and "--spec-draft-n-max" in new
    assert new[new.index("--spec-draft-ngl") + 1] == "999"
    with pytest.raises(StackError, match="Supported there: draft_model"):
        spec_of("llamacpp", "b5000", model="t.gguf", method="ngram")


def _at_revision(plan, revision="0e9e39f249a16976918f6564b8830bc894c89659"):
    return plan.model_copy(update={"model": plan.model.model_copy(update={"revision": revision})})


def test_tgi_cannot_load_the_target_at_a_revision_when_the_medusa_heads_are_its_model_id():
    medusa = _at_revision(make_plan("tgi", "3.3.7", model="m/base", method="medusa", drafter="m/base-medusa", k=3))
    problems = get_adapter("tgi").problems(medusa, "3.3.7")
    assert any("cannot load m/base at revision" in p.message for p in problems)
    ngram = render_plan(_at_revision(make_plan("tgi", "3.3.7", model="m/base", method="ngram", k=3))).spec.argv
    assert ngram[ngram.index("--revision") + 1] == "0e9e39f249a16976918f6564b8830bc894c89659"


@pytest.mark.parametrize(("stack", "version", "model"), [("llamacpp", "b10576", "m/base"), ("embedded", None, "m/base")])
def test_a_stack_without_a_revision_flag_refuses_a_plan_at_a_revision(stack, version, model):
    problems = get_adapter(stack).problems(_at_revision(make_plan(stack, version, model=model)), version)
    found = [p for p in problems if "cannot be told a Hub revision" in p.message]
    assert found and found[0].key == "model" and "--local-dir DIR" in found[0].hint


def test_mtp_weights_from_the_target_load_at_the_targets_revision():
    rev = "0e9e39f249a16976918f6564b8830bc894c89659"
    mtp = make_plan("vllm", "0.32.0", model="deepseek-ai/DeepSeek-V3", method="mtp", k=1, num_gpus=8, tp=8)
    spec = render_plan(_at_revision(mtp, rev)).spec
    assert vllm_cfg(spec)["revision"] == rev and spec.argv[spec.argv.index("--revision") + 1] == rev
    assert "revision" not in vllm_cfg(render_plan(mtp).spec)
    ngram = render_plan(_at_revision(make_plan("vllm", "0.32.0", method="ngram", k=4), rev)).spec
    assert "revision" not in vllm_cfg(ngram)  # no draft weights to load
    # A head from another repository keeps its own default branch.
    eagle = _at_revision(make_plan("vllm", "0.32.0", model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3",
                                   drafter="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", k=3), rev)
    assert "revision" not in vllm_cfg(render_plan(eagle).spec)


def test_a_speculator_is_not_served_as_the_model_when_the_target_is_pinned():
    rev = "0e9e39f249a16976918f6564b8830bc894c89659"
    plan = make_plan("vllm", "0.32.0", model="Qwen/Qwen3-8B", method="eagle3",
                     drafter="RedHatAI/Qwen3-8B-speculator.eagle3", k=3)
    assert render_plan(plan).spec.argv[2] == "RedHatAI/Qwen3-8B-speculator.eagle3"
    pinned = render_plan(_at_revision(plan, rev)).spec
    assert pinned.argv[2] == "Qwen/Qwen3-8B" and vllm_cfg(pinned)["model"] == "RedHatAI/Qwen3-8B-speculator.eagle3"


@pytest.mark.parametrize("version", ["0.17.0", "1.0.0", "1.2.0", "1.3.0rc20"])
def test_tensorrt_llm_takes_the_revision_in_its_llm_api_options(version):
    import yaml
    from specplug.adapters.trtllm import llm_args_problems

    rev = "0e9e39f249a16976918f6564b8830bc894c89659"
    spec = render_plan(_at_revision(make_plan("trtllm", version, method="ngram", k=3), rev)).spec
    args = yaml.safe_load(spec.files["trtllm-config.yaml"])
    assert args["revision"] == rev and llm_args_problems(args, version) == [] and "--revision" not in spec.argv


HEAD_AT_V2 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B@v2"


def test_a_drafter_named_at_a_revision_is_drafted_from_that_revision():
    def plan(stack, version):
        return make_plan(stack, version, model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3", drafter=HEAD_AT_V2, k=3)

    cfg = vllm_cfg(render_plan(plan("vllm", "0.32.0")).spec)
    assert cfg["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" and cfg["revision"] == "v2"
    argv = render_plan(plan("sglang", "0.5.23")).spec.argv
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert argv[argv.index("--speculative-draft-model-revision") + 1] == "v2"


@pytest.mark.parametrize(("stack", "version"), [("trtllm", "1.2.0"), ("tgi", "3.3.7")])
def test_a_stack_that_cannot_pin_a_drafter_refuses_one_named_at_a_revision(stack, version):
    method, drafter = ("eagle3", HEAD_AT_V2) if stack == "trtllm" else ("medusa", "m/base-medusa@v2")
    plan = make_plan(stack, version, model="meta-llama/Llama-3.1-8B-Instruct", method=method, drafter=drafter, k=3)
    found = [p for p in get_adapter(stack).problems(plan, version) if p.key == "speculation.drafter"]
    assert found and "named at revision v2" in found[0].message and "--revision v2" in found[0].hint


def test_tgi_speculate_and_medusa_checkpoint_as_model_id():
    a = spec_of("tgi", "3.3.7", model="m/base", method="medusa", drafter="m/base-medusa", k=3).argv
    assert a[a.index("--model-id") + 1] == "m/base-medusa" and a[a.index("--speculate") + 1] == "3"
    assert spec_of("tgi", "3.3.7", model="m/base", method="none").argv.count("--speculate") == 0


def test_every_adapter_binds_loopback_by_default():
    for stack, v, kw in (("vllm", "0.32.0", {}), ("sglang", "0.5.23", {}), ("trtllm", "1.2.0", {}),
                         ("llamacpp", "b10576", {"model": "t.gguf"}), ("tgi", "3.3.7", {})):
        argv = spec_of(stack, v, method="ngram", **kw).argv
        assert "127.0.0.1" in argv and "0.0.0.0" not in argv


def test_methods_report_reasons_per_version():
    v = get_adapter("vllm")
    assert v.methods("0.32.0")["lookahead"].startswith("vLLM has no lookahead")
    assert v.methods("0.32.0")["eagle3"] is None
    assert "0.8.5" in v.methods("0.8.0")["eagle3"]


SCHEDULE = [{"min_batch": 1, "max_batch": 4, "num_speculative_tokens": 4}, {"min_batch": 5, "num_speculative_tokens": 1}]
DRAFTERS = {"eagle": "x/eagle-head", "eagle3": "x/eagle3-head", "draft_model": "x/small", "medusa": "x/medusa",
            "mlp_speculator": "x/mlp"}


def test_trtllm_unpinned_schedule_note_names_no_none_version():
    notes = spec_of("trtllm", None, method="ngram", schedule=SCHEDULE).notes
    assert "TensorRT-LLM (newest) has no draft_len_schedule for NGram; k=4 is used at every batch size." in notes


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm", "llamacpp", "tgi"])
def test_unpinned_version_never_prints_none(stack):
    # Every method the newest version runs, with and without a per-batch schedule: no note says "<stack> None".
    model = "t.gguf" if stack == "llamacpp" else "meta-llama/Llama-3.1-70B-Instruct"
    for method, why in get_adapter(stack).methods(None).items():
        if why is not None:
            continue
        for extra in ({}, {"schedule": SCHEDULE}):
            try:
                spec = spec_of(stack, None, model=model, method=method, drafter=DRAFTERS.get(method), **extra)
            except StackError as exc:
                assert " None " not in str(exc), str(exc)
                continue
            for note in spec.notes:
                assert " None " not in note and not note.endswith(" None"), (method, note)
