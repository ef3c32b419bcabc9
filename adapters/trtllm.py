"""TensorRT-LLM: ``trtllm-serve MODEL --backend B --config trtllm-config.yaml`` with ``speculative_config``.

``decoding_type`` spelling, the draft-path key and the fields each type takes change between releases; they
are data in ``adapters/data/trtllm_fields.yaml`` (recorded from ``tensorrt_llm/llmapi/llm_args.py``), and every
render is checked against it before it is returned.
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from specplug.adapters._common import (
    HUB_SECRETS,
    Canon,
    canon,
    drafter_format,
    precision,
    quantization_problems,
    require_drafter,
    url,
)

from specplug.argv import has_flag
from specplug.capabilities import ACCEPTANCE_GATE, ACCEPTANCE_RATE_GATE
from specplug.errors import StackError
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter, canon_problems
from specplug.stacks.metrics import IterationStats, StackMetrics
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage, raise_problems
from specplug.stacks.windows import Window, pick_floor, spelling, version_at_least

CONFIG_FILE = "trtllm-config.yaml"
TENSORRT_BACKEND_UNTIL = "1.3.0rc21"

# canonical method -> decoding_type per version range (windows follow the field-list generations)
METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("NGram", "0.17.0"),),
    "draft_model": (Window("DraftTarget", "0.17.0"),),
    # EAGLE-3 on PyTorch was "Eagle" + eagle3_one_model before the Eagle3 type existed
    "eagle3": (Window("Eagle", "0.17.0", "1.2.0"), Window("Eagle3", "1.2.0")),
    # EAGLE-1/2, Medusa and Lookahead run on the TensorRT backend only, which v1.3.0rc20's notes name the last
    # release candidate to have ("in the next version the TensorRT backend will be removed").
    "eagle": (Window("Eagle", "0.17.0", TENSORRT_BACKEND_UNTIL, "TensorRT backend; removed after v1.3.0rc20"),),
    "mtp": (Window("MTP", "0.17.0"),),
    "medusa": (Window("Medusa", "0.17.0", TENSORRT_BACKEND_UNTIL, "TensorRT backend; removed after v1.3.0rc20"),),
    "lookahead": (Window("Lookahead", "0.17.0", TENSORRT_BACKEND_UNTIL, "TensorRT backend; removed after v1.3.0rc20"),),
    # DFlashDecodingConfig (PR #12794) and DSparkDecodingConfig (PR #15808): first in 1.3.0rc14 and 1.3.0rc22
    # (the versioned docs' llm_args; see trtllm_fields.yaml).
    "dflash": (Window("DFlash", "1.3.0rc14", source="PR #12794; 1.3.0rc14 llm_args"),),
    "dspark": (Window("DSpark", "1.3.0rc22", source="PR #15808; 1.3.0rc22 llm_args"),),
    # Suffix decoding as the suffix automaton (SADecodingConfig, PR #11434): in 1.3.0rc7's API reference, not rc4's
    # (rc5/rc6 unread); rendered from the 1.3.0rc8 field list, the first recorded with it.
    "suffix": (Window("SA", "1.3.0rc8", source="PR #11434; 1.3.0rc7 API reference"),),
}
UNSUPPORTED = {
    "ngram_gpu": "TensorRT-LLM has no GPU n-gram proposer (vLLM's ngram_gpu); use ngram (NGram).",
    "mlp_speculator": "TensorRT-LLM has no MLP speculators; use EAGLE-3, MTP or a DraftTarget draft model.",
}
# The backend each decoding type needs: the PyTorch flow for the modern methods, a prebuilt TensorRT engine
# for Medusa, Lookahead and EAGLE-1/2.
BACKEND = {
    "ngram": "pytorch",
    "draft_model": "pytorch",
    "eagle3": "pytorch",
    "mtp": "pytorch",
    "eagle": "tensorrt",
    "medusa": "tensorrt",
    "lookahead": "tensorrt",
    "dflash": "pytorch",
    "dspark": "pytorch",
    "suffix": "pytorch",
}
SERVE_FLAGS = {
    "host": "--host",
    "port": "--port",
    "backend": "--backend",
    "tp": "--tp_size",
    "pp": "--pp_size",
    "max_num_seqs": "--max_batch_size",
    "max_model_len": "--max_seq_len",
}
OPEN_END = 1 << 20
# Formats the PyTorch backend serves from a checkpoint that ships them (ModelOpt FP8/NVFP4, AWQ, gpt-oss MXFP4);
# it quantizes nothing at load (see adapters/data/trtllm_fields.yaml), so every conversion is refused.
PREQUANTIZED = ("fp8", "nvfp4", "int4-awq", "mxfp4", "int8")
# canonical serve.kv_cache_dtype -> kv_cache_config.dtype (TensorRT-LLM's FP8 KV cache is e4m3)
KV_CACHE_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8"}


@cache
def field_lists() -> dict[str, Any]:
    """The recorded field lists, keyed by generation floor."""
    from importlib import resources

    import yaml

    text = resources.files("specplug.adapters").joinpath("data/trtllm_fields.yaml").read_text(encoding="utf-8")
    out: dict[str, Any] = {}
    prev: dict[str, Any] | None = None
    for g in yaml.safe_load(text)["generations"]:
        if g.pop("from_previous", False):
            assert prev is not None, "the first generation must be complete"
            g = _changed(prev, g)
        out[g["since"]] = prev = g
    return out


def _changed(prev: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """A generation stated as its changes from the one before (see the field list's header)."""
    g = {**prev, **{k: v for k, v in delta.items() if k not in ("base_add", "base_remove", "decoding_types", "fields")}}
    g["base"] = [f for f in prev["base"] if f not in delta.get("base_remove", [])] + list(delta.get("base_add", []))
    g["decoding_types"] = {**prev["decoding_types"], **delta.get("decoding_types", {})}
    g["fields"] = {**prev["fields"], **delta.get("fields", {})}
    return g


def generation(version: str | None) -> dict[str, Any]:
    gens = field_lists()
    return gens[pick_floor(version, list(gens))]


def field_problems(speculative_config: dict[str, Any], backend: str, version: str | None) -> list[Problem]:
    """A rendered speculative_config's type, backend or fields that ``version`` lacks."""
    gen = generation(version)
    at = f"TensorRT-LLM {version or '(newest)'}"
    dtype = speculative_config.get("decoding_type")
    if dtype not in gen["decoding_types"]:
        return [Problem(f"{at} has no decoding_type '{dtype}'.", f"It knows: {', '.join(gen['decoding_types'])}.",
                        key="speculation.method")]
    if backend not in gen["decoding_types"][dtype]:
        return [Problem(
            f"decoding_type {dtype} does not run on the '{backend}' backend of {at}.",
            f"Backends for it: {', '.join(gen['decoding_types'][dtype])}.", key="speculation.method",
        )]
    allowed = set(gen["base"]) | set(gen["fields"].get(dtype, [])) | {"decoding_type"}
    unknown = sorted(set(speculative_config) - allowed)
    if unknown:
        return [Problem(f"{at} {dtype} config has no field(s) {', '.join(unknown)}.",
                        f"Fields there: {', '.join(sorted(allowed))}.", key="speculation")]
    return []


def check_against_fields(speculative_config: dict[str, Any], backend: str, version: str | None) -> None:
    """Raise StackError when a rendered speculative_config uses a type, backend or field that version lacks."""
    raise_problems(field_problems(speculative_config, backend, version))


def llm_args_problems(llm_args: dict[str, Any], version: str | None) -> list[Problem]:
    """Top-level and kv_cache_config fields of a rendered YAML that ``version`` lacks (recorded lists)."""
    gen = generation(version)
    out: list[Problem] = []
    unknown = sorted(set(llm_args) - set(gen["llm_args"]))
    if unknown:
        out.append(Problem(f"TensorRT-LLM {version or '(newest)'} takes no {', '.join(unknown)} here.",
                           f"Recorded fields: {', '.join(gen['llm_args'])}."))
    kv = llm_args.get("kv_cache_config") or {}
    extra = sorted(set(kv) - set(gen["kv_cache_config"]))
    if extra:
        out.append(Problem(f"TensorRT-LLM {version or '(newest)'} kv_cache_config has no {', '.join(extra)}.",
                           "Render for 1.0.0 or newer.", key="stack.version"))
    return out


# PARDDecodingConfig (one forward drafts all k tokens, mask_token_id read from the drafter's config): in the v1.3.0rc7
# release notes ("Support PARD (Parallel Draft Model) in one-model speculative decoding", #11438); earlier releases
# are not confirmed, and there a PARD drafter runs as a plain DraftTarget draft model.
PARD_SINCE = "1.3.0rc7"


def decoding_type(c: Canon, value: str, version: str | None) -> str:
    """The method table's decoding_type, or PARD for a PARD-format draft model where the version has it."""
    if c.method != "draft_model" or value != "DraftTarget":
        return value
    if drafter_format(c.drafter) != "pard":
        return value
    if version is None or version_at_least(version, PARD_SINCE):
        return "PARD"
    c.notes.append(f"TensorRT-LLM {version or '(newest)'} has no PARD decoding type (needs {PARD_SINCE}+): the PARD drafter runs as a "
                   "DraftTarget draft model, one forward per draft token.")
    return value


# What 'specplug stacks' lists per version; supports_schedule / schedule_cutoff read the same boundaries from the
# recorded generations (a test holds the two together).
CONTROLS: dict[str, tuple[Window, ...]] = {
    "schedule": (Window("draft_len_schedule (batch >= key)", "1.2.0", "1.3.0rc8", "trtllm_fields.yaml 1.2.0"),
                 Window("draft_len_schedule (batch <= key)", "1.3.0rc8", source="PR #10860, v1.3.0rc8")),
    "cutoff": (Window("max_concurrency", "1.0.0", source="trtllm_fields.yaml 1.0.0"),),
    "pard": (Window("decoding_type PARD", PARD_SINCE, source="v1.3.0rc7 release notes (#11438)"),),
    # The acceptance gate turns speculation off for the server's life once a rolling average falls below a threshold:
    # accepted draft tokens per iteration over completed requests (PR #7283), then the rate accepted / drafted over
    # speculating iterations (PR #12905). The same boundaries as trtllm_fields.yaml's base fields.
    ACCEPTANCE_GATE: (
        Window("acceptance_window + acceptance_length_threshold", "1.2.0", "1.3.0rc21", source="PR #7283"),
        Window("acceptance_rate_window_size + acceptance_rate_threshold", "1.3.0rc21", source="PR #12905"),
    ),
    ACCEPTANCE_RATE_GATE: (Window("acceptance_rate_threshold", "1.3.0rc21", source="PR #12905"),),
}
# The gate's windows, set without data: long enough that a few hard requests or a warm-up do not end speculation for
# good (the old gate counts completed requests, the new one speculating iterations, one sample per batch).
GATE_WINDOW_REQUESTS = 100
GATE_WINDOW_ITERATIONS = 1000



class TRTLLMAdapter(BaseAdapter):
    name = "trtllm"
    serves_revisions = True  # the LLM API's revision field, in the extra options YAML
    compat_file = "compat_trtllm.yaml"  # what breaks speculation per release (specplug.compat)
    cost_profile = "trtllm"  # its own row in policies/default.yaml
    vocab_mismatch = "TensorRT-LLM needs the draft and target to share a tokenizer"
    launch_prior_s = 300.0  # engine build or load first
    display_name = "TensorRT-LLM"
    install_hint = "pip install tensorrt-llm --extra-index-url https://pypi.nvidia.com"
    distributions = ("tensorrt-llm", "tensorrt_llm")
    executables = ("trtllm-serve",)
    method_table = METHODS
    control_table = CONTROLS
    parallel_drafting: ClassVar[dict[str, tuple[Window, ...]]] = {"pard": CONTROLS["pard"]}
    trees = True  # Eagle/Eagle3 dynamic trees (dynamic_tree_max_topK)
    shards_heads = True
    # In-flight batching runs new requests' context phase in the same iteration as the others' generation phase.
    prefill_mixing = (Window("in-flight batching", source="trtllm-serve's executor"),)
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = "0.17.0"
    image = StackImage("nvcr.io/nvidia/tensorrt-llm/release", "{version}", "/root/.cache/huggingface")
    # trtllm-serve's /metrics answers JSON iteration stats; the field names are not confirmed upstream.
    metrics = StackMetrics(acceptance=IterationStats(
        "trtllm iteration stats (unconfirmed field names)",
        blocks=("specDecodingStats", "spec_decoding_stats"),
        draft_tokens="numDraftTokens",
        accepted="numAcceptedTokens",
        requests="numRequestsWithDraftTokens",
        length="acceptanceLength",
    ))

    def supports_schedule(self, version: str | None) -> bool:
        """draft_len_schedule is in the version's recorded DecodingBaseConfig and takes effect for every decoding type."""
        try:
            gen = generation(version)
        except StackError:
            return False
        return "draft_len_schedule" in gen["base"] and "dynamic_draft_len" not in gen

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        try:
            gen = generation(version)
        except StackError:
            return frozenset()
        if "draft_len_schedule" not in gen["base"]:
            return frozenset()
        return frozenset(m for m in self.supported_methods(version) if schedules(gen, spelling(METHODS, m, version)))

    def schedule_cutoff(self, version: str | None) -> bool:
        """max_concurrency: speculation off above the schedule's last drafting batch, for any decoding type."""
        try:
            return "max_concurrency" in generation(version)["base"]
        except StackError:
            return False

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        out: list[Problem] = []
        if plan.serve.api_key_env:
            out.append(Problem(
                "trtllm-serve has no API key option.",
                "Leave serve.api_key_env unset and put an authenticating proxy in front of it.",
                key="serve.api_key_env",
            ))
        method = plan.speculation.method
        backend = BACKEND.get(method, "pytorch") if method != "none" else "pytorch"
        out += quantization_problems(precision(plan), self.display_name, version, {}, PREQUANTIZED)
        out += self._kv_problems(plan, version, backend)
        if method == "none":
            return out
        if out or canon_problems(plan, self.display_name):  # the base reports those; build assumes them away
            return out
        # Render the speculative_config and check it against the recorded fields: the same code build runs.
        c = canon(plan, self.display_name)
        w = self.require_method(method, version)
        assert w is not None
        gen = generation(version)
        try:
            spec = self._speculative_config(plan, c, decoding_type(c, w.value, version), gen, version)
        except StackError as exc:  # draft_len_schedule's rules
            return [Problem(exc.message, exc.hint, key="speculation.schedule")]
        out += field_problems(spec, backend, version)
        llm_args = {"speculative_config": spec, **self._precision_args(plan, version, backend)}
        return out + llm_args_problems(llm_args, version)

    def _kv_problems(self, plan: Plan, version: str | None, backend: str) -> list[Problem]:
        kv = plan.serve.kv_cache_dtype
        if kv == "auto":
            return []
        at = f"TensorRT-LLM {version or '(newest)'}"
        if backend == "tensorrt":
            return [Problem(
                f"{at} fixes the KV-cache dtype of a TensorRT engine when it is built; kv_cache_config.dtype is read by the PyTorch backend only.",
                "Build the engine with the KV dtype you want and leave serve.kv_cache_dtype auto, or pick a PyTorch-backend method (ngram, draft_model, eagle3, mtp).",
                key="serve.kv_cache_dtype",
            )]
        value = KV_CACHE_DTYPES.get(kv)
        known = generation(version)["kv_cache_dtypes"]
        if value is None or value not in known:
            why = "its FP8 KV cache is e4m3" if kv == "fp8_e5m2" else (
                "the cache follows the model's dtype" if kv in ("bfloat16", "float16") else "this generation has no kv_cache_config.dtype")
            ok = ", ".join(["auto"] + [k for k, v in KV_CACHE_DTYPES.items() if v in known])
            return [Problem(f"{at} cannot keep the KV cache as {kv} ({why}).", f"serve.kv_cache_dtype there: {ok}"
                            + ("" if "fp8" in known else "; fp8 needs TensorRT-LLM 1.0.0 or newer") + ".",
                            key="serve.kv_cache_dtype")]
        return []

    def _precision_args(self, plan: Plan, version: str | None, backend: str) -> dict[str, Any]:
        kv = plan.serve.kv_cache_dtype
        if kv == "auto" or backend != "pytorch":
            return {}
        return {"kv_cache_config": {"dtype": KV_CACHE_DTYPES[kv]}}

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        gen = generation(version)
        llm_args: dict[str, Any] = {}
        backend = "pytorch"
        if c.speculating:
            w = self.require_method(c.method, version)
            assert w is not None
            backend = BACKEND[c.method]
            spec = self._speculative_config(plan, c, decoding_type(c, w.value, version), gen, version)
            if spec["decoding_type"] in ("NGram", "DraftTarget") and gen["since"] != "0.17.0":
                # The docs' examples turn the overlap scheduler off for NGram/DraftTarget.
                llm_args["disable_overlap_scheduler"] = True
            llm_args["speculative_config"] = spec
            if backend == "tensorrt":
                c.notes.append(f"{w.value} runs on the TensorRT backend: MODEL must be an engine built with it.")
        llm_args.update(self._precision_args(plan, version, backend))
        if c.revision:
            # BaseLlmArgs.revision in every recorded generation; trtllm-serve's own flag came and was renamed later.
            llm_args["revision"] = c.revision
        argv = ["trtllm-serve", c.model]
        values = {
            "host": c.host,
            "port": c.port,
            "backend": backend,
            "tp": c.tp if c.tp > 1 else None,
            "pp": c.pp if c.pp > 1 else None,
            "max_num_seqs": c.max_num_seqs,
            "max_model_len": c.max_model_len,
        }
        for key, flag in SERVE_FLAGS.items():
            v = values[key]
            if v is not None and not has_flag(c.extra_args, flag):
                argv += [flag, str(v)]
        files: dict[str, str] = {}
        if llm_args:
            import yaml

            files[CONFIG_FILE] = yaml.safe_dump(llm_args, sort_keys=False)
            argv += [gen["serve_config_flag"], CONFIG_FILE]
        argv += c.extra_args
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            env=dict(c.env),
            env_passthrough=list(HUB_SECRETS),
            files=files,
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )

    def _speculative_config(self, plan: Plan, c: Canon, dtype: str, gen: dict, version: str | None) -> dict:
        s = plan.speculation
        key = gen["model_key"]
        cfg: dict[str, Any] = {"decoding_type": dtype}
        if dtype == "NGram":
            # early-2025 NGram names its draft length prompt_lookup_num_tokens
            cfg["prompt_lookup_num_tokens" if gen["since"] == "0.17.0" else "max_draft_len"] = c.k
            cfg["max_matching_ngram_size"] = s.prompt_lookup_max or 2
            if s.prompt_lookup_min not in (None, s.prompt_lookup_max):
                c.notes.append("TensorRT-LLM's NGram has no minimum match length; prompt_lookup_min is not rendered.")
        elif dtype == "SA":
            # -1: the longest suffix the automaton matches; a plan's prompt_lookup_max fixes the match length instead.
            cfg["max_draft_len"] = c.k
            cfg["max_matching_ngram_size"] = s.prompt_lookup_max or -1
            c.notes.append("Suffix decoding runs as TensorRT-LLM's suffix automaton over each request's own text (no "
                           "global pool); specplug's suffix prior comes from suffix-tree decoding, a close but other "
                           "proposer.")
        elif dtype == "MTP":
            for key in gen.get("mtp_draft_len_keys", ["num_nextn_predict_layers"]):
                cfg[key] = c.k
        elif dtype == "Lookahead":
            cfg["max_window_size"] = c.k
            cfg["max_ngram_size"] = s.prompt_lookup_max or 3
            cfg["max_verification_set_size"] = s.tree.topk if s.tree else c.k
        else:
            cfg["max_draft_len"] = s.tree.steps if (s.tree and dtype in ("Eagle", "Eagle3")) else c.k
            cfg[key] = require_drafter(c, self.display_name, c.method)
            if dtype == "Eagle" and c.method == "eagle3":
                cfg["eagle3_one_model"] = True
            if s.tree and s.tree.topk > 1 and dtype in ("Eagle", "Eagle3"):
                cfg["use_dynamic_tree"] = True
                cfg["dynamic_tree_max_topK"] = s.tree.topk
                total = min(max(s.tree.num_draft_tokens, s.tree.steps), s.tree.topk * s.tree.steps)
                cfg["max_total_draft_tokens"] = total
        if s.acceptance_floor is not None:
            varies = len({e.num_speculative_tokens for e in s.schedule}) > 1
            cfg.update(acceptance_gate(s.acceptance_floor, cfg.get("max_draft_len", c.k), gen, c, varies))
        if s.schedule:
            semantics = gen.get("draft_len_schedule")
            max_draft_len = cfg.get("max_draft_len", c.k)
            if semantics is not None and "draft_len_schedule" in gen["base"] and schedules(gen, dtype):
                cfg["draft_len_schedule"] = draft_len_schedule(plan, max_draft_len, semantics)
                c.notes.append(f"draft_len_schedule keys are {SEMANTICS[semantics]} (TensorRT-LLM {version or '(newest)'}).")
            else:
                at = f"TensorRT-LLM {version or '(newest)'}"
                why = "no draft_len_schedule" if "draft_len_schedule" not in gen["base"] else f"no draft_len_schedule for {dtype}"
                if "max_concurrency" in gen["base"] and (cutoff := speculation_cutoff(plan)) is not None:
                    # Only an on/off threshold here: speculation stops above the last batch size that drafts.
                    cfg["max_concurrency"] = cutoff
                    c.notes.append(f"{at} has {why}: k={c.k} up to {cutoff} running requests "
                                   f"(max_concurrency), no speculation above.")
                else:
                    c.notes.append(f"{at} has {why}; k={c.k} is used at every batch size.")
        return cfg


