"""The compatibility tables (adapters/data/compat_*.yaml, specplug.compat): every row sourced and well formed, and
for every row one plan it allows renders while one it forbids is refused, by every command's validator, with the
row's source and the fix; the planner avoids what is broken; launch --force overrides; pinned defaults render;
a lossy verifier needs allow_lossy; TGI is legacy and never the default."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from specplug.compat import FEATURES, FLAG_FEATURES, CompatRow, parse_table
from specplug.config import Config, WorkloadSpec
from specplug.errors import SpecplugError
from specplug.rendering import render_plan
from specplug.stacks.registry import get_adapter, stack_names
from specplug.validate import InvalidPlan, forcing, plan_problems, validate_plan
from specplug.versions import version_key
from tests.adapters.conftest import make_plan

L8 = "meta-llama/Llama-3.1-8B-Instruct"
DS = "deepseek-ai/DeepSeek-V3"
Q8 = "Qwen/Qwen3-8B"
E1 = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"
E3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SMALL_LLAMA = "meta-llama/Llama-3.2-1B-Instruct"
OTHER_VOCAB = "Qwen/Qwen2.5-0.5B-Instruct"

# One plan per method that the stacks render without further choices.
RECIPES: dict[str, dict[str, Any]] = {
    "ngram": dict(model=L8, method="ngram", k=4, prompt_lookup_min=2, prompt_lookup_max=4),
    "mtp": dict(model=DS, method="mtp", k=1, tp=8),
    "eagle3": dict(model=L8, method="eagle3", drafter=E3, k=3),
    "eagle": dict(model=L8, method="eagle", drafter=E1, k=3),
    "draft_model": dict(model=L8, method="draft_model", drafter=SMALL_LLAMA, k=4),
    "dflash": dict(model=Q8, method="dflash", drafter="z-lab/Qwen3-8B-DFlash-b16", k=15),
    "dspark": dict(model=Q8, method="dspark", drafter="deepseek-ai/dspark_qwen3_8b_block7", k=7),
}
# A hybrid target (24 Gated DeltaNet layers, 8 attention layers), read from its config.json.
HYBRID = str(Path(__file__).parent / "catalog" / "hub_configs" / "Qwen--Qwen3.5-9B")
# A target whose layer_types alternate sliding-window and full attention (Gemma 2), read from its config.json.
SLIDING = str(Path(__file__).parent / "catalog" / "hub_configs" / "google--gemma-2-9b-it")
# A model a models-scoped row names, with the drafter its source used.
SCOPED = {"kimi-k2.6": dict(model="nvidia/Kimi-K2.6-NVFP4", drafter="lightseekorg/kimi-k2.6-eagle3-mla")}


def _rows() -> list[CompatRow]:
    return [r for name in stack_names() for r in get_adapter(name).compatibility().rows]


ROWS = _rows()


def _row_id(r: CompatRow) -> str:
    return f"{r.stack}-{'+'.join(r.features)}-{r.methods[0]}-{r.status}-{r.to or r.since or r.fixed_in or 'all'}"


def _with_features(kw: dict[str, Any], row: CompatRow, on: bool) -> tuple[dict[str, Any], bool]:
    """``kw`` with the row's features on (or off); also whether the workload is multimodal."""
    kw = {**kw, "serve": dict(kw.get("serve", {}))}
    multimodal = False
    flags = dict(get_adapter(row.stack).compatibility().flags)
    for f in row.features:
        if f == "lora" and on:
            kw["serve"]["lora"] = {"adapters": {"tuned": "org/tuned-lora"}}
        elif f == "structured_output" and on:
            kw["serve"]["structured_output"] = True
        elif f == "reasoning_parser" and on:
            kw["serve"]["reasoning_parser"] = "qwen3"
        elif f == "prefix_caching" and on:
            kw["serve"]["prefix_caching"] = True
        elif f == "pipeline_parallel" and on:
            kw["pp"] = 2
        elif f == "multimodal":
            multimodal = on
        elif f == "eagle3_head_as_eagle":
            kw.update(method="eagle", drafter=E3 if on else E1, model=L8)
        elif f == "draft_vocab_mismatch":
            kw.update(method="draft_model", drafter=OTHER_VOCAB if on else SMALL_LLAMA, model=L8)
        elif f == "lm_format_enforcer" and on:
            kw["serve"]["structured_output"] = "lm-format-enforcer"
        elif f == "fp8_kv_cache" and on:
            kw["serve"]["kv_cache_dtype"] = "fp8"
        elif f == "hybrid_target" and on:
            kw["model"] = HYBRID  # a target with Gated DeltaNet layers beside attention (its config.json)
        elif f == "sliding_window_target" and on:
            kw["model"] = SLIDING
        elif f in FLAG_FEATURES and on:
            kw["serve"]["extra_args"] = [*kw["serve"].get("extra_args", []), flags[f][0]]
    return kw, multimodal


