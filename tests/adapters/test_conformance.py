"""Every registered adapter renders what it claims: the conformance suite.

Parametrised over the registry (the built-in stacks, any installed entry-point plugin) plus the third-party
example of docs/writing-an-adapter.md, registered here through a ``specplug.adapters`` entry point. For each
adapter it checks, at the edges of every version window it declares:

- a claimed method is offered there, passes the plan checks and renders; just outside, it is refused with a
  reason (``methods``), a ``speculation.method`` problem and a StackError from ``render``;
- ``problems`` (what ``check``/``recommend`` report) and ``render`` agree, over served weight formats and
  KV-cache dtypes too;
- a declared schedule is rendered, an undeclared one is not; a declared tree changes the render, an
  undeclared one does not;
- the declared running-request cap reaches the argv; an image that needs no GPU means ``runs_without_gpu``;
- the metric declaration is what ``specplug bench`` reads and recognises;
- the declared vocabulary rules decide the validator's verdict on a draft model, whose message ends with what
  the adapter says the stack does; the declared launch prior is what ``tune`` budgets per launch;
- the launch script runs the argv the spec states.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from specplug.config import METHODS
from specplug.errors import StackError
from specplug.methods import DRAFTER_METHODS
from specplug.stacks import registry
from specplug.stacks.base import BaseAdapter
from specplug.stacks.metrics import Counters, Gauges, IterationStats, SkippedTokens
from specplug.stacks.protocol import Adapter
from specplug.stacks.registry import get_adapter, stack_names
from specplug.stacks.windows import version_in
from specplug.versions import version_key

from .conftest import make_plan

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-an-adapter.md"
PLUGIN = "toyserve"  # the documented example, installed below as an entry-point plugin
STACKS = [*stack_names(), *([PLUGIN] if PLUGIN not in stack_names() else [])]

L8 = "meta-llama/Llama-3.1-8B-Instruct"
DRAFTERS = {
    "draft_model": "meta-llama/Llama-3.2-1B-Instruct",
    "eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "medusa": "x/medusa-heads",
    "mlp_speculator": "x/mlp-speculator",
    "dflash": "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",
    "dspark": "x/dspark-drafter",
}
# A method added to specplug.methods needs no entry: its drafter is a placeholder id with its name.
DRAFTERS.update({m: f"x/{m}-drafter" for m in DRAFTER_METHODS if m not in DRAFTERS})
SCHEDULE = [
    {"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 4},
    {"min_batch": 9, "max_batch": 32, "num_speculative_tokens": 2},
    {"min_batch": 33, "num_speculative_tokens": 0},
]
TREE = {"steps": 3, "topk": 4, "num_draft_tokens": 8}


@pytest.fixture(scope="module", autouse=True)
def documented_plugin(tmp_path_factory) -> Iterator[None]:
    """The docs' example adapter, importable and registered under the entry-point group like an installed one."""
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)[0]
    src = tmp_path_factory.mktemp("plugin")
    (src / "specplug_toyserve.py").write_text(code, encoding="utf-8")
    original = md.entry_points

    def with_plugin(**kw):
        eps = list(original(**kw))
        if kw.get("group") == registry.ENTRY_POINT_GROUP and PLUGIN not in {e.name for e in eps}:
            eps.append(EntryPoint(name=PLUGIN, value="specplug_toyserve:adapter", group=registry.ENTRY_POINT_GROUP))
        return eps

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        mp.setattr(md, "entry_points", with_plugin)
        registry._load.cache_clear()
        yield
    registry._load.cache_clear()


def below(version: str) -> str | None:
    """A release just before ``version`` ('0.12.0' -> '0.11.999', 'b10576' -> 'b10575'); None below the first."""
    nums = list(re.finditer(r"\d+", version))
    for i in range(len(nums) - 1, -1, -1):
        n = int(nums[i].group())
        if n > 0:
            return version[: nums[i].start()] + str(n - 1) + re.sub(r"\d+", "999", version[nums[i].end():])
    return None


def known(a: Adapter, version: str | None) -> bool:
    try:
        a.known_version(version)
    except StackError:
        return False
    return True


def windows(a: Adapter) -> dict[str, tuple]:
    """The adapter's declared method windows (the BaseAdapter table; a protocol-only adapter declares none)."""
    return dict(a.method_table) if isinstance(a, BaseAdapter) else {}


