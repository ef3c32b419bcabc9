"""TensorRT-LLM publishes no installable wheel here: every render is checked against the field list per
version recorded from tensorrt_llm/llmapi/llm_args.py (adapters/data/trtllm_fields.yaml, commits cited there),
and draft_len_schedule against the rules and lookup of the version's semantics."""

from __future__ import annotations

import shlex
from bisect import bisect_left, bisect_right

import pytest
import yaml
from specplug.adapters.trtllm import check_against_fields, field_lists, generation

from specplug.errors import StackError
from specplug.rendering import render_plan
from specplug.stacks.registry import get_adapter
from tests.adapters.conftest import make_plan

DRAFTERS = {"draft_model": "x/small", "eagle3": "x/eagle3", "eagle": "x/eagle", "medusa": "x/medusa", "dflash": "x/dflash",
            "dspark": "x/dspark"}
VERSIONS = ["0.17.0", "0.21.0", "1.0.0", "1.1.0", "1.2.0", "1.3.0rc7", "1.3.0rc8", "1.3.0rc13", "1.3.0rc14", "1.3.0rc20",
            "1.3.0rc21", "1.3.0rc22", "1.3.0rc27", "1.3.0rc29", "1.3.0", "1.4.0rc1", "1.4.0rc2", "1.4.0rc4"]
SCHEDULE = [
    {"min_batch": 1, "max_batch": 4, "num_speculative_tokens": 4},
    {"min_batch": 5, "max_batch": 16, "num_speculative_tokens": 2},
    {"min_batch": 17, "max_batch": 48, "num_speculative_tokens": 1},
    {"min_batch": 49, "num_speculative_tokens": 0},
]


def test_every_generation_cites_its_source():
    for since, gen in field_lists().items():
        assert "tensorrt_llm/llmapi/llm_args.py" in gen["source"], since  # a commit or a release's docs build
        assert gen["model_key"] in gen["base"]
        if "draft_len_schedule" in gen["base"]:
            assert gen["draft_len_schedule"] in ("at_least", "up_to"), since


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle3", "eagle", "mtp", "medusa", "lookahead", "suffix", "dflash",
                                    "dspark"])
def test_rendered_yaml_uses_only_recorded_fields(version, method):
    plan = make_plan("trtllm", version, method=method, drafter=DRAFTERS.get(method), k=3)
    if get_adapter("trtllm").method_reason(method, version) is not None:
        with pytest.raises(StackError, match="Supported there: ngram"):
            render_plan(plan)
        return
    r = render_plan(plan)
    llm_args = yaml.safe_load(r.spec.files["trtllm-config.yaml"])
    spec = llm_args["speculative_config"]
    backend = r.spec.argv[r.spec.argv.index("--backend") + 1]
    check_against_fields(spec, backend, version)  # raises on any field or type that version lacks
    assert generation(version)["serve_config_flag"] in r.spec.argv


def test_tensorrt_backend_methods_end_with_the_backend():
    a = get_adapter("trtllm")
    for method in ("eagle", "medusa", "lookahead"):
        assert a.method_reason(method, "1.3.0rc20") is None
        assert "before 1.3.0rc21" in a.method_reason(method, "1.3.0rc21")


def _schedule(version: str, k: int = 4) -> tuple[dict, list[str]]:
    r = render_plan(make_plan("trtllm", version, model="meta-llama/Llama-3.1-8B-Instruct", method="eagle3",
                              drafter="x/eagle3", k=k, schedule=SCHEDULE))
    return yaml.safe_load(r.spec.files["trtllm-config.yaml"])["speculative_config"], r.spec.notes


def _validate(spec: dict, semantics: str) -> None:
    """The version's DecodingBaseConfig validators, as recorded (trtllm_fields.yaml header)."""
    sched, top = spec["draft_len_schedule"], spec["max_draft_len"]
    assert all(b >= 1 for b in sched) and all(0 <= v <= top for v in sched.values())
    assert sched[min(sched)] == top
    if semantics == "at_least":
        assert 1 in sched
    else:
        assert "max_concurrency" not in spec  # mutually exclusive since PR #10860


def _lookup(sched: dict, batch: int, semantics: str) -> int:
    keys = sorted(sched)
    if semantics == "at_least":  # drafter.py: the largest key <= batch
        return sched[keys[bisect_right(keys, batch) - 1]]
    i = bisect_left(keys, batch)  # speculative/utils.py: the first key >= batch, none above the last
    return sched[keys[i]] if i < len(keys) else 0