def _plan(stack: str, version: str | None, kw: dict[str, Any], multimodal: bool):
    plan = make_plan(stack, version, **kw)
    return plan.model_copy(update={"workload": WorkloadSpec(multimodal=multimodal)}) if multimodal else plan


def _case(row: CompatRow) -> tuple[str | None, dict[str, Any]]:
    """A version where the row has its status and a method recipe of the row the stack runs there."""
    adapter = get_adapter(row.stack)
    methods = ["ngram", *RECIPES] if "*" in row.methods else [m for m in row.methods if m in RECIPES]
    versions = [row.to, row.since, *reversed(adapter.versions()), None]
    for version in versions:
        if row.verdict(version) != row.status:
            continue
        for m in methods:
            if adapter.method_reason(m, version) is None:
                kw = dict(RECIPES[m])
                for fragment in row.models:
                    kw.update(SCOPED[fragment])
                return version, kw
    raise AssertionError(f"no version and method to test {row}")


def test_every_table_loads_and_every_row_is_sourced():
    assert len(ROWS) >= 12
    for row in ROWS:
        assert row.source.strip() and row.note.strip(), row
        assert set(row.features) <= set(FEATURES)
        bounds = [v for v in (row.since, row.to) if v]
        assert bounds == sorted(bounds, key=version_key), row
        if row.to and row.fixed_in:
            assert version_key(row.to) < version_key(row.fixed_in), row
        for fragment in row.models:
            assert fragment in SCOPED, f"add a test model for {fragment}"


def test_the_leads_of_issue_40_are_rows():
    sources = " ".join(r.source for r in ROWS)
    for lead in ("vllm#51660", "#46118", "#44993", "PR #55628", "PR #34337", "#37772", "#12661", "#24051", "#23838",
                 "#21272"):
        assert lead in sources, lead
    pinned = get_adapter("llamacpp").compatibility().default("draft_p_min")
    assert pinned is not None and pinned.changed_in == "b9235" and "#25792" in pinned.source


def test_a_bad_row_is_an_error_not_a_silent_non_match():
    with pytest.raises(SpecplugError, match="unknown feature"):
        parse_table("stack: x\nrows:\n- {features: [loras], methods: [ngram], status: broken, source: s, note: n}\n", "t.yaml")
    with pytest.raises(SpecplugError, match="not a valid"):
        parse_table("stack: x\nrows:\n- {features: [lora], methods: [ngram], status: broken, note: n}\n", "t.yaml")


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_each_row_allows_one_plan_and_refuses_one(row):
    version, kw = _case(row)
    off, mm_off = _with_features(kw, row, on=False)
    allowed = _plan(row.stack, version, off, mm_off)
    render_plan(allowed)  # the same method and release without the row's features renders
    on, mm_on = _with_features(kw, row, on=True)
    plan = _plan(row.stack, version, on, mm_on)
    if row.status != "broken":
        assert not [p for p in plan_problems(plan) if row.source in p.message]
        render_plan(plan)
        return
    with pytest.raises(InvalidPlan) as exc:
        validate_plan(plan)
    problem = next(p for p in exc.value.problems if row.source.split(";")[0].split(" (")[0] in p.text())
    assert problem.hint
    if row.fixed_in:
        assert row.fixed_in in problem.hint
        fixed = _plan(row.stack, row.fixed_in, on, mm_on)
        assert not [p for p in plan_problems(fixed) if p.message == problem.message]