def edge_versions(a: Adapter) -> list[str | None]:
    """Every version at which a declared window opens or closes, the release before each, and 'newest'."""
    found: set[str] = set()
    for ws in windows(a).values():
        for w in ws:
            for v in (w.since, w.until):
                if v:
                    found.add(v)
                    if (b := below(v)) is not None:
                        found.add(b)
    out: list[str | None] = sorted((v for v in found if known(a, v)), key=version_key)
    return [*out, None]


def plan_for(stack: str, version: str | None, method: str, **kw):
    if method == "mtp":
        kw = {"model": "deepseek-ai/DeepSeek-V3", "tp": 8, "num_gpus": 8, **kw}
    return make_plan(stack, version, model=kw.pop("model", L8), method=method, drafter=DRAFTERS.get(method),
                     k=kw.pop("k", 3), **kw)


def rendered(a: Adapter, plan) -> dict | None:
    """The launch spec without its notes (None: refused)."""
    try:
        spec = a.render(plan)
    except StackError:
        return None
    return spec.model_dump(exclude={"notes"})


def first_method(a: Adapter, version: str | None) -> str | None:
    offered = [m for m, why in a.methods(version).items() if why is None]
    return offered[0] if offered else None


@pytest.fixture(params=STACKS)
def stack(request) -> str:
    return request.param


def test_the_documented_plugin_is_in_the_suite():
    assert PLUGIN in STACKS and isinstance(get_adapter(PLUGIN), BaseAdapter)


def test_the_protocol_is_complete_and_methods_cover_every_canonical_one(stack):
    a = get_adapter(stack)
    assert isinstance(a, Adapter) and a.name == stack
    for v in edge_versions(a):
        methods = a.methods(v)
        assert set(methods) == set(METHODS) - {"none"}, v
        assert all(why is None or (isinstance(why, str) and why) for why in methods.values()), v
        assert isinstance(a.supports_schedule(v), bool) and isinstance(a.runs_without_gpu(v), bool)


def test_each_claimed_method_renders_inside_its_windows_and_is_refused_outside(stack):
    a = get_adapter(stack)
    failures = []
    for method, ws in windows(a).items():
        covered = [(w.since, w.until) for w in ws]
        for w in ws:
            inside = [w.since] + ([below(w.until)] if w.until else [])
            outside = [below(w.since) if w.since else None, w.until]
            for v in inside:
                if not known(a, v):
                    continue
                plan = plan_for(stack, v, method)
                why = a.methods(v)[method]
                keys = [p.key for p in a.problems(plan, v)]
                spec = rendered(a, plan)
                if why is not None or "speculation.method" in keys or spec is None:
                    failures.append(f"{method}@{v}: claimed, but reason={why!r} problems={keys} rendered={spec is not None}")
                elif spec["stack"] != stack or spec["stack_version"] != v or not spec["argv"]:
                    failures.append(f"{method}@{v}: spec names {spec['stack']}@{spec['stack_version']}")
                elif spec == rendered(a, plan_for(stack, v, "none")):
                    failures.append(f"{method}@{v}: renders the same as no speculation")
            for v in outside:
                if v is None or not known(a, v) or any(version_in(v, lo, hi) for lo, hi in covered):
                    continue
                plan = plan_for(stack, v, method)
                if a.methods(v)[method] is None or "speculation.method" not in [p.key for p in a.problems(plan, v)]:
                    failures.append(f"{method}@{v}: outside its windows, yet offered")
                if rendered(a, plan) is not None:
                    failures.append(f"{method}@{v}: outside its windows, yet rendered")
    assert not failures, "\n".join(failures)


def test_a_method_never_supported_is_refused_or_mapped_with_a_note(stack):
    a = get_adapter(stack)
    unsupported = dict(a.unsupported) if isinstance(a, BaseAdapter) else {}
    for v in edge_versions(a):
        for method, why in unsupported.items():
            assert a.methods(v)[method] == why
            try:
                spec = a.render(plan_for(stack, v, method))
            except StackError:
                continue
            # A stand-in (the embedded runtime) runs the nearest method it has, and says so.
            assert any(f"'{method}'" in n for n in spec.notes), f"{method}@{v} rendered without a word"


def _grid(a: Adapter, stack: str) -> Iterator[tuple[str | None, object]]:
    """Plans around each version edge: every weight format and KV-cache dtype, trees, schedules, an API key."""
    from specplug.catalog.precision import weight_formats
    from specplug.config import ServeSpec

    kv_dtypes = ServeSpec.model_fields["kv_cache_dtype"].annotation.__args__
    for v in edge_versions(a):
        method = first_method(a, v)
        if method is None:
            continue
        for fmt in weight_formats():
            yield v, plan_for(stack, v, method, serve={"quantization": fmt.name})
        for kv in kv_dtypes:
            yield v, plan_for(stack, v, method, serve={"kv_cache_dtype": kv})
        yield v, plan_for(stack, v, method, tree=TREE)
        yield v, plan_for(stack, v, method, k=4, schedule=SCHEDULE)
        yield v, plan_for(stack, v, method, serve={"api_key_env": "MY_KEY"})


