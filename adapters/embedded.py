"""specplug's own runtime as a serving stack: ``python -m specplug.runtime.server``.

It is always there once ``specplug[runtime]`` is installed, serves on a CPU, and is the fallback that
``specplug launch STACK --fallback embedded`` (or ``fallback: embedded`` in specplug.yaml) starts when STACK is
missing or cannot run here. The runtime speculates with n-gram prompt lookup and with a separate draft model;
a plan asking for a technique it lacks is mapped to the nearest one it has, and the launch spec's notes say so
in plain words (the server itself then reports the technique it really runs on /v1/models and /health).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import ClassVar

from specplug.adapters._common import HUB_SECRETS, KV_16BIT, canon, precision, url
from specplug.adapters.vllm import COUNTERS as VLLM_COUNTERS

from specplug.argv import has_flag
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter
from specplug.stacks.metrics import StackMetrics
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage
from specplug.stacks.windows import Window

# What the runtime does natively.
METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("ngram", "0.1.0", source="specplug.runtime n-gram / prompt-lookup proposer"),),
    "draft_model": (Window("draft_model", "0.1.0", source="specplug.runtime draft-model proposer"),),
}
# What a plan may ask for that the runtime maps onto a native method, and why that is the closest.
MAPPED: dict[str, tuple[str, str]] = {
    "suffix": ("ngram", "suffix decoding drafts from text seen before; the embedded runtime does that with n-gram prompt lookup"),
    "lookahead": ("ngram", "lookahead drafts n-grams; the embedded runtime uses n-gram prompt lookup"),
    "ngram_gpu": ("ngram", "the embedded runtime's n-gram prompt lookup is the same proposer"),
    "eagle": ("ngram", "the embedded runtime has no EAGLE heads"),
    "eagle3": ("ngram", "the embedded runtime has no EAGLE-3 heads"),
    "medusa": ("ngram", "the embedded runtime has no Medusa heads"),
    "mlp_speculator": ("ngram", "the embedded runtime has no MLP speculator heads"),
    "mtp": ("ngram", "the embedded runtime does not run the model's MTP layers"),
    "dspark": ("ngram", "the embedded runtime has no DSpark drafters"),
}
DEFAULT_K = 4
# Modules the server imports; their presence (not an import, which would load torch) means installed.
RUNTIME_MODULES = ("torch", "transformers", "fastapi", "uvicorn")
API_KEY_VAR = "SPECPLUG_API_KEY"
PYTHON = "python3"  # in the rendered script; launch_argv swaps in this interpreter


def map_method(method: str) -> tuple[str, str | None]:
    """(method the runtime runs, a sentence explaining the mapping or None when it is native)."""
    if method in ("none", "ngram", "draft_model"):
        return method, None
    target, why = MAPPED.get(method, ("ngram", f"the embedded runtime has no '{method}' proposer"))
    return target, f"{why}, so '{method}' runs as {target} here (lossless; acceptance will differ from {method})."


class EmbeddedAdapter(BaseAdapter):
    name = "embedded"
    cost_profile = "embedded"  # its own row in policies/default.yaml
    vocab_mismatch = "the embedded runtime needs identical token ids"
    launch_prior_s = 30.0
    fixed_k_args = ("--no-pace",)  # the runtime otherwise picks each step's draft length itself
    display_name = "specplug embedded runtime"
    install_hint = "pip install 'specplug[runtime]'"
    method_table = METHODS
    max_batch = 16  # the server's --max-batch-size default (serve.max_num_seqs sets it)
    fallback_only = True  # the stand-in when no stack is installed, not a stack to prefer
    runs_on_cpu = True  # PyTorch on the host when there is no GPU
    # A joining prompt is fed in chunks inside the running batch's passes, where the lean decoder runs the target
    # (Llama-family layers); --prefill-chunk 0 turns it off.
    prefill_mixing = (Window("chunked prefill", source="runtime engine: prompts join in the decode pass"),)
    prefill_unmixing = (("--prefill-chunk", "0"),)
    unsupported: ClassVar[dict[str, str]] = {m: f"not native: {why}; rendered as {t}" for m, (t, why) in MAPPED.items()}
    oldest = "0.1.0"
    # The server speaks vLLM's counters, plus specplug: ones of its own that tell it apart.
    metrics = StackMetrics(markers=("vllm:", "specplug:"), acceptance=VLLM_COUNTERS)
    # No public image: compose builds one from this Dockerfile, at the specplug version that rendered it
    # ({workdir} is where deploy mounts the rendered files).
    image = StackImage(
        "specplug-embedded", "{version}", "/root/.cache/huggingface", needs_gpu=False,
        dockerfile="FROM python:3.11-slim\nRUN pip install --no-cache-dir 'specplug[runtime]=={version}'\n"
        "WORKDIR {workdir}\n",
    )

    def installed_version(self) -> str | None:
        from specplug import __version__

        missing = [m for m in RUNTIME_MODULES if importlib.util.find_spec(m) is None]
        return None if missing else __version__

    def runs_without_gpu(self, version: str | None) -> bool:
        return True

    def launch_argv(self, argv: list[str]) -> list[str]:
        # The server must run in the interpreter that has specplug[runtime], i.e. this one.
        return [sys.executable, *argv[1:]] if argv and argv[0] == PYTHON else list(argv)

    def fallback_plan(self, plan: Plan, reason: str) -> Plan:
        """The plan as the embedded runtime will run it, when it stands in for a stack that cannot start."""
        s = plan.speculation
        method, why = map_method(s.method)
        k = s.num_speculative_tokens or (DEFAULT_K if method != "none" else 0)
        drafter = s.drafter if method == "draft_model" else None
        reasons = [
            f"Fallback: {plan.stack.name} cannot start here ({reason.splitlines()[0]}), so specplug's embedded runtime "
            f"serves {plan.model.name} instead"
            + (f", with {method} speculation (k={k})." if method != "none" else ", without speculation."),
        ]
        if why:
            reasons.append(f"Technique: {why}")
        return plan.model_copy(
            update={
                "speculation": s.model_copy(
                    update={"method": method, "num_speculative_tokens": k if method != "none" else 0, "drafter": drafter,
                            "tree": None, "schedule": [], "draft_tensor_parallel_size": None}
                ),
                # The runtime is one process on one device: the stack's GPU layout no longer applies.
                "parallelism": plan.parallelism.model_copy(update={"tensor_parallel_size": 1, "pipeline_parallel_size": 1}),
                # ... and it serves the checkpoint as it is, with a cache in the model's dtype.
                "serve": plan.serve.model_copy(update={"quantization": None, "kv_cache_dtype": "auto"}),
                "reasons": reasons + list(plan.reasons),
            }
        )

    def method_problems(self, method: str, version: str | None) -> list[Problem]:
        return []  # every method runs: the ones it lacks are mapped to ngram, with a note (map_method)

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        out: list[Problem] = []
        tp, pp = plan.parallelism.tensor_parallel_size, plan.parallelism.pipeline_parallel_size
        if tp > 1 or pp > 1:
            out.append(Problem(
                f"The plan splits the model over {tp * pp} GPUs; the embedded runtime runs on one device.",
                "Plan with --num-gpus 1 for the embedded runtime, or launch a serving stack.",
                key="serve.tensor_parallel_size",
            ))
        p = precision(plan)
        if p.converts:
            out.append(Problem(
                f"The embedded runtime serves checkpoints as they are (16/32-bit weights), not as {p.served}.",
                "Leave serve.quantization unset, or launch a serving stack that quantizes (vLLM, SGLang: fp8).",
                key="serve.quantization",
            ))
        if p.kv_cache_dtype not in ("auto", *KV_16BIT):
            out.append(Problem(
                f"The embedded runtime keeps the KV cache in the model's dtype, not {p.kv_cache_dtype}.",
                "Set serve.kv_cache_dtype auto, or launch a serving stack with an fp8 cache.",
                key="serve.kv_cache_dtype",
            ))
        return out

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        method, why = map_method(c.method)
        if why:
            c.notes.append(why)
        model = plan.model.local_path or _model_arg(plan)
        argv = [PYTHON, "-m", "specplug.runtime.server", "--model", model, "--served-model-name", plan.model.name]
        if method != "none":
            k = c.k or DEFAULT_K
            argv += ["--method", method, "--num-speculative-tokens", str(k)]
            s = plan.speculation
            if method == "ngram":
                if s.prompt_lookup_min is not None:
                    argv += ["--prompt-lookup-min", str(s.prompt_lookup_min)]
                if s.prompt_lookup_max is not None:
                    argv += ["--prompt-lookup-max", str(s.prompt_lookup_max)]
            if method == "draft_model":
                if c.drafter:
                    argv += ["--drafter", c.drafter]
                else:
                    c.notes.append("No drafter in the plan: the runtime uses its default draft model for this model.")
            if any(e.num_speculative_tokens != k for e in s.schedule):
                c.notes.append(
                    f"The embedded runtime does not take the per-batch-size k schedule: it drafts up to k={k} and "
                    "picks each step's length from the pass costs it measures."
                )
            if s.tree is not None:
                c.notes.append("The embedded runtime drafts one chain, not a tree; the tree shape is ignored.")
        else:
            argv += ["--method", "none"]
        values = {
            "--host": c.host,
            "--port": str(c.port),
            "--max-batch-size": None if c.max_num_seqs is None else str(c.max_num_seqs),
            "--max-model-len": None if c.max_model_len is None else str(c.max_model_len),
            "--dtype": c.dtype,
            # The server keeps a prefix cache unless told not to, as vLLM does.
            "--prefix-cache-mb": "0" if plan.serve.prefix_caching is False else None,
        }
        for flag, v in values.items():
            if v is not None and not has_flag(c.extra_args, flag):
                argv += [flag, v]
        argv += c.extra_args
        env_from = {API_KEY_VAR: c.api_key_env} if c.api_key_env else {}
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            env={"HF_HUB_OFFLINE": "1", **c.env} if _packaged(plan) else dict(c.env),
            env_from=env_from,
            env_passthrough=list(HUB_SECRETS),
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )


def _model_arg(plan: Plan) -> str:
    """What the server's --model takes: a packaged model by its name, anything else by its hub id."""
    return plan.model.name if _packaged(plan) else plan.model.hf_id


def _packaged(plan: Plan) -> bool:
    try:
        from specplug.runtime.models import is_packaged  # light: no torch import
    except ImportError:
        return plan.model.name.lower().startswith("smollm2-135m")
    return bool(is_packaged(plan.model.name) or is_packaged(plan.model.hf_id))


adapter = EmbeddedAdapter()