# How a version reads draft_len_schedule's keys (adapters/data/trtllm_fields.yaml), said in the render's notes.
SEMANTICS = {
    "at_least": "the smallest batch size each k applies to (batch >= key)",
    "up_to": "the largest batch size each k applies to (batch <= key; none above the last key)",
}


def schedules(gen: dict[str, Any], decoding_type: Any) -> bool:
    """Whether a draft_len_schedule takes effect for ``decoding_type`` (a name or its Window) in generation ``gen``."""
    name = getattr(decoding_type, "value", decoding_type)
    return "draft_len_schedule" in gen["base"] and name in gen.get("dynamic_draft_len", [name])


def acceptance_gate(floor: float, max_draft_len: int, gen: dict[str, Any], c: Canon, varies: bool) -> dict[str, Any]:
    """The acceptance gate's fields in the generation's spelling and unit (the base check refused versions without)."""
    if "acceptance_rate_threshold" in gen["base"]:
        c.notes.append(f"Acceptance gate: speculation stops for the server's life once the acceptance rate (accepted / "
                       f"drafted) averages below {floor:.3f} over {GATE_WINDOW_ITERATIONS} speculating iterations.")
        return {"acceptance_rate_window_size": GATE_WINDOW_ITERATIONS, "acceptance_rate_threshold": round(floor, 3)}
    if "acceptance_length_threshold" not in gen["base"]:
        return {}
    # Per completed request, over all its steps: a schedule that lowers k (or stops drafting) at larger batches lowers
    # the average too, and can end speculation that still pays.
    if varies:
        c.notes.append("The acceptance gate of this version averages whole requests: under a schedule that lowers k at "
                       "larger batches it may end speculation that still pays; TensorRT-LLM 1.3.0rc21+ averages "
                       "speculating steps only.")
    tokens = round(floor * max_draft_len, 3)
    c.notes.append(f"Acceptance gate: speculation stops for the server's life once accepted draft tokens per step average "
                   f"below {tokens} ({floor:.3f} of k={max_draft_len}) over {GATE_WINDOW_REQUESTS} completed requests.")
    return {"acceptance_window": GATE_WINDOW_REQUESTS, "acceptance_length_threshold": tokens}