def test_recommend_avoids_a_broken_combination_and_says_why():
    from specplug.planning import recommend

    kw = dict(model="deepseek-v3", gpu="h200", num_gpus=8, stack="vllm", structured_output=True,
              reasoning_parser="deepseek_r1")
    plan = recommend(stack_version="0.23.0", **kw)
    assert plan.speculation.method != "mtp"
    mtp = next(c for c in plan.candidates if c.method == "mtp")
    assert mtp.ruled_out and "#46118" in mtp.ruled_out
    assert any("#46118" in r and "0.27.1" in r for r in plan.reasons)
    # Past the fix, and without the features, MTP is a candidate again.
    for later in (recommend(stack_version="0.27.1", **kw), recommend(model="deepseek-v3", gpu="h200", num_gpus=8,
                                                                     stack="vllm", stack_version="0.23.0")):
        assert not (next(c for c in later.candidates if c.method == "mtp").ruled_out or "").startswith("known broken")


BROKEN_CONFIG = """version: 1
model: deepseek-v3
stack: {name: vllm, version: "0.23.0"}
hardware: {gpu: h200, num_gpus: 8}
speculation: {method: mtp, num_speculative_tokens: 1}
serve: {structured_output: true, reasoning_parser: deepseek_r1}
"""


def test_check_fails_a_committed_broken_config_with_the_source(tmp_path):
    from specplug.check import check

    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(BROKEN_CONFIG)
    report = check(cfg, [])
    assert not report.ok
    text = "\n".join(p.text() for p in report.problems)
    assert "#46118" in text and "0.27.1 or newer" in text


def test_launch_refuses_it_and_force_starts_it_saying_so(tmp_path):
    from specplug.launcher import launch
    from specplug.planning import plan_from_config

    cfg = Config.model_validate(__import__("yaml").safe_load(BROKEN_CONFIG))
    with pytest.raises(InvalidPlan, match="#46118"):
        plan_from_config(cfg)
    with forcing():
        plan = plan_from_config(cfg)
    with pytest.raises(InvalidPlan):
        launch("vllm", plan=plan, dry_run=True, out=io.StringIO(), run_dir=str(tmp_path))
    out = io.StringIO()
    launch("vllm", plan=plan, dry_run=True, force=True, out=out, run_dir=str(tmp_path))
    assert "--force: starting a known-broken combination" in out.getvalue() and "dry run" in out.getvalue()


def test_force_overrides_nothing_else():
    plan = make_plan("vllm", "0.32.0", method="ngram", k=0)
    with forcing(), pytest.raises(InvalidPlan, match="nothing would be drafted"):
        validate_plan(plan)


# ---------------------------------------------------------------------------------------------- pinned defaults


def test_llamacpp_after_b9235_renders_the_draft_p_min_it_assumes():
    for version, flag in (("b10576", "--spec-draft-p-min"), ("b5000", "--draft-p-min")):
        argv = render_plan(make_plan("llamacpp", version, model="/m/qwen2.5-32b-q4_k_m.gguf", method="draft_model",
                                     drafter="/m/qwen2.5-0.5b-q8_0.gguf", k=8)).spec.argv
        assert argv[argv.index(flag) + 1] == "0.0", version
    # The user's own value stands; n-gram drafting has no early stop to pin.
    argv = render_plan(make_plan("llamacpp", "b10576", model="/m/a.gguf", method="draft_model", drafter="/m/b.gguf",
                                 k=8, serve={"extra_args": ["--spec-draft-p-min", "0.75"]})).spec.argv
    assert argv.count("--spec-draft-p-min") == 1 and argv[argv.index("--spec-draft-p-min") + 1] == "0.75"
    argv = render_plan(make_plan("llamacpp", "b10576", model="/m/a.gguf", method="ngram", k=8)).spec.argv
    assert "--spec-draft-p-min" not in argv


# ---------------------------------------------------------------------------------------------- lossless


FLY = dict(model=L8, method="draft_model", drafter=SMALL_LLAMA, k=4, verification="fly")


def test_a_lossy_verifier_is_refused_without_allow_lossy():
    with pytest.raises(InvalidPlan, match="lossy") as exc:
        validate_plan(make_plan("vllm", "0.33.0", **FLY))
    assert exc.value.problems[0].key == "speculation.verification" and "allow_lossy" in (exc.value.problems[0].hint or "")
    with forcing(), pytest.raises(InvalidPlan, match="lossy"):
        validate_plan(make_plan("vllm", "0.33.0", **FLY))  # --force is for known-broken rows, not for losing outputs


