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
    drafter_problems,
    has_flag,
    precision,
    quantization_problems,
    require_drafter,
    url,
)

from specplug.adapter import (
    BaseAdapter,
    IterationStats,
    LaunchSpec,
    Problem,
    StackImage,
    StackMetrics,
    Window,
    pick_floor,
    raise_problems,
)
from specplug.errors import StackError
from specplug.plan import Plan

CONFIG_FILE = "trtllm-config.yaml"

# canonical method -> decoding_type per version range (windows follow the field-list generations)
METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("NGram", "0.17.0"),),
    "draft_model": (Window("DraftTarget", "0.17.0"),),
    # EAGLE-3 on PyTorch was "Eagle" + eagle3_one_model before the Eagle3 type existed
    "eagle3": (Window("Eagle", "0.17.0", "1.2.0"), Window("Eagle3", "1.2.0")),
    "eagle": (Window("Eagle", "0.17.0"),),
    "mtp": (Window("MTP", "0.17.0"),),
    "medusa": (Window("Medusa", "0.17.0"),),
    "lookahead": (Window("Lookahead", "0.17.0"),),
}
UNSUPPORTED = {
    "suffix": "TensorRT-LLM's suffix automaton (SA) is not rendered by specplug yet; use ngram.",
    "mlp_speculator": "TensorRT-LLM has no MLP speculators; use EAGLE-3, MTP or a DraftTarget draft model.",
}
# The backend each decoding type needs: the PyTorch flow for the modern methods, a prebuilt TensorRT engine
# for Medusa, Lookahead and EAGLE-1/2 (stacks.md 3.1, 8).
BACKEND = {
    "ngram": "pytorch",
    "draft_model": "pytorch",
    "eagle3": "pytorch",
    "mtp": "pytorch",
    "eagle": "tensorrt",
    "medusa": "tensorrt",
    "lookahead": "tensorrt",
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
DRAFTER_METHODS = ("draft_model", "eagle3", "eagle", "medusa")


@cache
def field_lists() -> dict[str, Any]:
    """The recorded field lists, keyed by generation floor."""
    from importlib import resources

    import yaml

    text = resources.files("specplug.adapters").joinpath("data/trtllm_fields.yaml").read_text(encoding="utf-8")
    return {g["since"]: g for g in yaml.safe_load(text)["generations"]}


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


class TRTLLMAdapter(BaseAdapter):
    name = "trtllm"
    cost_profile = "trtllm"  # its own row in policies/default.yaml
    display_name = "TensorRT-LLM"
    install_hint = "pip install tensorrt-llm --extra-index-url https://pypi.nvidia.com"
    distributions = ("tensorrt-llm", "tensorrt_llm")
    executables = ("trtllm-serve",)
    method_table = METHODS
    trees = True  # Eagle/Eagle3 dynamic trees (dynamic_tree_max_topK)
    shards_heads = True
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
        out += drafter_problems(plan, self.display_name, DRAFTER_METHODS)
        if out:
            return out
        # Render the speculative_config and check it against the recorded fields: the same code build runs.
        c = canon(plan, self.display_name)
        w = self.require_method(method, version)
        assert w is not None
        gen = generation(version)
        try:
            spec = self._speculative_config(plan, c, w.value, gen, version)
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
            spec = self._speculative_config(plan, c, w.value, gen, version)
            if c.method in ("ngram", "draft_model") and gen["since"] != "0.17.0":
                # The docs' examples turn the overlap scheduler off for NGram/DraftTarget.
                llm_args["disable_overlap_scheduler"] = True
            llm_args["speculative_config"] = spec
            if backend == "tensorrt":
                c.notes.append(f"{w.value} runs on the TensorRT backend: MODEL must be an engine built with it.")
        llm_args.update(self._precision_args(plan, version, backend))
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
        elif dtype == "MTP":
            cfg["num_nextn_predict_layers"] = c.k
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
        if s.schedule:
            if "draft_len_schedule" in gen["base"]:
                cfg["draft_len_schedule"] = draft_len_schedule(plan, cfg.get("max_draft_len", c.k))
            else:
                c.notes.append(
                    f"TensorRT-LLM {version} has no draft_len_schedule; k={c.k} is used at every batch size."
                )
        return cfg


def draft_len_schedule(plan: Plan, max_draft_len: int) -> dict[int, int]:
    """``{batch upper bound: k}``; batches above the last key run without speculation (TRT-LLM's rule)."""
    entries = sorted(plan.speculation.schedule, key=lambda e: e.min_batch)
    out: dict[int, int] = {}
    stopped = False
    for e in entries:
        if e.num_speculative_tokens == 0:
            stopped = True
            continue
        if stopped:
            raise StackError(
                "TensorRT-LLM's draft_len_schedule cannot turn speculation back on above a k=0 range.",
                "Put k=0 ranges only at the top of the schedule.",
            )
        out[e.max_batch if e.max_batch is not None else OPEN_END] = e.num_speculative_tokens
    if out and out[min(out)] != max_draft_len:
        raise StackError(
            f"TensorRT-LLM requires the smallest batch range's k ({out[min(out)]}) to equal max_draft_len "
            f"({max_draft_len}).",
            "Make the plan's k the schedule's first (largest) k.",
        )
    return out


adapter = TRTLLMAdapter()
