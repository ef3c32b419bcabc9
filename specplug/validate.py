"""One validator for every command: what would make a plan fail on its stack, found before anything runs.

:func:`plan_problems` lists every problem of a :class:`~specplug.plan.Plan` (each with what would work);
:func:`validate_plan` raises :class:`InvalidPlan` (a StackError, so a SpecplugError: exit 1, no traceback)
carrying them all.
render, launch (dry runs included) and check call it; the rules are:

1. a separate draft model must share the target's vocabulary on the chosen stack (tokenizers.compatible, with
   what the adapter declares: its vocabulary slack and what it does with a mismatch), unless the adapter says
   that stack and version take mismatched vocabularies;
2. a drafting method needs k >= 1 (suffix excepted) and a schedule that drafts somewhere; the stack's own k and
   tree limits come from the adapter (vLLM: k above a checkpoint's MTP layers a multiple of them; SGLang: a
   tree's draft tokens within steps x topk + 1);
3. tensor parallel size must divide the attention heads, and the KV heads (or be a multiple of them: vLLM and
   SGLang replicate KV heads), for the target and for a separate draft model at the size it runs at; pipeline
   size may not exceed the layer count;
4. everything the stack's adapter refuses in render (``adapter.problems(plan, version)``: method support,
   per-version fields, schedules, precision), so render and validate run the same checks;
5. a combination the stack's compatibility table (specplug.compat) marks broken at this release (LoRA,
   structured output, a reasoning parser, pipeline parallelism ... with this method), with the row's source and
   the fix (a release, another method); ``launch --force`` (:func:`forcing`) lets these through, nothing else;
6. a lossy verifier (verification: fly) only with ``speculation.allow_lossy: true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from specplug.compat import (
    CONFIG_FEATURES,
    Finding,
    blocked,
    drafter_features,
    findings,
    model_features,
    needs_model,
    serve_features,
)
from specplug.config import LOSSY_VERIFICATION
from specplug.errors import SpecplugError, StackError
from specplug.stackcaps import compat_table
from specplug.stacks.protocol import Adapter, Problem
from specplug.stacks.registry import get_adapter

if TYPE_CHECKING:
    from specplug.capabilities import StackCapabilities
    from specplug.catalog import Model
    from specplug.plan import Plan

__all__ = ["InvalidPlan", "Problem", "draft_vocab_mismatch", "forcing", "overridden", "plan_features", "plan_problems", "validate_plan"]

# Stacks that shard attention heads across tensor-parallel ranks (llama.cpp splits layers; embedded is one device).
# Drafters worth naming: catalog models sharing the target's tokenizer, 1/200 to 1/6 of its size.
DRAFT_SIZE_RANGE = (1 / 200, 1 / 6)
MAX_SUGGESTIONS = 6
# Set while 'launch --force' runs: overridable problems (known-broken combinations) no longer refuse a plan.
_FORCED: ContextVar[bool] = ContextVar("specplug_forced", default=False)


@contextmanager
def forcing() -> Iterator[None]:
    """Within this block, :func:`validate_plan` lets known-broken combinations (rule 5) through: the user has read
    why and starts the plan anyway. Every other problem still refuses it."""
    token = _FORCED.set(True)
    try:
        yield
    finally:
        _FORCED.reset(token)


class InvalidPlan(StackError):
    """The plan cannot be served as asked on its stack; ``problems`` lists every reason and what would work.

    A StackError (so a SpecplugError, exit 1) but never a StackUnavailable: no fallback stands in for it."""

    def __init__(self, message: str, hint: str | None = None, problems: list[Problem] | None = None) -> None:
        super().__init__(message, hint)
        self.problems = list(problems or [])


def validate_plan(plan: Plan) -> None:
    """Raise :class:`InvalidPlan` with every problem of ``plan`` (nothing when it can be served)."""
    problems = [p for p in plan_problems(plan) if not (p.overridable and _FORCED.get())]
    if not problems:
        return
    where = f"{plan.model.name} on {plan.stack.name} {plan.stack.version or '(newest)'}"
    if len(problems) == 1:
        p = problems[0]
        raise InvalidPlan(p.message, p.hint, problems)
    lines = [f"The plan for {where} has {len(problems)} problems:"]
    for p in problems:
        lines.append(f"- {p.message}")
        if p.hint:
            lines.append(f"  fix: {p.hint}")
    raise InvalidPlan("\n".join(lines), "Change specplug.yaml (or the flags) as above and run again.", problems)


def overridden(plan: Plan) -> list[Problem]:
    """The known-broken combinations :func:`forcing` is letting through for ``plan`` (empty when not forcing)."""
    return [p for p in plan_problems(plan) if p.overridable] if _FORCED.get() else []


def plan_problems(plan: Plan) -> list[Problem]:
    """Every reason ``plan`` would fail on its stack and version, each with what would work (rules 1-4)."""
    try:
        adapter = get_adapter(plan.stack.name)
    except SpecplugError as exc:
        return [Problem(exc.message, exc.hint, key="stack.name")]
    version = plan.stack.version
    out: list[Problem] = []
    out += _draft_vocab_problems(plan, adapter)
    out += _k_problems(plan)
    out += _parallel_problems(plan, adapter)
    try:
        out += adapter.problems(plan, version)
    except SpecplugError as exc:  # a plugin that raises instead of listing: still one problem, not a crash
        out.append(Problem(exc.message, exc.hint))
    out += _compat_problems(plan, adapter)
    out += _lossy_problems(plan)
    return _unique(out)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.message not in seen:
            seen.add(p.message)
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------- rule 1


def _catalog_model(ref: str | None) -> Model | None:
    from specplug.catalog import get_model

    if not ref:
        return None
    try:
        return get_model(ref)
    except SpecplugError:
        return None  # outside the catalog and not a readable folder: nothing to compare


def target_model(plan: Plan) -> Model | None:
    """The plan's target as its facts were read (its folder, or its Hub id at the plan's revision); None where it
    cannot be read here."""
    return _catalog_model(plan.model.ref)


def draft_vocab_mismatch(plan: Plan) -> str | None:
    """Why the plan's separate draft model has another vocabulary than its target (None: the same, not a draft
    model, or a side that cannot be read here). The adapters read it to render a stack's vocabulary bridge."""
    from specplug.policy.tokenizers import compatible
    from specplug.stackcaps import declared

    s = plan.speculation
    if s.method != "draft_model" or not s.drafter:
        return None
    target = target_model(plan)
    draft = _catalog_model(s.drafter)
    if target is None or draft is None:
        return None
    verdict = compatible(target, draft, declared(plan.stack.name, plan.stack.version))
    return None if verdict.ok else verdict.reason or "the vocabularies differ"


