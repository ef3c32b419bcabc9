"""llama.cpp: ``llama-server -m MODEL.gguf`` with the old ``--draft-*`` or the new ``--spec-*`` flag generation.

Versions are llama.cpp build numbers (``b10576``). The new generation is confirmed at b10576 (a 2026-08 audit of
llama.cpp's common/arg.cpp); build b8955 (2026-05, llama.cpp PR #22673) still took ``--draft-min/--draft-max``.
A build that reports no number (``build 0``, e.g. compiled from a vendored tree) is placed by probing
``--help``: ``--spec-draft-n-max`` means the new generation.
"""

from __future__ import annotations

import re
from typing import ClassVar

from specplug.adapters._common import (
    Canon,
    Precision,
    canon,
    gguf_types,
    precision,
    require_drafter,
    url,
)

from specplug.argv import has_flag
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter, program_output
from specplug.stacks.metrics import ResponseTimings, StackMetrics, spec_decode_counters
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage
from specplug.stacks.windows import Window, spelling, version_at_least

NEW_FLAGS_SINCE = "b10576"
OLD_FLAGS_SINCE = "b3000"

METHODS: dict[str, tuple[Window, ...]] = {
    "draft_model": (Window("-md", OLD_FLAGS_SINCE, NEW_FLAGS_SINCE), Window("draft-simple", NEW_FLAGS_SINCE)),
    # Earlier 2026 builds had --spec-type ngram-* with shared --spec-ngram-size-* knobs (since removed); only
    # the per-type knobs of the new generation are rendered.
    "ngram": (Window("ngram-simple", NEW_FLAGS_SINCE),),
    "mtp": (Window("draft-mtp", NEW_FLAGS_SINCE),),
    "eagle3": (Window("draft-eagle3", NEW_FLAGS_SINCE, source="sidecar GGUF naming unconfirmed"),),
    # DFlash (llama.cpp PR #22105, merged 2026-04): a converted DFlash GGUF as the draft model. The spelling is
    # from published llama-server command lines of upstream builds; common/arg.cpp itself was not read.
    "dflash": (Window("draft-dflash", NEW_FLAGS_SINCE, source="PR #22105; spelling from users' command lines"),),
}
UNSUPPORTED = {
    "eagle": "llama.cpp has no EAGLE-1/2 heads; EAGLE-3 sidecars run with --spec-type draft-eagle3.",
    "medusa": "llama.cpp has no Medusa heads.",
    "dspark": "llama.cpp has no DSpark drafters; its block drafter is DFlash (--spec-type draft-dflash).",
    "mlp_speculator": "llama.cpp has no MLP speculators.",
    "suffix": "llama.cpp has no suffix decoding; its draft-free methods are the ngram-* types.",
    "ngram_gpu": "llama.cpp has no GPU n-gram proposer (vLLM's ngram_gpu); its draft-free methods are the ngram-* types "
                 "(method ngram).",
    "lookahead": "llama.cpp's lookahead example is not part of llama-server.",
}

# canonical field -> flag, per generation
OLD = {"drafter": "-md", "drafter_hf": "-hfrd", "k": "--draft-max", "k_min": "--draft-min", "draft_ngl": "-ngld",
       "p_min": "--draft-p-min"}
NEW = {
    "spec_type": "--spec-type",
    "drafter": "--spec-draft-model",
    "drafter_hf": "--spec-draft-hf",
    "k": "--spec-draft-n-max",
    "k_min": "--spec-draft-n-min",
    "draft_ngl": "--spec-draft-ngl",
    "p_min": "--spec-draft-p-min",
    "ngram_n": "--spec-ngram-simple-size-n",
    "ngram_m": "--spec-ngram-simple-size-m",
}
SERVE_FLAGS = {
    "host": "--host",
    "port": "--port",
    "ctx": "-c",
    "parallel": "-np",
    "ngl": "-ngl",
}
# Offload everything: llama.cpp clamps the layer count to what the model has.
ALL_LAYERS = "999"
# Spec types whose drafter proposes token by token and stops early below --spec-draft-p-min (a DFlash block and the
# n-gram types have no such stop).
EARLY_STOP_TYPES = ("draft-simple", "draft-mtp", "draft-eagle3")


def _is_gguf_path(s: str) -> bool:
    return s.lower().endswith(".gguf")


