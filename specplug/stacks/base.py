"""The base adapter: version lookup, method support from a table, the checks every stack shares; and the lookups
of what is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from specplug.catalog.hub import named_revision
from specplug.compat import EMPTY, CompatTable, parse_table
from specplug.errors import StackError
from specplug.methods import DRAFTER_METHODS
from specplug.safetext import ENV_NAME
from specplug.stacks.metrics import NO_METRICS, StackMetrics
from specplug.stacks.protocol import (
    DEFAULT_COST_PROFILE,
    DEFAULT_LAUNCH_PRIOR_S,
    DEFAULT_VOCAB_MISMATCH,
    SET,
    SPEC_CONTROLS,
    LaunchSpec,
    Problem,
    StackImage,
    raise_problems,
)
from specplug.stacks.registry import stacks_with
from specplug.stacks.windows import (
    Window,
    describe_windows,
    pick_floor,
    spelling,
    version_in,
)
from specplug.versions import version_key

if TYPE_CHECKING:
    from specplug.plan import Plan


@cache
def load_compat(filename: str) -> CompatTable:
    """A built-in compatibility table, ``adapters/data/<filename>`` (package data of specplug.adapters)."""
    from importlib import resources

    text = resources.files("specplug.adapters").joinpath(f"data/{filename}").read_text(encoding="utf-8")
    return parse_table(text, filename)


class BaseAdapter:
    """Shared behaviour for the built-in adapters: version lookup, method support from a table, checks.

    A subclass sets the class attributes and implements :meth:`build` (plan -> LaunchSpec for a version). The
    method table maps each canonical method to the stack's spelling per version range; a method absent from
    the table is unsupported, with the reason in ``unsupported``.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    install_hint: ClassVar[str]
    distributions: ClassVar[tuple[str, ...]] = ()  # pip distributions whose version is the stack's version
    executables: ClassVar[tuple[str, ...]] = ()  # programs that start the server, looked up on PATH
    method_table: ClassVar[dict[str, tuple[Window, ...]]] = {}
    # Stack-specific controls specplug renders (name -> the stack's spelling per version range), listed by
    # 'specplug stacks' beside the schedule/cutoff/tree capabilities every adapter declares; the base adapter checks
    # the SPEC_CONTROLS ones for every stack.
    control_table: ClassVar[dict[str, tuple[Window, ...]]] = {}
    unsupported: ClassVar[dict[str, str]] = {}  # method -> why this stack can never do it
    oldest: ClassVar[str]  # oldest version this adapter renders for
    template_ext: ClassVar[str] = "sh"
    image: ClassVar[StackImage | None] = None  # what ``specplug deploy`` runs; None: the user names one
    trees: ClassVar[bool] = False  # drafts token trees (steps x topk, num_draft_tokens) for the methods that can
    spec_running_cap: ClassVar[int | None] = None  # running requests the stack allows by default when speculating
    max_batch: ClassVar[int | None] = None  # requests decoded together by default (None: as many as memory holds)
    # Where that default depends on the GPU: (least GiB, name fragments excluded, requests), first match wins.
    max_batch_rules: ClassVar[tuple[tuple[float, tuple[str, ...], int], ...]] = ()
    shards_heads: ClassVar[bool] = False  # tensor parallelism splits attention heads (so it must divide them)
    # Refuses to start unless the KV cache left beside the weights holds one request of max_model_len (unset: the
    # model's own maximum), instead of capping requests at what fits.
    reserves_full_context: ClassVar[bool] = False
    runs_on_cpu: ClassVar[bool] = False  # serves on the host's CPU when the machine has no GPU
    # Versions whose default scheduler runs a joining prefill inside the running batch's decode step (value: the
    # stack's name for it); elsewhere the running requests wait the whole prefill, and the load model says so.
    prefill_mixing: ClassVar[tuple[Window, ...]] = ()
    # serve.extra_args that turn that off: (flag, value), value None for the flag alone.
    prefill_unmixing: ClassVar[tuple[tuple[str, str | None], ...]] = ()
    # Flags alone that turn it back on after one of those (the later of the two counts).
    prefill_remixing: ClassVar[tuple[str, ...]] = ()
    fallback_only: ClassVar[bool] = False  # never chosen as the default stack, only named (or as launch's fallback)
    # How a separate draft model is sharded: "own" (speculation.draft_tensor_parallel_size, unset = the target's),
    # "target" (always the target's size), None (not sharded, or no draft models).
    draft_tp: ClassVar[str | None] = None
    # Whether the server can be told which Hub revision of the model to load (the adapter renders plan.model.revision),
    # and of a separate drafter named 'org/head@revision' (it renders Canon.drafter_revision).
    serves_revisions: ClassVar[bool] = False
    serves_drafter_revisions: ClassVar[bool] = False
    metrics: ClassVar[StackMetrics] = NO_METRICS  # where /metrics (or responses) show acceptance; see StackMetrics
    # The policy's stack row that costs it when the policy has none under its name (a vLLM fork: "vllm").
    cost_profile: ClassVar[str] = DEFAULT_COST_PROFILE
    # Drafter checkpoint formats (catalog ``format``, e.g. "pard") the stack drafts all k tokens of in ONE forward,
    # per version range: the cost model charges such a drafter one forward of k tokens instead of k forwards.
    parallel_drafting: ClassVar[dict[str, tuple[Window, ...]]] = {}
    # What the stack does with a separate draft model whose vocabulary differs (the end of a mismatch message), and
    # the largest vocab-size difference it takes between a draft and a target of one tokenizer (padded embeddings;
    # None: any). The validator and the policy read both through specplug.capabilities.
    vocab_mismatch: ClassVar[str] = DEFAULT_VOCAB_MISMATCH
    vocab_slack: ClassVar[int | None] = None
    launch_prior_s: ClassVar[float] = DEFAULT_LAUNCH_PRIOR_S  # tune's start-to-healthy prior, until it measures one
    # Serve arguments that make the stack draft exactly the configured k every step (tune measures step cost per
    # k); a stack that never changes k on its own needs none.
    fixed_k_args: ClassVar[tuple[str, ...]] = ()
    # Its compatibility table (specplug.compat): what breaks speculation with LoRA, structured output ... per
    # release, and the defaults it changed. A built-in names its file in adapters/data; a plugin overrides
    # compatibility() to read its own.
    compat_file: ClassVar[str | None] = None

    def compatibility(self) -> CompatTable:
        return load_compat(self.compat_file) if self.compat_file else EMPTY

    # -- versions --------------------------------------------------------------------------------------
    def installed_version(self) -> str | None:
        return distribution_version(self.distributions, self.executables)

    def runs_without_gpu(self, version: str | None) -> bool:
        """True when the installed build serves on a CPU (a CPU build of the stack, or a CPU-first stack)."""
        return False

    def known_version(self, version: str | None) -> None:
        pick_floor(version, [self.oldest])

    # How the stack spans several nodes (named in messages); None: it serves from one node.
    multi_node: ClassVar[str | None] = None

    def node_scripts(self, argv: list[str], nodes: int, gpus_per_node: int, leader: str, rank: str) -> tuple[str, str]:
        """(leader, worker) shell scripts that serve ``argv`` across ``nodes`` nodes, for a stack with ``multi_node``.

        ``leader`` and ``rank`` are shell expressions for the leader's address and this node's index.
        """
        raise StackError(f"{self.display_name} serves from one node.", "Pick GPUs with more memory so one node fits.")

    def supports_schedule(self, version: str | None) -> bool:
        """Whether the stack can switch draft length per running batch size (vLLM's per-batch schedule)."""
        return False

    def schedule_cutoff(self, version: str | None) -> bool:
        """Whether the stack, without a schedule, renders a schedule's k=0 top as an on/off threshold (TensorRT-LLM's
        max_concurrency): k stays fixed below it."""
        return False

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        """Methods whose draft length switches per running batch size at ``version``: every offered method where the
        stack's schedule is method-blind (``supports_schedule``), none otherwise; adapters override for a subset."""
        return frozenset(self.supported_methods(version)) if self.supports_schedule(version) else frozenset()

    def mixes_prefill(self, version: str | None) -> bool:
        """Whether a joining request's prefill rides in the running batch's decode step at ``version``."""
        return any(version_in(version, w.since, w.until) for w in self.prefill_mixing)

    def parallel_draft_formats(self, version: str | None) -> frozenset[str]:
        """Drafter formats drafted all k tokens at once at ``version`` (read from ``parallel_drafting``)."""
        return frozenset(f for f in self.parallel_drafting if spelling(self.parallel_drafting, f, version) is not None)

    # -- methods ---------------------------------------------------------------------------------------
    def methods(self, version: str | None) -> dict[str, str | None]:
        from specplug.config import METHODS

        out: dict[str, str | None] = {}
        for m in METHODS:
            if m == "none":
                continue
            out[m] = self.method_reason(m, version)
        return out

    def method_reason(self, method: str, version: str | None) -> str | None:
        """None when ``method`` works at ``version``, else why not (with the versions that have it)."""
        if method == "none":
            return None
        if method in self.unsupported:
            return self.unsupported[method]
        windows = self.method_table.get(method)
        if not windows:
            return f"{self.display_name} has no '{method}' speculation."
        if spelling(self.method_table, method, version) is None:
            return f"'{method}' needs {self.display_name} {describe_windows(windows)} (rendering for {version or 'the newest known'})."
        return None

    def controls(self, version: str | None) -> dict[str, str | None]:
        """Controls specplug renders for this stack -> None when available at ``version``, else why not."""
        out: dict[str, str | None] = {
            "schedule": None if self.supports_schedule(version) or self.schedule_methods(version)
            else "no per-batch-size draft length",
            "cutoff": None if self.schedule_cutoff(version) or self.supports_schedule(version)
            else "no batch-size threshold that stops speculation",
            "trees": None if self.trees else "drafts chains only",
        }
        for name, windows in self.control_table.items():
            out[name] = None if spelling(self.control_table, name, version) else f"needs {describe_windows(windows)}"
        return out

    def versions(self) -> list[str]:
        """The releases where what this adapter renders changes (window boundaries), oldest first."""
        found = {self.oldest}
        for table in (self.method_table, self.control_table):
            for windows in table.values():
                found.update(v for w in windows for v in (w.since, w.until) if v)
        return sorted((v for v in found if version_key(v) >= version_key(self.oldest)), key=version_key)

    def supported_methods(self, version: str | None) -> list[str]:
        return [m for m, why in self.methods(version).items() if why is None]

    def method_problems(self, method: str, version: str | None) -> list[Problem]:
        if method == "none":
            return []
        why = self.method_reason(method, version)
        if why is None:
            return []
        ok = self.supported_methods(version)
        return [
            Problem(
                f"{self.display_name} {version or '(newest)'} cannot run '{method}': {why}",
                f"Supported there: {', '.join(ok) if ok else 'none'}. Pick one with --method, or another stack.",
                key="speculation.method",
            )
        ]

    def require_method(self, method: str, version: str | None) -> Window | None:
        """The stack spelling for ``method`` at ``version``; StackError listing what works when unsupported."""
        if method == "none":
            return None
        why = self.method_reason(method, version)
        if why is not None:
            ok = self.supported_methods(version)
            raise StackError(
                f"{self.display_name} {version or '(newest)'} cannot run '{method}': {why}",
                f"Supported there: {', '.join(ok) if ok else 'none'}. Pick one with --method, or another stack.",
            )
        return spelling(self.method_table, method, version)

    # -- rendering -------------------------------------------------------------------------------------
    def render(self, plan: Plan) -> LaunchSpec:
        self.known_version(plan.stack.version)
        # The same checks specplug.validate reports: build() may then assume a plan it can serve.
        raise_problems(self.problems(plan, plan.stack.version))
        return self.render_valid(plan)

    def render_valid(self, plan: Plan) -> LaunchSpec:
        version = plan.stack.version
        spec = self.build(plan, version)
        spec.stack = self.name
        spec.stack_version = version
        return spec

    def problems(self, plan: Plan, version: str | None) -> list[Problem]:
        """Every reason :meth:`render` would refuse ``plan`` at ``version`` (empty: it renders).

        The base checks what every built-in stack needs (a known version, the method, the canonical fields);
        an adapter adds its own in :meth:`stack_problems`."""
        try:
            self.known_version(version)
        except StackError as exc:
            return [Problem(exc.message, exc.hint, key="stack.version")]
        method = self.method_problems(plan.speculation.method, version)
        if method:
            return method  # the stack's own checks assume a method it runs
        out = canon_problems(plan, self.display_name)
        if plan.model.revision and not self.serves_revisions:
            m = plan.model
            out.append(Problem(
                f"The plan serves {m.name} (commit {m.revision}), and {self.display_name} cannot be told a Hub "
                "revision: it would load the repository's default branch.",
                f"Download that revision (hf download {m.hf_id} --revision {m.revision} --local-dir DIR) and plan "
                "with what it holds (--model DIR, or the .gguf file in it), or name the model without a revision.",
                key="model",
            ))
        drafter = plan.speculation.drafter
        if drafter and (at := named_revision(drafter)) and not self.serves_drafter_revisions:
            out.append(Problem(
                f"The drafter {drafter} is named at revision {at}, and {self.display_name} cannot be told a drafter's "
                "revision: it would load the drafter's default branch.",
                f"Download that revision (hf download {drafter.partition('@')[0]} --revision {at} --local-dir DIR) and "
                f"pass --drafter DIR, or name the drafter without '@{at}'.",
                key="speculation.drafter",
            ))
        for (name, value), (control, instead) in SPEC_CONTROLS.items():
            given = getattr(plan.speculation, name)
            if (given is None if value == SET else given != value) or spelling(self.control_table, control, version):
                continue
            ws = self.control_table.get(control)
            out.append(Problem(
                f"{self.display_name} {version or '(newest)'} {instead}"
                + (f" ({name}: {given} needs {describe_windows(ws)})." if ws else f" (no {name}: {given})."),
                f"Leave speculation.{name} unset"
                + (", or render for a version that has it." if ws else f", or use {stacks_with(control)}."),
                key=f"speculation.{name}",
            ))
        try:
            out += self.stack_problems(plan, version)
        except StackError as exc:  # a stack check that needs the canonical fields sane: they are reported above
            if not out:
                out.append(Problem(exc.message, exc.hint))
        return out

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        """This stack's own reasons to refuse ``plan`` (default: none)."""
        return []

    def accepts_mismatched_vocab(self, version: str | None) -> bool:
        """Whether a separate draft model may have another vocabulary than the target (default: no)."""
        return False

    def vocab_bridge(self, version: str | None) -> str | None:
        """How the stack drafts across vocabularies at ``version`` when told to (default: it cannot); see the
        protocol."""
        return None

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:  # pragma: no cover - abstract
        raise NotImplementedError

    def template_name(self, version: str | None, ext: str | None = None) -> str | None:
        """``<stack>/<floor>.<ext>.j2`` for the highest template floor not above ``version`` (None: no
        template of that kind for this stack)."""
        from specplug.templating import list_templates

        suffix = f".{ext or self.template_ext}.j2"
        floors = {}
        for n in list_templates(f"{self.name}/"):
            base = n.rsplit("/", 1)[-1]
            if base.endswith(suffix):
                floors[base[: -len(suffix)]] = n
        if not floors:
            return None
        return floors[pick_floor(version, list(floors))]

    def launch_argv(self, argv: list[str]) -> list[str]:
        """The argv to start here: a chance to point a generic program (``python3``) at the stack's own."""
        return argv

    def fallback_plan(self, plan: Plan, reason: str) -> Plan:
        """``plan`` as this stack runs it when it stands in for one that cannot start (default: unchanged)."""
        return plan