def _draft_vocab_problems(plan: Plan, adapter: Adapter) -> list[Problem]:
    from specplug.stackcaps import declared, vocab_bridge

    s, version = plan.speculation, plan.stack.version
    why = draft_vocab_mismatch(plan)
    if why is None or adapter.accepts_mismatched_vocab(version):
        return []
    at = f"{adapter.display_name} {version or '(newest)'}"
    if vocab_bridge(adapter, version) and s.draft_sampling != "probabilistic":
        return []  # rendered with the stack's bridge (token-level intersection); the plan and the render say so
    target = target_model(plan)
    assert target is not None  # draft_vocab_mismatch read it
    names = compatible_drafters(target, declared(plan.stack.name, version))
    hint = (f"Drafters that share {target.hf_id}'s vocabulary: {', '.join(names)}." if names
            else f"No catalog drafter shares {target.hf_id}'s vocabulary; use a drafter-free method (ngram, suffix) or an EAGLE/MTP head.")
    if vocab_bridge(adapter, version):
        hint = (f"Leave speculation.draft_sampling unset (greedy): {at} drafts with another vocabulary only from the "
                f"draft's argmax. Or: {hint}")
    elif (since := _vocab_bridge_since(adapter)) is not None:
        hint += (f" Or render for {adapter.display_name} {since} or newer (stack.version), which drafts over the "
                 "token-level intersection of the two vocabularies with greedy draft sampling.")
    # The stack's own record of what a mismatch does there (specplug.compat), with its source.
    hint += "".join(f" {f.row.note} ({f.row.source})." for f in findings(
        compat_table(adapter).rows, version, s.method, {"draft_vocab_mismatch"}))
    lead = f"Draft model {s.drafter} cannot draft for {target.hf_id}: {why}"
    if vocab_bridge(adapter, version):
        lead += f"; {at} drafts across vocabularies with greedy draft sampling only, and draft_sampling is probabilistic"
    return [Problem(lead + ".", hint, key="speculation.draft_sampling" if vocab_bridge(adapter, version)
                    else "speculation.drafter")]