# llama.cpp loads GGUF files; '-hf' takes a GGUF repository, optionally with ':QUANT'. Publishers name their
# GGUF repositories '<model>-GGUF' by convention, so a plain Hugging Face id is pointed there, with a note.
GGUF_REPO_SUFFIX = "-GGUF"
QUANT_TAGS = {"q4": "Q4_K_M", "q5": "Q5_K_M", "q8": "Q8_0", "int4": "Q4_K_M", "int8": "Q8_0"}


def _model_args(ref: str, local_flag: str, hf_flag: str, quant: str | None, notes: list[str]) -> list[str]:
    """-m for a .gguf path (or bare name), else -hf with the GGUF repository for that model id (':QUANT' when
    ``quant`` names the GGUF type to fetch)."""
    if _is_gguf_path(ref) or "/" not in ref:
        return [local_flag, ref]
    repo = ref.split(":", 1)[0]
    if not repo.upper().endswith(GGUF_REPO_SUFFIX):
        repo += GGUF_REPO_SUFFIX
        notes.append(
            f"llama.cpp needs GGUF weights: {ref} is fetched from {repo} (the publisher's GGUF repository by "
            "convention); pass --model/--drafter with a .gguf path or a GGUF repository id to choose another."
        )
    quant = ref.split(":", 1)[1] if ":" in ref else quant
    return [hf_flag, f"{repo}:{quant}" if quant else repo]


OLD_FLAGS_SINCE_NUM = int(OLD_FLAGS_SINCE.lstrip("b"))

# A GGUF type as publishers write it in file names and '-hf REPO:QUANT' tags (qwen2.5-32b-q4_k_m.gguf, :Q4_K_M).
GGUF_TYPE_IN_NAME = re.compile(r"(?i)(?<![a-z0-9])(i?q\d_(?:k(?:_[sml])?|[01]|xxs|xs|s|m|nl)|bf16|f16|f32)(?![a-z0-9])")
KV_FLAGS = ("--cache-type-k", "--cache-type-v")
# canonical serve.kv_cache_dtype -> the --cache-type-k/-v value (common/arg.cpp kv_cache_types: f32 f16 bf16 q8_0
# q4_0 q4_1 iq4_nl q5_0 q5_1; f16 is the default, so auto and float16 render nothing). llama.cpp has no fp8
# cache: "fp8" (one byte a value) becomes q8_0, its 8-bit cache (8.5 bits a value).
KV_CACHE_TYPES: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("q8_0", OLD_FLAGS_SINCE, source="quantized KV cache since llama.cpp PR #4312 (Dec 2023)"),),
    "bfloat16": (Window("bf16", NEW_FLAGS_SINCE, source="bf16 in kv_cache_types of current common/arg.cpp; older builds unconfirmed"),),
}


def gguf_type_of(name: str) -> str | None:
    """The GGUF type a file name or '-hf' tag names (lower case, as weight_formats.csv spells it), or None."""
    found = GGUF_TYPE_IN_NAME.findall(name.rsplit("/", 1)[-1])
    return found[-1].lower() if found else None


def precision_problems(plan: Plan, version: str | None) -> list[Problem]:
    p = precision(plan)
    out: list[Problem] = []
    types = gguf_types()
    model = plan.model.local_path or plan.model.hf_id
    if plan.serve.quantization and p.served_kind != "gguf":
        out.append(Problem(
            f"llama.cpp serves GGUF files; serve.quantization {p.served} is not a GGUF type.",
            f"Use one of {', '.join(types)} (or leave it unset), or serve {p.served} with vLLM, SGLang or TensorRT-LLM.",
            key="serve.quantization",
        ))
    elif plan.serve.quantization:
        have = gguf_type_of(model.split(":", 1)[1] if (":" in model and not _is_gguf_path(model)) else model)
        if have is not None and have != p.served:
            out.append(Problem(
                f"The model {model} is a {have} GGUF, but serve.quantization asks for {p.served}.",
                f"Point model at the {p.served} file (…-{p.served.upper()}.gguf), or set serve.quantization {have}.",
                key="serve.quantization",
            ))
    kv = p.kv_cache_dtype
    if kv not in ("auto", "float16") and spelling(KV_CACHE_TYPES, kv, version) is None:
        ok = ["auto", "float16"] + [d for d in KV_CACHE_TYPES if spelling(KV_CACHE_TYPES, d, version)]
        why = ("it has no fp8 encodings; serve.kv_cache_dtype fp8 renders its 8-bit q8_0 cache" if kv.startswith("fp8_")
               else f"bf16 caches need build {NEW_FLAGS_SINCE} or newer")
        out.append(Problem(f"llama.cpp {version or '(newest)'} cannot keep the KV cache as {kv}: {why}.",
                           f"serve.kv_cache_dtype there: {', '.join(ok)}.", key="serve.kv_cache_dtype"))
    return out