def _planned(batch: int) -> int:
    return next(e["num_speculative_tokens"] for e in SCHEDULE
                if e["min_batch"] <= batch <= (e.get("max_batch") or 1 << 30))


@pytest.mark.parametrize("version,semantics", [("1.2.0", "at_least"), ("1.3.0rc7", "at_least"),
                                               ("1.3.0rc8", "up_to"), ("1.3.0", "up_to")])
def test_schedule_means_the_plan_on_both_sides_of_the_semantics_change(version, semantics):
    assert generation(version)["draft_len_schedule"] == semantics
    assert "eagle3" in get_adapter("trtllm").schedule_methods(version)
    spec, notes = _schedule(version)
    _validate(spec, semantics)
    # The stack's own lookup gives the plan's k at every batch size.
    assert [_lookup(spec["draft_len_schedule"], b, semantics) for b in range(1, 129)] == [_planned(b) for b in range(1, 129)]
    assert any("batch >= key" in n if semantics == "at_least" else "batch <= key" in n for n in notes)


def test_the_same_schedule_is_spelled_differently_across_the_boundary():
    old, _ = _schedule("1.3.0rc7")
    new, _ = _schedule("1.3.0rc8")
    assert old["draft_len_schedule"] == {1: 4, 5: 2, 17: 1, 49: 0}
    assert new["draft_len_schedule"] == {4: 4, 16: 2, 48: 1}


def test_max_concurrency_is_the_only_control_before_draft_len_schedule():
    a = get_adapter("trtllm")
    assert not a.supports_schedule("1.0.0") and a.schedule_cutoff("1.0.0")
    spec, notes = _schedule("1.0.0")
    assert spec["max_concurrency"] == 48 and "draft_len_schedule" not in spec
    assert any("max_concurrency" in n for n in notes)
    assert not a.supports_schedule("0.17.0") and not a.schedule_cutoff("0.17.0")


def test_a_schedule_that_restarts_at_a_larger_k_is_refused_with_its_rule():
    bad = [{"min_batch": 1, "max_batch": 4, "num_speculative_tokens": 2},
           {"min_batch": 5, "num_speculative_tokens": 4}]
    with pytest.raises(StackError, match="max_draft_len"):
        render_plan(make_plan("trtllm", "1.3.0rc8", method="eagle3", drafter="x/eagle3", k=2, schedule=bad))


def test_done_means_trtllm_dry_run_yaml_checks_out(run_cli):
    res = run_cli("launch", "trtllm", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--dry-run")
    assert res.exit_code == 1 and "would fail: " in res.stdout, res.stderr  # no TensorRT-LLM or GPU here
    out = res.stdout
    argv = shlex.split(next(ln for ln in out.splitlines() if ln.startswith("command: ")).removeprefix("command: "))
    assert argv[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-70B-Instruct"]
    assert argv[argv.index("--tp_size") + 1] == "4"
    body = out.split("file trtllm-config.yaml:\n", 1)
    if len(body) == 2:  # speculation chosen: the YAML is printed, indented
        text = "\n".join(ln[4:] for ln in body[1].splitlines() if ln.startswith("    "))
        spec = yaml.safe_load(text)["speculative_config"]
        check_against_fields(spec, argv[argv.index("--backend") + 1], None)


def test_the_one_model_path_schedules_eagle3_only_and_cuts_the_rest_off_with_max_concurrency():
    # SpeculativeDecodingMode.support_dynamic_draft_len() is Eagle3 one-model only in the releases recorded: a schedule
    # for another decoding type would be ignored without a word, so specplug renders its on/off cutoff instead.
    a = get_adapter("trtllm")
    assert a.schedule_methods("1.3.0rc8") == {"eagle3"} and not a.supports_schedule("1.3.0rc8")
    assert a.supports_schedule("1.2.0")  # the two-model path's schedule reads the same for every type
    plan = make_plan("trtllm", "1.3.0rc14", model="Qwen/Qwen3-8B", method="dflash", drafter="x/dflash", k=4,
                     schedule=SCHEDULE)
    r = render_plan(plan)
    spec = yaml.safe_load(r.spec.files["trtllm-config.yaml"])["speculative_config"]
    assert "draft_len_schedule" not in spec and spec["max_concurrency"] == 48
    check_against_fields(spec, "pytorch", "1.3.0rc14")
    assert any("no draft_len_schedule for DFlash" in n for n in r.spec.notes)