def _vocab_bridge_since(adapter: Adapter) -> str | None:
    """The first release where ``adapter`` drafts across vocabularies (None: none it knows)."""
    from specplug.stackcaps import vocab_bridge

    versions = getattr(adapter, "versions", None)
    return next((v for v in (versions() if callable(versions) else ()) if vocab_bridge(adapter, v)), None)


def compatible_drafters(target: Model, stack: StackCapabilities | str) -> list[str]:
    """Separate draft models for ``target`` on ``stack`` (its capabilities, or its name): catalog draft_model drafters
    for it, then catalog models of its tokenizer family 1/200 to 1/6 of its size (largest first), all passing the
    vocabulary check."""
    from specplug.catalog import drafters_for, get_model, models
    from specplug.policy.tokenizers import compatible
    from specplug.stackcaps import declared

    if isinstance(stack, str):
        stack = declared(stack)
    out: list[str] = []
    for d in drafters_for(target.hf_id, "draft_model"):
        try:
            ok = compatible(target, get_model(d.drafter_hf_id), stack).ok
        except SpecplugError:
            ok = True  # a listed drafter outside the models catalog: the drafters catalog vouches for it
        if ok and d.drafter_hf_id not in out:
            out.append(d.drafter_hf_id)
    if target.params_b and target.tokenizer_family:
        lo, hi = (target.params_b * f for f in DRAFT_SIZE_RANGE)
        family = [m for m in models() if m.tokenizer_family == target.tokenizer_family and m.hf_id != target.hf_id
                  and m.params_b is not None and lo <= m.params_b <= hi and compatible(target, m, stack).ok]
        for m in sorted(family, key=lambda m: -(m.params_b or 0)):
            if m.hf_id not in out:
                out.append(m.hf_id)
    return out[:MAX_SUGGESTIONS]


# ---------------------------------------------------------------------------------------------- rule 2


def _k_problems(plan: Plan) -> list[Problem]:
    s = plan.speculation
    if s.method == "none" or not s.schedule:
        return []
    if all(e.num_speculative_tokens == 0 for e in s.schedule):
        return [Problem(
            f"The per-batch-size schedule sets k=0 at every batch size: '{s.method}' would never draft.",
            "Give at least one batch range k >= 1, or set method 'none'.", key="speculation.schedule",
        )]
    return []


# ---------------------------------------------------------------------------------------------- rule 3


def _divisors_note(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and d <= 64)


def _parallel_problems(plan: Plan, adapter: Adapter) -> list[Problem]:
    tp, pp = plan.parallelism.tensor_parallel_size, plan.parallelism.pipeline_parallel_size
    if tp == 1 and pp == 1:
        return []
    model = target_model(plan)
    if model is None:
        return _draft_tp_problems(plan, tp, adapter)
    out: list[Problem] = []
    heads, kv = model.num_attention_heads, model.num_kv_heads
    if tp > 1 and adapter.shards_heads and heads:
        if heads % tp:
            out.append(Problem(
                f"Tensor parallel size {tp} does not divide {model.hf_id}'s {heads} attention heads.",
                f"Use a tensor parallel size that divides {heads} ({_divisors_note(heads)}), e.g. with --num-gpus.",
                key="serve.tensor_parallel_size",
            ))
        elif kv and not model.uses_mla and kv % tp and tp % kv:
            # KV heads are split when tp <= kv and replicated when tp is a multiple of kv; anything else fails.
            out.append(Problem(
                f"Tensor parallel size {tp} neither divides {model.hf_id}'s {kv} KV heads nor is a multiple of them.",
                f"Use a tensor parallel size that divides {kv} or is a multiple of {kv}, and divides {heads}.",
                key="serve.tensor_parallel_size",
            ))
    out += _draft_tp_problems(plan, tp, adapter)
    layers = model.num_layers
    if pp > 1 and layers and pp > layers:
        out.append(Problem(
            f"Pipeline parallel size {pp} is larger than {model.hf_id}'s {layers} layers.",
            f"Use a pipeline parallel size of at most {layers}.", key="serve.pipeline_parallel_size",
        ))
    return out