def _quant_tag(p: Precision, plan: Plan) -> str | None:
    """The '-hf REPO:QUANT' tag for the served GGUF type (None: llama.cpp's own pick)."""
    if p.served_kind == "gguf":  # asked for, or the checkpoint's own GGUF type
        return p.served.upper()
    return QUANT_TAGS.get((plan.serve.dtype or "").lower())


def _kv_args(p: Precision, version: str | None, extra: list[str], notes: list[str]) -> list[str]:
    w = spelling(KV_CACHE_TYPES, p.kv_cache_dtype, version) if p.kv_cache_dtype not in ("auto", "float16") else None
    if w is None:
        return []
    out: list[str] = []
    for flag in KV_FLAGS:
        if not has_flag(extra, flag):
            out += [flag, w.value]
    if w.value == "q8_0":
        notes.append("KV cache fp8 is served as llama.cpp's q8_0 cache (8.5 bits a value; llama.cpp has no fp8 cache).")
        if not version_at_least(version or NEW_FLAGS_SINCE, NEW_FLAGS_SINCE):
            notes.append("A quantized V cache needs flash attention: add --extra-arg -fa if this build does not turn it on itself.")
    return out


class LlamaCppAdapter(BaseAdapter):
    name = "llamacpp"
    compat_file = "compat_llamacpp.yaml"  # what breaks speculation per release (specplug.compat)
    cost_profile = "llamacpp"  # its own row in policies/default.yaml
    vocab_mismatch = ("llama-server refuses drafts whose vocab type, special tokens or token texts differ (vocab sizes may "
                      "differ by up to 128)")
    vocab_slack = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE in common/speculative.cpp
    launch_prior_s = 30.0
    display_name = "llama.cpp (llama-server)"
    install_hint = "build llama-server from https://github.com/ggml-org/llama.cpp (or: scripts/stack_envs.sh llamacpp)"
    executables = ("llama-server",)
    method_table = METHODS
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = OLD_FLAGS_SINCE
    # update_slots puts the generating slots' sampled tokens in the batch first, then fills it with pending prompts.
    prefill_mixing = (Window("continuous batching", source="server update_slots"),)
    prefill_unmixing = (("--no-cont-batching", None), ("-nocb", None))  # common/arg.cpp: cont_batching = false
    prefill_remixing = ("--cont-batching", "-cb")  # cont_batching = true
    # CUDA server images are published per build number as server-cuda-bNNNN.
    image = StackImage("ghcr.io/ggml-org/llama.cpp", "server-cuda-b{version}", "/root/.cache/llama.cpp",
                       ("LLAMA_CACHE", "HF_HOME"), (("llama-server", "/app/llama-server"),), version_prefix="b")
    # vLLM's counter names under llamacpp: with --metrics (rendered); each response's timings say it too.
    metrics = StackMetrics(
        markers=("llamacpp:",),
        acceptance=spec_decode_counters("llamacpp", "llama.cpp counters"),
        timings=ResponseTimings("llama.cpp response timings", "draft_n", "draft_n_accepted"),
    )

    def installed_version(self) -> str | None:
        out = program_output(["llama-server", "--version"])
        if out is None:
            return None
        m = re.search(r"build[: ]+(\d+)", out)
        # Builds from a source tarball (no git history) report build 0 or 1: ask --help which flags it has.
        if m and int(m.group(1)) > OLD_FLAGS_SINCE_NUM:
            return f"b{m.group(1)}"
        helptext = program_output(["llama-server", "--help"]) or ""
        # No usable build number: name the oldest build of the flag generation the binary speaks.
        if "--spec-draft-n-max" in helptext:
            return f"{NEW_FLAGS_SINCE}+help"
        return f"{OLD_FLAGS_SINCE}+help"

    def runs_without_gpu(self, version: str | None) -> bool:
        return True  # llama.cpp serves on CPUs as a matter of course

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        out = precision_problems(plan, version)
        return out

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        new = version is None or version_at_least(version, NEW_FLAGS_SINCE)
        p = precision(plan)
        argv = ["llama-server"]
        argv += _model_args(c.model, "-m", "-hf", _quant_tag(p, plan), c.notes)
        if plan.serve.quantization and _is_gguf_path(c.model) and gguf_type_of(c.model) is None:
            c.notes.append(f"{c.model} does not name its GGUF type; serve.quantization expects a {p.served} file.")
        # -ngl is harmless on a CPU-only build (no GPU backend to offload to)
        gpu = plan.hardware.num_gpus > 0
        values = {
            "host": c.host,
            "port": c.port,
            "ctx": c.max_model_len,
            "parallel": c.max_num_seqs,
            "ngl": ALL_LAYERS if gpu else None,
        }
        for key, flag in SERVE_FLAGS.items():
            v = values[key]
            if v is not None and not has_flag(c.extra_args, flag):
                argv += [flag, str(v)]
        if not has_flag(c.extra_args, "--metrics"):
            argv.append("--metrics")  # Prometheus /metrics, where the spec-decode counters live
        argv += _kv_args(p, version, c.extra_args, c.notes)
        if c.tp > 1:
            c.notes.append("llama.cpp splits layers across visible GPUs itself; tensor parallel size is not rendered.")
        env_from: dict[str, str] = {}
        if c.api_key_env:
            env_from["LLAMA_API_KEY"] = c.api_key_env  # llama-server reads it; no key in argv
        if c.speculating:
            w = self.require_method(c.method, version)
            assert w is not None
            argv += self._new(plan, c, w.value, gpu) if new else self._old(plan, c, gpu)
        argv += c.extra_args
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            env=dict(c.env),
            env_from=env_from,
            env_passthrough=["HF_TOKEN"],
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )

    def _drafter_args(self, c: Canon, flags: dict[str, str], method: str) -> list[str]:
        d = require_drafter(c, "llama.cpp", method)
        return _model_args(d, flags["drafter"], flags["drafter_hf"], QUANT_TAGS.get((c.dtype or "").lower()), c.notes)

    def _pinned_p_min(self, c: Canon, flag: str) -> list[str]:
        """The draft early-stop threshold the plan assumes, stated explicitly: llama.cpp moved its default (0.75 ->
        0.0 in b9235), so an upgrade would otherwise change how many tokens are drafted (compat_llamacpp.yaml)."""
        pinned = self.compatibility().default("draft_p_min")
        if pinned is None or has_flag(c.extra_args, OLD["p_min"], NEW["p_min"]):
            return []
        c.notes.append(f"{flag} {pinned.assumed} is rendered explicitly: llama.cpp changed its default from {pinned.before} "
                       f"to {pinned.after} in {pinned.changed_in} ({pinned.source.split(' ')[0]}); the plan predicts k drafts "
                       "every step, which is what this value does.")
        return [flag, str(pinned.assumed)]

    def _old(self, plan: Plan, c: Canon, gpu: bool) -> list[str]:
        out = self._drafter_args(c, OLD, c.method) + [OLD["k"], str(c.k), OLD["k_min"], "0"]
        out += self._pinned_p_min(c, OLD["p_min"])
        if gpu:
            out += [OLD["draft_ngl"], ALL_LAYERS]
        return out

    def _new(self, plan: Plan, c: Canon, spec_type: str, gpu: bool) -> list[str]:
        s = plan.speculation
        # Nothing drafts without --spec-type, even with a draft model loaded (stacks-on-cpu.md 4).
        out = [NEW["spec_type"], spec_type]
        if spec_type == "ngram-simple":
            n = s.prompt_lookup_max or s.prompt_lookup_min or 3
            out += [NEW["ngram_n"], str(n), NEW["ngram_m"], str(c.k)]
            return out
        if spec_type in ("draft-simple", "draft-eagle3", "draft-dflash") or c.drafter:
            out += self._drafter_args(c, NEW, c.method)
        out += [NEW["k"], str(c.k), NEW["k_min"], "0"]
        if spec_type in EARLY_STOP_TYPES:
            out += self._pinned_p_min(c, NEW["p_min"])
        if gpu and spec_type != "draft-mtp":
            out += [NEW["draft_ngl"], ALL_LAYERS]
        return out

    def check_help(self, helptext: str, argv: list[str]) -> list[str]:
        """Flags in ``argv`` that a build's ``--help`` does not list (used by preflight and the stack tests)."""
        missing = []
        for a in argv[1:]:
            if a.startswith("-") and not re.match(r"^-\d", a):
                flag = a.split("=", 1)[0]
                if not re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", helptext, re.M):
                    missing.append(flag)
        return missing


adapter = LlamaCppAdapter()