def test_allow_lossy_renders_fly_and_every_output_says_lossy():
    from specplug.commands._plan_tables import plan_tables
    from specplug.rendering import summary

    plan = make_plan("vllm", "0.33.0", allow_lossy=True, **FLY)
    r = render_plan(plan)
    cfg = r.spec.argv[r.spec.argv.index("--speculative-config") + 1]
    assert '"rejection_sample_method":"fly"' in cfg and '"fly_window_size":3' in cfg
    assert any("LOSSY" in n for n in r.spec.notes) and "LOSSY" in summary(plan) and "LOSSY" in r.script
    rendered = io.StringIO()
    from rich.console import Console

    Console(file=rendered, width=200).print(plan_tables(plan)[0])
    line = next(ln for ln in rendered.getvalue().splitlines() if "predicted speedup" in ln)
    assert "LOSSY" in line
    # vLLM 0.32.0 has no FLy: refused with the releases that have it.
    with pytest.raises(InvalidPlan, match="FLy"):
        validate_plan(make_plan("vllm", "0.32.0", allow_lossy=True, **FLY))


def test_fly_is_for_drafters_and_is_recorded_as_lossy_in_the_lock():
    from specplug.lock import summarize

    with pytest.raises(Exception, match="applies to drafters"):
        Config.model_validate({"speculation": {"method": "ngram", "verification": "fly", "allow_lossy": True}})
    assert "lossy" in summarize(make_plan("vllm", "0.33.0", allow_lossy=True, **FLY))
    assert "lossy" not in summarize(make_plan("vllm", "0.33.0", **RECIPES["eagle3"]))


# ---------------------------------------------------------------------------------------------- config and legacy


def test_new_serve_and_workload_fields_stay_out_of_dumps_while_unset():
    """Locks and render hashes of configs that do not use them do not move."""
    data = Config().model_dump(mode="json")
    assert not {"lora", "structured_output", "prefix_caching", "reasoning_parser"} & set(data["serve"])
    assert "multimodal" not in data["workload"]
    cfg = Config.model_validate({"serve": {"lora": {"adapters": {"sql": "org/sql-lora"}, "max_rank": 16},
                                           "structured_output": "xgrammar", "prefix_caching": False,
                                           "reasoning_parser": "qwen3"}, "workload": {"multimodal": True}})
    again = Config.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg and again.serve.prefix_caching is False


def test_plan_flags_set_the_features():
    from specplug.request import PlanRequest

    cfg = PlanRequest.from_flags(structured_output=True, lora=("sql=org/sql-lora",), reasoning_parser="qwen3",
                                 multimodal=None).apply(Config())
    assert cfg.serve.structured_output is True and cfg.serve.lora.adapters == {"sql": "org/sql-lora"}
    # A switch only turns a feature on: left off, the config's value stands.
    kept = PlanRequest.from_flags(structured_output=False).apply(Config.model_validate({"serve": {"structured_output": True}}))
    assert kept.serve.structured_output is True
    with pytest.raises(SpecplugError, match="NAME=PATH"):
        PlanRequest.from_flags(lora=("no-path",)).apply(Config())


def test_tgi_is_legacy_renders_with_a_note_and_is_never_the_default(monkeypatch):
    import specplug.stacks.registry as A

    tgi = get_adapter("tgi")
    assert tgi.compatibility().legacy
    r = render_plan(make_plan("tgi", "3.3.7", model="mistralai/Mistral-7B-Instruct-v0.2", method="ngram", k=2))
    assert any(n.startswith("Legacy stack") for n in r.spec.notes)
    # Only TGI installed: recommend still plans for the default stack, not TGI.
    for name in A.STACK_PREFERENCE:
        monkeypatch.setattr(type(get_adapter(name)), "installed_version", lambda self, n=name: "3.3.7" if n == "tgi" else None)
    assert A.default_stack() == A.DEFAULT_STACK != "tgi"