def _draft_tp_problems(plan: Plan, tp: int, adapter: Adapter) -> list[Problem]:
    """A separate draft model is sharded too: at draft_tensor_parallel_size where the stack takes one (unset: the
    target's size), else at the target's size; its heads must split as the target's do."""
    s = plan.speculation
    if s.method != "draft_model" or not s.drafter or adapter.draft_tp is None:
        return []
    own = adapter.draft_tp == "own"
    dtp = (s.draft_tensor_parallel_size or tp) if own else tp
    draft = _catalog_model(s.drafter)
    if dtp == 1 or draft is None or not draft.num_attention_heads:
        return []
    heads, kv = draft.num_attention_heads, draft.num_kv_heads
    if draft.splits_heads(dtp):
        return []
    hint = ("Set speculation.draft_tensor_parallel_size: 1 (the drafter on one GPU)" if own
            else "Pick a drafter whose heads divide by the tensor parallel size")
    return [Problem(
        f"The draft model {s.drafter} runs at tensor parallel size {dtp}, which does not split its {heads} attention"
        f" heads ({kv} KV heads).",
        hint + ".", key="speculation.draft_tensor_parallel_size" if own else "speculation.drafter",
    )]


# ---------------------------------------------------------------------------------------------- rule 5


def plan_features(plan: Plan, adapter: Adapter | None = None) -> frozenset[str]:
    """The features of specplug.compat that ``plan`` turns on (its serve options, workload, split and drafter; a flag
    in serve.extra_args only where the stack's table spells it)."""
    s = plan.speculation
    table = compat_table(adapter or get_adapter(plan.stack.name))
    on = (serve_features(plan.serve, plan.workload, plan.parallelism.pipeline_parallel_size, table.flags)
          | drafter_features(s.method, s.drafter))
    if needs_model(table.rows):  # the target's layers, read only where the stack has a row about them
        target = target_model(plan)
        on |= model_features(target)
    return on


def _compat_problems(plan: Plan, adapter: Adapter) -> list[Problem]:
    s = plan.speculation
    if not s.enabled:
        return []
    rows, version, on = compat_table(adapter).rows, plan.stack.version, plan_features(plan, adapter)
    return [
        Problem(f.message(adapter.display_name, version, s.method), _compat_fix(f, plan, adapter, on),
                key="speculation.method", overridable=True)
        for f in findings(rows, version, s.method, on, plan.model.hf_id) if f.refuses
    ]


def _compat_fix(f: Finding, plan: Plan, adapter: Adapter, on: frozenset[str]) -> str:
    """What would work instead: the release with the fix, the methods not known broken here, the feature off."""
    rows, version, model = compat_table(adapter).rows, plan.stack.version, plan.model.hf_id
    fixes = [f"render for {adapter.display_name} {f.row.fixed_in} or newer (stack.version)"] if f.row.fixed_in else []
    others = [m for m in adapter.supported_methods(version)
              if m != plan.speculation.method and blocked(rows, version, m, on, model) is None]
    if others:
        fixes.append(f"use another method ({', '.join(others[:6])}; 'speculation: auto' picks among them)")
    fixes += [f"turn off {f.row.describe(x)}" for x in f.row.features if x in CONFIG_FEATURES]
    text = "; or ".join(fixes)
    return text[:1].upper() + text[1:] + ". 'specplug launch --force' starts it anyway."


# ---------------------------------------------------------------------------------------------- rule 6


def _lossy_problems(plan: Plan) -> list[Problem]:
    s = plan.speculation
    if not s.enabled or s.verification not in LOSSY_VERIFICATION or s.allow_lossy:
        return []
    return [Problem(
        f"verification: {s.verification} is a lossy verifier: it accepts drafts the target would reject, so outputs "
        "differ from the target model's own (speculation is otherwise lossless).",
        "Set speculation.allow_lossy: true to accept that, or leave speculation.verification unset.",
        key="speculation.verification",
    )]