# ---------------------------------------------------------------------------------------------- lookups


def _site_packages(executable: str) -> list[Path]:
    """site-packages of the virtual environment (or prefix) an executable on PATH belongs to."""
    prefix = Path(executable).parent.parent  # no resolve(): venv bin/ entries are often symlinks out
    return sorted(prefix.glob("lib/python3*/site-packages")) + sorted(prefix.glob("lib64/python3*/site-packages"))


def distribution_version(names: tuple[str, ...], executables: tuple[str, ...] = ()) -> str | None:
    """Installed version of the first of ``names``: in this environment, else in the environment of one of
    ``executables`` found on PATH (a stack kept in its own venv). Reads metadata only, never imports."""
    from importlib import metadata

    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    for exe in executables:
        path = shutil.which(exe)
        if not path:
            continue
        sps = [str(p) for p in _site_packages(path)]
        if not sps:
            continue
        for n in names:
            for dist in metadata.distributions(path=sps):
                if _norm(dist.metadata.get("Name") or "") == _norm(n):
                    return dist.version
    return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def program_output(argv: list[str], timeout: float = 20.0) -> str | None:
    """stdout+stderr of a short-lived program (``--version``/``--help``), or None when it cannot run."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout or "") + (proc.stderr or "")


def canon_problems(plan: Plan, display_name: str) -> list[Problem]:
    """What is wrong with the plan's canonical fields on any stack (render refuses all of these)."""
    s, serve = plan.speculation, plan.serve
    out: list[Problem] = []
    if s.method != "none" and s.num_speculative_tokens <= 0 and s.method != "suffix":
        out.append(Problem(
            f"The plan uses '{s.method}' with num_speculative_tokens={s.num_speculative_tokens}: nothing would be drafted.",
            "Set num_speculative_tokens (-k) to 1 or more, or method 'none'.",
            key="speculation.num_speculative_tokens",
        ))
    if serve.api_key_env is not None and not ENV_NAME.fullmatch(serve.api_key_env):
        out.append(Problem(
            f"serve.api_key_env must name an environment variable, got {serve.api_key_env!r}.",
            "Put the key in a variable (export MY_KEY=...) and set api_key_env: MY_KEY; never the key itself.",
            key="serve.api_key_env",
        ))
    if s.method in DRAFTER_METHODS and not s.drafter:
        out.append(Problem(
            f"'{s.method}' on {display_name} needs a drafter (draft model or head), and the plan has none.",
            "Pass --drafter HF_ID_OR_FOLDER, or pick a drafter-free method such as ngram.",
            key="speculation.drafter",
        ))
    for k in serve.env:
        if not ENV_NAME.fullmatch(k):
            out.append(Problem(f"serve.env has an invalid variable name {k!r}.", "Use letters, digits and _.", key="serve.env"))
    lo, hi = s.prompt_lookup_min, s.prompt_lookup_max
    if lo is not None and hi is not None and lo > hi:
        out.append(Problem(
            f"prompt_lookup_min ({lo}) is larger than prompt_lookup_max ({hi}).",
            "Make prompt_lookup_min <= prompt_lookup_max.",
            key="speculation.prompt_lookup_min",
        ))
    return out