def test_sglang_keeps_adaptive_steps_off_with_lora_and_renders_say_the_features_are_not_rendered():
    schedule = [{"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 4},
                {"min_batch": 9, "num_speculative_tokens": 2}]
    plan = make_plan("sglang", "0.5.23", model=L8, method="eagle3", drafter=E3, k=4, schedule=schedule,
                     serve={"lora": {"adapters": {"tuned": "org/tuned-lora"}}})
    r = render_plan(plan)
    assert "--speculative-adaptive" not in r.spec.argv
    assert any("refuses --speculative-adaptive with LoRA" in n for n in r.spec.notes)
    assert any("not rendered" in n and "LoRA" in n for n in r.spec.notes)
    assert "--speculative-adaptive" in render_plan(make_plan("sglang", "0.5.23", model=L8, method="eagle3", drafter=E3,
                                                             k=4, schedule=schedule)).spec.argv


# ---------------------------------------------------------------------------------------------- features from flags


DP_ATTENTION_CONFIG = """version: 1
model: llama-3.1-8b
stack: {name: sglang, version: "0.5.23"}
hardware: {gpu: h100, num_gpus: 1}
speculation: {method: ngram, num_speculative_tokens: 4}
serve: {extra_args: ["--enable-dp-attention"]}
"""


def test_check_fails_a_committed_config_with_a_flag_feature_the_stack_refuses(tmp_path):
    from specplug.check import check

    cfg = tmp_path / "specplug.yaml"
    cfg.write_text(DP_ATTENTION_CONFIG)
    report = check(cfg, [])
    assert not report.ok
    text = "\n".join(p.text() for p in report.problems)
    assert "speculative_hook.py _handle_ngram" in text and "turn off DP attention" in text


def test_the_planner_avoids_a_flag_feature_the_stack_refuses_and_the_render_does_not_call_it_unrendered():
    from specplug.planning import plan_from_config

    data = __import__("yaml").safe_load(DP_ATTENTION_CONFIG)
    data["speculation"] = "auto"
    plan = plan_from_config(Config.model_validate(data))
    assert plan.speculation.method != "ngram"
    ngram = next(c for c in plan.candidates if c.method == "ngram")
    assert ngram.ruled_out and "_handle_ngram" in ngram.ruled_out
    assert any("DP attention" in r and "ngram" in r for r in plan.reasons)
    if plan.speculation.enabled:
        # A flag the user wrote is rendered as written: no "not rendered" note for it.
        assert not any("not rendered" in n for n in render_plan(plan).spec.notes)


def _flag_features(stack: str, *args: str, **serve: Any) -> frozenset[str]:
    from specplug.compat import serve_features
    from specplug.config import ServeOptions

    flags = get_adapter(stack).compatibility().flags
    return serve_features(ServeOptions(extra_args=list(args), **serve), WorkloadSpec(), 1, flags)


def test_flag_features_read_the_stacks_spellings_only():
    assert _flag_features("vllm", "--async-scheduling") == {"async_scheduling"}
    assert _flag_features("vllm", "--async-scheduling=true") == {"async_scheduling"}
    assert _flag_features("vllm", "--no-async-scheduling") == frozenset()
    assert _flag_features("sglang", "--enable-mixed-chunk", "--enable-dp-attention") == {"mixed_chunked_prefill",
                                                                                         "dp_attention"}
    assert _flag_features("sglang", "--enable-dp-attention-local-control-broadcast") == frozenset()
    assert _flag_features("vllm", structured_output="lm-format-enforcer") == {"structured_output", "lm_format_enforcer"}
    assert _flag_features("vllm", structured_output="xgrammar") == {"structured_output"}


def test_a_stack_whose_table_declares_no_flag_for_a_feature_never_infers_it():
    """Flag spellings belong to each stack's own table: another stack's spelling turns nothing on."""
    assert _flag_features("vllm", "--enable-dp-attention", "--enable-mixed-chunk") == frozenset()
    assert _flag_features("sglang", "--async-scheduling") == frozenset()
    for stack in ("llamacpp", "trtllm", "tgi"):
        assert get_adapter(stack).compatibility().flags == ()
        assert _flag_features(stack, "--async-scheduling", "--enable-dp-attention", "--enable-mixed-chunk") == frozenset()
    # Through the validator too: SGLang refuses NGRAM with DP attention, but '--async-scheduling' (a vLLM flag)
    # on SGLang, or '--enable-dp-attention' on vLLM, is no feature there.
    from specplug.validate import plan_features

    plan = make_plan("sglang", "0.5.23", **RECIPES["ngram"], serve={"extra_args": ["--async-scheduling"]})
    assert "async_scheduling" not in plan_features(plan)
    plan = make_plan("vllm", "0.32.0", **RECIPES["ngram"], serve={"extra_args": ["--enable-dp-attention"]})
    assert "dp_attention" not in plan_features(plan)
    # And the planner reads the same table: on SGLang the flag rules n-gram out, on vLLM it does not.
    from specplug.planning import plan_from_config

    data = __import__("yaml").safe_load(DP_ATTENTION_CONFIG)
    data.update(speculation="auto", stack={"name": "vllm", "version": "0.32.0"})
    ngram = next(c for c in plan_from_config(Config.model_validate(data)).candidates if c.method == "ngram")
    assert not (ngram.ruled_out or "").startswith("known broken")


def test_a_table_spells_its_flags_and_declares_one_for_every_flag_row():
    ok = "stack: x\nflags: {dp_attention: [--enable-dp-attention]}\nrows:\n- {features: [dp_attention], methods: [ngram], status: broken, source: s, note: n}\n"
    table = parse_table(ok, "t.yaml")
    assert table.flags == (("dp_attention", ("--enable-dp-attention",)),)
    assert "DP attention (--enable-dp-attention in serve.extra_args)" in table.rows[0].about()
    for bad, match in (("flags: {lora: [--enable-lora]}\n", "config-only"),
                       ("flags: {dp_attention: [enable-dp-attention]}\n", "spelled"),
                       ("flags: {dp_attention: []}\n", "spelled"),
                       ("rows:\n- {features: [dp_attention], methods: [ngram], status: broken, source: s, note: n}\n",
                        "declares no flag")):
        with pytest.raises(SpecplugError, match=match):
            parse_table("stack: x\n" + bad, "t.yaml")


# ---------------------------------------------------------------------------------------------- features from the target


def test_a_hybrid_target_is_read_from_its_layers_and_only_where_a_row_needs_it(monkeypatch):
    import specplug.validate as V
    from specplug.catalog import get_model
    from specplug.compat import model_features, needs_model

    assert model_features(get_model(HYBRID)) == {"hybrid_target"}
    nemotron = str(Path(__file__).parent / "catalog" / "hub_configs" / "nvidia--Nemotron-H-56B-Base-8K")
    assert model_features(get_model(nemotron)) == {"hybrid_target"}  # Mamba blocks
    assert model_features(get_model(L8)) == frozenset()
    assert model_features(get_model("gpt-oss-20b")) == {"sliding_window_target"}  # its catalog row
    assert model_features(get_model(SLIDING)) == {"sliding_window_target"}  # config.json layer_types
    assert needs_model(get_adapter("llamacpp").compatibility().rows)
    assert needs_model(get_adapter("sglang").compatibility().rows)
    assert not needs_model(get_adapter("trtllm").compatibility().rows)
    # A stack without such a row never reads the target for it.
    monkeypatch.setattr(V, "_catalog_model", lambda ref: pytest.fail(f"read {ref}"))
    assert "hybrid_target" not in V.plan_features(make_plan("trtllm", "1.2.0", **RECIPES["ngram"]))


def test_an_fp8_kv_cache_is_a_feature_the_fix_can_turn_off():
    from specplug.compat import serve_features
    from specplug.config import ServeOptions

    for dtype, on in (("fp8", True), ("fp8_e5m2", True), ("auto", False), ("bfloat16", False)):
        assert ("fp8_kv_cache" in serve_features(ServeOptions(kv_cache_dtype=dtype), WorkloadSpec(), 1)) is on
    plan = make_plan("vllm", "0.9.2", **RECIPES["eagle3"], serve={"kv_cache_dtype": "fp8"})
    with pytest.raises(InvalidPlan) as exc:
        validate_plan(plan)
    problem = next(p for p in exc.value.problems if "#21177" in p.message)
    assert "turn off an FP8 KV cache" in (problem.hint or "")