def test_problems_and_render_agree(stack):
    a = get_adapter(stack)
    failures = []
    for v, plan in _grid(a, stack):
        problems = a.problems(plan, v)
        spec = rendered(a, plan)
        if bool(problems) == (spec is not None):
            serve = plan.serve.model_dump(exclude_defaults=True)
            failures.append(f"@{v} {plan.speculation.method} {serve}: problems={[p.text() for p in problems]} "
                            f"but rendered={spec is not None}")
    assert not failures, "\n".join(failures[:10])


def test_a_schedule_is_rendered_exactly_where_it_is_declared(stack):
    a = get_adapter(stack)
    failures = []
    for v in edge_versions(a):
        method = first_method(a, v)
        if method is None:
            continue
        with_schedule = rendered(a, plan_for(stack, v, method, k=4, schedule=SCHEDULE))
        if with_schedule is None:
            continue  # refused: the problems say why (test_problems_and_render_agree)
        changed = with_schedule != rendered(a, plan_for(stack, v, method, k=4))
        # A stack with only an on/off threshold renders the schedule's k=0 top as that threshold.
        declared = a.supports_schedule(v) or a.schedule_cutoff(v)
        if changed != declared:
            failures.append(f"{method}@{v}: supports_schedule={a.supports_schedule(v)}, schedule_cutoff="
                            f"{a.schedule_cutoff(v)} but the schedule {'changed' if changed else 'did not change'} the render")
    assert not failures, "\n".join(failures)


def test_listed_controls_agree_with_the_declared_capabilities(stack):
    """What 'specplug stacks' lists per version is what the adapter declares to the planner."""
    a = get_adapter(stack)
    if not hasattr(a, "controls"):
        pytest.skip("lists no controls")
    for v in [*a.versions(), *edge_versions(a)]:
        listed = a.controls(v)
        # Listed where a schedule takes effect for every method or for some (SGLang's EAGLE family, TensorRT-LLM's Eagle3).
        assert (listed["schedule"] is None) == (a.supports_schedule(v) or bool(a.schedule_methods(v))), v
        assert (listed["trees"] is None) == a.trees, v


def test_a_tree_changes_the_render_only_where_trees_are_declared(stack):
    a = get_adapter(stack)
    tree_changed = []
    for v in edge_versions(a):
        for method, why in a.methods(v).items():
            if why is not None:
                continue
            tree = rendered(a, plan_for(stack, v, method, tree=TREE))
            if tree is not None and tree != rendered(a, plan_for(stack, v, method)):
                tree_changed.append(f"{method}@{v}")
    if a.trees:
        assert tree_changed, "declares trees, but no method renders a tree differently from a chain"
    else:
        assert not tree_changed, f"declares no trees, but a tree changed the render: {tree_changed}"


def test_the_running_request_cap_reaches_the_argv(stack):
    a = get_adapter(stack)
    if a.spec_running_cap is None:
        pytest.skip("declares no running-request cap")
    for v in edge_versions(a):
        method = first_method(a, v)
        if method is not None and (spec := rendered(a, plan_for(stack, v, method))) is not None:
            assert str(a.spec_running_cap) in spec["argv"], v


def test_an_image_without_a_gpu_means_it_runs_without_one(stack):
    a = get_adapter(stack)
    if a.image is None or a.image.needs_gpu:
        pytest.skip("no GPU-free image declared")
    assert all(a.runs_without_gpu(v) for v in edge_versions(a))


def _exposition(m) -> tuple[str, str]:
    """(before, after) scrapes in the shape the declaration describes, 4 drafts of 3 tokens, 6 accepted."""
    r = m.acceptance
    if isinstance(r, IterationStats):
        it = {r.draft_tokens: 12, r.accepted: 6, r.requests: 4, r.length: 2.5}
        return "[]", json.dumps([{"iter": 1, r.blocks[0]: it}])
    lines = {
        Counters: lambda: [f"{r.drafts} 4", f"{r.draft_tokens} 12", f"{r.accepted} 6"] if r.drafts else
        [f"{r.draft_tokens} 12", f"{r.accepted} 6"],
        Gauges: lambda: [f"{n} {val}" for n, val in ((r.length, 2.5), (r.rate, 0.5)) if n],
        SkippedTokens: lambda: [f"{r.skipped} 6", f"{r.generated} 10"],
    }[type(r)]()
    names = {ln.split()[0] for ln in lines}
    lines += [f"{p}marker_total 1" for p in m.markers if not any(n.startswith(p) for n in names)]
    before = "\n".join(f"{ln.split()[0]} 0" for ln in lines if not isinstance(r, Gauges))
    return before + "\n", "\n".join(lines) + "\n"