def speculation_cutoff(plan: Plan) -> int | None:
    """The largest running batch that still drafts when the schedule turns speculation off above it (else None)."""
    entries = sorted(plan.speculation.schedule, key=lambda e: e.min_batch)
    if not entries or entries[-1].num_speculative_tokens != 0:
        return None
    drafting = [e for e in entries if e.num_speculative_tokens > 0]
    return max((e.max_batch or e.min_batch) for e in drafting) if drafting else None


def draft_len_schedule(plan: Plan, max_draft_len: int, semantics: str) -> dict[int, int]:
    """The plan's schedule as draft_len_schedule with the version's key semantics, held to its validator's rules."""
    entries = sorted(plan.speculation.schedule, key=lambda e: e.min_batch)
    over = [e for e in entries if e.num_speculative_tokens > max_draft_len]
    if over:
        raise StackError(
            f"TensorRT-LLM's draft_len_schedule takes no draft length above max_draft_len ({max_draft_len}); "
            f"the schedule asks k={over[0].num_speculative_tokens} at batch {over[0].min_batch}.",
            "Make the plan's k the schedule's largest k.",
        )
    if semantics == "at_least":
        if entries[0].min_batch != 1:
            raise StackError(
                f"TensorRT-LLM's draft_len_schedule must start at batch size 1 (the schedule starts at {entries[0].min_batch}).",
                "Make the first schedule range start at min_batch 1.",
            )
        out = {e.min_batch: e.num_speculative_tokens for e in entries}
    else:
        out = {}
        for e in entries:
            if e.max_batch is None and e.num_speculative_tokens == 0:
                continue  # implicit: no speculation above the last key
            out[e.max_batch if e.max_batch is not None else OPEN_END] = e.num_speculative_tokens
        if not out:
            raise StackError("The schedule never drafts.", "Give the smallest batch range a k of 1 or more.")
    if out[min(out)] != max_draft_len:
        raise StackError(
            f"TensorRT-LLM requires the smallest batch range's k ({out[min(out)]}) to equal max_draft_len "
            f"({max_draft_len}).",
            "Make the plan's k the schedule's first (largest) k.",
        )
    return out


adapter = TRTLLMAdapter()