def test_bench_reads_and_recognises_what_the_metrics_declaration_says(stack):
    from specplug.bench.metrics import detect_stack, parse_exposition, read_acceptance

    m = get_adapter(stack).metrics
    if m.acceptance is None:
        assert m.markers == () or detect_stack(parse_exposition("")) is None
        pytest.skip("declares no acceptance metrics (bench reports speed alone)")
    before, after = _exposition(m)
    acc = read_acceptance(parse_exposition(before), parse_exposition(after), stack=stack)
    assert acc is not None and acc.source == m.acceptance.source
    assert acc.accepted_tokens in (None, 6) and acc.mean_acceptance_length is not None
    assert detect_stack(parse_exposition(after)) == stack
    if m.timings is not None:
        t = [{m.timings.drafted: 12, m.timings.accepted: 6}]
        got = read_acceptance(None, None, timings=t, stack=stack)
        assert got is not None and got.source == m.timings.source and got.acceptance_rate == pytest.approx(0.5)


def test_the_launch_script_runs_the_argv_the_spec_states(stack):
    from specplug.rendering import render_plan

    a = get_adapter(stack)
    for v in edge_versions(a):
        method = first_method(a, v)
        if method is None or rendered(a, plan := plan_for(stack, v, method)) is None:
            continue
        r = render_plan(plan)
        assert r.spec.argv and all(arg in r.script or arg in r.files or "'" in arg or '"' in arg
                                   for arg in a.launch_argv(r.spec.argv)[1:]), v
        assert r.spec.stack == stack and (v is None or r.spec.stack_version == v)


QWEN_72B, QWEN_05B = "Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"  # one tokenizer; 152064 vs 151936 ids


def _vocab_problems(stack: str, version: str | None, target: str, drafter: str) -> list[str]:
    from specplug.validate import plan_problems

    plan = make_plan(stack, version, model=target, method="draft_model", drafter=drafter, k=3)
    return [p.message for p in plan_problems(plan) if p.key == "speculation.drafter" and "cannot draft" in p.message]


def test_the_declared_vocabulary_rules_decide_the_validators_verdict(stack):
    from specplug.stackcaps import vocab_bridge
    from specplug.validate import plan_problems

    a = get_adapter(stack)
    bridged = [v for v in edge_versions(a) if not a.accepts_mismatched_vocab(v) and vocab_bridge(a, v)]
    for v in bridged:  # drafts over the shared tokens with greedy draft sampling; sampled drafts are refused
        assert not _vocab_problems(stack, v, L8, QWEN_05B), v
        sampled = make_plan(stack, v, model=L8, method="draft_model", drafter=QWEN_05B, k=3, draft_sampling="probabilistic")
        assert any(p.key == "speculation.draft_sampling" for p in plan_problems(sampled)), v
    versions = [v for v in edge_versions(a) if not a.accepts_mismatched_vocab(v) and not vocab_bridge(a, v)]
    if not versions:
        pytest.skip("takes mismatched vocabularies at every version")
    for v in versions:
        other = _vocab_problems(stack, v, L8, QWEN_05B)  # another tokenizer altogether
        assert len(other) == 1 and other[0].endswith(f"; {a.vocab_mismatch}.") if a.vocab_mismatch else other, v
        padded = _vocab_problems(stack, v, QWEN_72B, QWEN_05B)  # the same tokenizer, padded apart by 128 ids
        assert bool(padded) == (a.vocab_slack is not None and a.vocab_slack < 128), (v, padded)


def test_tune_budgets_the_declared_launch_prior(stack):
    from specplug.tune.settings import TuneSettings
    from specplug.tune.trials import prior_estimator

    a = get_adapter(stack)
    assert isinstance(a.launch_prior_s, float) and a.launch_prior_s > 0
    settings = TuneSettings(concurrency=[1])
    assert prior_estimator(stack, settings, {1: 4}).launch_s == a.launch_prior_s
