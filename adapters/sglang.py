"""SGLang: ``sglang serve`` (``python -m sglang.launch_server`` before 0.5.23) with ``--speculative-algorithm`` and
the ``--speculative-*`` knobs.

A plan's per-batch schedule becomes SGLang's adaptive steps (``--speculative-adaptive`` with a JSON file of
per-batch-size slots) where the algorithm and flags allow it, else a note says why k is fixed.

Each flag keeps its version window and source beside it; renders are checked against sglang 0.5.23's
``ServerArgs`` and ``resolve_once()`` in tests/stacks/test_sglang_real.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import ClassVar

from specplug.adapters._common import (
    HUB_SECRETS,
    Canon,
    canon,
    kv_problems,
    precision,
    quantization_problems,
    require_drafter,
    url,
)

from specplug.argv import has_flag
from specplug.capabilities import BLOCK_VERIFICATION, PROBABILISTIC_DRAFTING
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter
from specplug.stacks.metrics import Gauges, StackMetrics
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage
from specplug.stacks.windows import Window, describe_windows, spelling

DIST_PORT = 20000  # where the nodes of a multi-node group rendezvous

# The command that starts the server, per version range (its words, split on spaces; --model-path follows).
ENTRY_POINTS: tuple[Window, ...] = (
    Window("python3 -m sglang.launch_server", "0.4.1", "0.5.23", "launch_server.py"),
    # 0.5.23's launch_server.py warns "'sglang serve' is the recommended entrypoint" (console script sglang =
    # sglang.cli.main:main); --model-type llm skips serve's diffusion probe, a Hub fetch of model_index.json
    # (cli/serve.py _extract_model_type_override, cli/utils.py get_is_diffusion_model). Earlier releases unconfirmed.
    Window("sglang serve --model-type llm", "0.5.23", source="cli/main.py, cli/serve.py, launch_server.py 0.5.23"),
)

# canonical method -> --speculative-algorithm value per version range
METHODS: dict[str, tuple[Window, ...]] = {
    # trie n-gram: LOOKAHEAD (PR #9873) was renamed NGRAM by PR #11010 (merged 2025-09-28); releases inferred.
    "ngram": (
        Window("LOOKAHEAD", "0.5.2", "0.5.3", "PR #9873 / renamed by PR #11010"),
        Window("NGRAM", "0.5.3", source="PR #11010"),
    ),
    "draft_model": (Window("STANDALONE", "0.5.0", source="small draft LLM, added 2025; release inferred"),),
    "eagle": (Window("EAGLE", "0.4.1"),),
    "eagle3": (Window("EAGLE3", "0.4.4", source="about v0.4.4 (Mar 2025), unconfirmed exact"),),
    # Built-in MTP layers run through the EAGLE worker with no draft path (NEXTN is rewritten to EAGLE).
    "mtp": (Window("EAGLE", "0.4.4"),),
    # DFlash block diffusion (sglang PRs #16818, #20547, #23000): read in ServerArgs 0.5.23 (_handle_dflash);
    # earlier releases unconfirmed.
    "dflash": (Window("DFLASH", "0.5.23", source="arg_groups/speculative_hook.py 0.5.23"),),
    # DSpark: _handle_dspark in 0.5.23 forces steps and topk to 1 and draft tokens to block + 1; earlier unconfirmed.
    "dspark": (Window("DSPARK", "0.5.23", source="arg_groups/speculative_hook.py 0.5.23 (_handle_dspark)"),),
}
UNSUPPORTED = {
    "medusa": "SGLang has no Medusa heads; use EAGLE/EAGLE3 heads or a STANDALONE draft model.",
    "mlp_speculator": "SGLang has no MLP speculators; use EAGLE/EAGLE3 heads or a STANDALONE draft model.",
    "suffix": "SGLang has no suffix decoding; its draft-free method is ngram (NGRAM).",
    "ngram_gpu": "SGLang has no GPU n-gram proposer (vLLM's ngram_gpu); its draft-free method is ngram (NGRAM).",
    "lookahead": "SGLang has no Jacobi lookahead decoding (its old LOOKAHEAD was the n-gram trie: method ngram).",
}
# SGLang silently caps running requests at 48 once speculation is on (PR #34290, issue #33199): always explicit.
SPEC_DEFAULT_RUNNING = 48

# Served weight format -> --quantization value that quantizes a 16-bit checkpoint at load. Read from sglang
# 0.5.23's QUANTIZATION_CHOICES (srt/arg_groups/choices.py: "fp8  # MOE + linear online quantization",
# "nvfp4_online"); fp8 is in 0.4.1's choices too.
ONLINE_QUANTIZATION: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8", "0.4.1"),),
    "nvfp4": (Window("nvfp4_online", "0.5.23", source="seen in 0.5.23; earlier releases unconfirmed"),),
}
# Served only from a checkpoint already in the format (SGLang reads its quantization_config): awq(_marlin),
# gptq(_marlin), w8a8_int8 / w8a8_fp8 (compressed-tensors), mxfp4, modelopt_fp4.
PREQUANTIZED = ("int4-awq", "int4-gptq", "int8", "fp8", "mxfp4", "nvfp4")
# canonical serve.kv_cache_dtype -> --kv-cache-dtype (0.5.23 choices: auto fp8_e5m2 fp8_e4m3 mxfp8 bf16 bfloat16
# nvfp4 fp4_mx_block16, srt/arg_groups/fields/model.py); SGLang has no bare "fp8" and no float16 cache.
KV_CACHE_DTYPES: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8_e4m3", "0.4.1", source="SGLang names the fp8 encoding; e4m3 is the usual one"),),
    "fp8_e4m3": (Window("fp8_e4m3", "0.4.1"),),
    "fp8_e5m2": (Window("fp8_e5m2", "0.4.1"),),
    "bfloat16": (Window("bfloat16", "0.5.23", source="in 0.5.23's choices; earlier releases unconfirmed"),),
}
# DFLASH's block: the verify window (anchor + k drafts); _handle_dflash (0.5.23) copies it to
# --speculative-num-draft-tokens and refuses both set to different values.
DFLASH_BLOCK_FLAG = "--speculative-dflash-block-size"
# DSPARK's block (the draft tokens it proposes); SGLang sets --speculative-num-draft-tokens to it + 1 and refuses another.
DSPARK_BLOCK_FLAG = "--speculative-dspark-block-size"
# The drafter's quantization (FLAGS[DRAFT_QUANTIZATION]).
DRAFT_QUANTIZATION = "draft_quantization"
# _handle_dspark (0.5.23): with DP attention DSPARK needs the LM head data-parallel too.
DP_LM_HEAD_FLAG = "--enable-dp-lm-head"

SERVE_FLAGS = {
    "host": "--host",
    "port": "--port",
    "tp": "--tp-size",
    "pp": "--pp-size",
    "max_model_len": "--context-length",
    "dtype": "--dtype",
    "max_running": "--max-running-requests",
    "revision": "--revision",
}
SPEC_FLAGS = {
    "algorithm": "--speculative-algorithm",
    "drafter": "--speculative-draft-model-path",
    "steps": "--speculative-num-steps",
    "topk": "--speculative-eagle-topk",
    "draft_tokens": "--speculative-num-draft-tokens",
    "ngram_breadth": "--speculative-ngram-max-bfs-breadth",
    "draft_revision": "--speculative-draft-model-revision",
    "attention": "--attention-backend",
}
# Trees (topk > 1) need an attention backend that verifies trees; flashinfer does on every CUDA GPU.
TREE_ATTENTION_BACKEND = "flashinfer"

# Flags with their version windows, read in sglang 0.5.23 (srt/arg_groups/fields/spec.py, speculative_hook.py,
# speculative/adaptive_spec_params.py) unless the source says otherwise.
FLAGS: dict[str, tuple[Window, ...]] = {
    # The n-gram trie's match window: --speculative-ngram-{min,max}-match-window-size (defaults 1, 12) from PR #11010;
    # 0.5.23 has none (it matches the last --speculative-ngram-max-trie-depth tokens). The release that dropped
    # them is not confirmed: 0.5.23 is the first known without.
    "ngram_match_window": (Window("--speculative-ngram-{}-match-window-size", "0.5.3", "0.5.23",
                                  "PR #11010 ServerArgs (min 1, max 12); absent in 0.5.23"),),
    # 0.5.23's trie holds every window of up to max-trie-depth tokens (default 18) and matches each suffix length of
    # the context up to it, so one path is the match plus its draft (kernels/jit/csrc/ngram_corpus/trie.cpp): it is
    # raised where the plan's longest match plus its drafts need more, never lowered.
    "ngram_trie_depth": (Window("--speculative-ngram-max-trie-depth", "0.5.23", source="spec.py; trie.cpp 0.5.23"),),
    # Adaptive steps: --speculative-adaptive with a JSON file of per-batch-size slots {"<min batch>":
    # {"candidate_steps": [...]}}; a batch uses the slot with the largest key not above it (sglang#21599).
    "adaptive": (Window("--speculative-adaptive", "0.5.23", source="spec.py; adaptive_spec_params.py; release inferred"),),
    # _handle_block_verification (0.5.23): EAGLE/EAGLE3/NEXTN/DFLASH/DSPARK on CUDA/ROCm; turns rejection sampling on.
    BLOCK_VERIFICATION: (Window("--speculative-use-block-verification", "0.5.23", source="spec.py; speculative_hook.py"),),
    # Drafts sampled and verified by rejection sampling against their distribution (EAGLE heads with topk 1);
    # earlier releases unconfirmed.
    PROBABILISTIC_DRAFTING: (Window("--speculative-use-rejection-sampling", "0.5.23", source="spec.py; speculative_hook.py"),),
    # DFLASH's own name for its block ("Alias of --speculative-num-draft-tokens for DFLASH"); DFLASH itself is
    # confirmed from 0.5.23 only, so the block goes as --speculative-num-draft-tokens where this is absent.
    "dflash_block": (Window(DFLASH_BLOCK_FLAG, "0.5.23", source="spec.py; speculative_hook.py _handle_dflash"),),
    # The draft checkpoint's quantization: unset, SGLang gives the draft the target's --quantization
    # (serving_hook.py _handle_missing_default_values), so a 16-bit drafter would be quantized at load with the target;
    # 'unquant' leaves it to the draft's own config (configs/model_config.py _verify_quantization: a draft model takes
    # the quantization its checkpoint states). Earlier releases are not confirmed either way.
    DRAFT_QUANTIZATION: (Window("--speculative-draft-model-quantization", "0.5.23",
                                source="spec.py; serving_hook.py; model_config.py"),),
}
# --speculative-draft-attention-backend is never rendered: SGLang resolves the draft's backend itself (the target's
# prefill backend, else the platform default, falling back from one the draft worker lacks: draft_worker_common.py,
# speculative_hook.py _resolve_dflash_draft_attention_backend); the one draft that needs it named, a Nemotron 3.5
# DSpark drafter with attention sinks (trtllm_mha, models/dflash.py), is none specplug plans.
BLOCK_VERIFICATION_ALGORITHMS = ("EAGLE", "EAGLE3", "DFLASH", "DSPARK")
# Methods whose drafter is a checkpoint of its own (MTP/NEXTN drafts with the target's own layers, quantized alike).
OWN_DRAFT_CHECKPOINT = ("eagle", "eagle3", "draft_model", "dflash", "dspark")
# --speculative-use-rejection-sampling (0.5.23): EAGLE/EAGLE3 (NEXTN, MTP) only (speculative_hook.py), and chains only
# (eagle_worker_v2.py: "Chain speculative sampling supports only topk=1").
REJECTION_SAMPLING_ALGORITHMS = ("EAGLE", "EAGLE3")
ADAPTIVE_CONFIG_FILE = "sglang-adaptive.json"
# adaptive_unsupported_reason (0.5.23): EAGLE/EAGLE3 with topk 1 only, and not with these server flags.
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
ADAPTIVE_BLOCKERS = ("--enable-dp-attention", "--enable-multi-layer-eagle", "--enable-two-batch-overlap", "--enable-pdmux")
# NGRAM and STANDALONE refusing DP attention, and DFLASH/DSPARK refusing pipeline parallelism, are rows of
# compat_sglang.yaml (the planner avoids them; check cites the source).
DP_ATTENTION_FLAG = "--enable-dp-attention"
COMPAT_FILE = "compat_sglang.yaml"


class SGLangAdapter(BaseAdapter):
    name = "sglang"
    compat_file = COMPAT_FILE  # what breaks speculation per release (specplug.compat)
    cost_profile = "sglang"  # its own row in policies/default.yaml
    vocab_mismatch = ("SGLang validates draft/target vocabularies (since PR #23838; older versions silently accepted a "
                      "mismatch, losing acceptance)")
    display_name = "SGLang"
    install_hint = "pip install sglang"
    distributions = ("sglang",)
    executables = ("sglang", "python", "python3")
    method_table = METHODS
    control_table = FLAGS
    trees = True  # EAGLE, EAGLE3 and STANDALONE draft steps x topk trees
    shards_heads = True
    serves_revisions = True  # --revision, and the draft's own revision where the draft is the target's repository
    serves_drafter_revisions = True  # --speculative-draft-model-revision
    draft_tp = "target"  # a STANDALONE draft model runs at the target's tensor parallel size
    spec_running_cap = SPEC_DEFAULT_RUNNING
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = "0.4.1"
    image = StackImage("lmsysorg/sglang", "v{version}", "/root/.cache/huggingface")
    multi_node = "torch.distributed"
    # Per-batch gauges on /metrics (sglang/srt/metrics/collector.py): the latest batch only, so sampled.
    metrics = StackMetrics(
        markers=("sglang:",),
        acceptance=Gauges("sglang gauges (mean of samples)", "sglang:spec_accept_length", "sglang:spec_accept_rate"),
    )

    def schedule_methods(self, version: str | None) -> frozenset[str]:
        # The per-batch schedule reaches SGLang as adaptive steps, which run the EAGLE-family algorithms (chains).
        if spelling(FLAGS, "adaptive", version) is None:
            return frozenset()
        return frozenset(m for m in self.supported_methods(version)
                         if (w := spelling(METHODS, m, version)) is not None and w.value in ADAPTIVE_ALGORITHMS)

    def node_scripts(self, argv: list[str], nodes: int, gpus_per_node: int, leader: str, rank: str) -> tuple[str, str]:
        # Every node runs the same server with its rank; only rank 0 answers HTTP.
        flags = f'--nnodes {nodes} --node-rank "{rank}" --dist-init-addr "{leader}:{DIST_PORT}"'
        script = f"exec {shlex.join(argv)} {flags}\n"
        return script, script

    def installed_version(self) -> str | None:
        from specplug.stacks.base import distribution_version

        return distribution_version(self.distributions, ("sglang",))

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        out: list[Problem] = []
        if plan.serve.api_key_env:
            out.append(Problem(
                "SGLang takes its API key only as --api-key VALUE, which would put the secret in the command line.",
                "Leave serve.api_key_env unset and put an authenticating proxy in front, or use vLLM/TGI/llama.cpp.",
                key="serve.api_key_env",
            ))
        p = precision(plan)
        online = {f: None if spelling(ONLINE_QUANTIZATION, f, version) else
                  f"at load only in SGLang {describe_windows(w)}" for f, w in ONLINE_QUANTIZATION.items()}
        out += quantization_problems(p, self.display_name, version, online, PREQUANTIZED)
        out += kv_problems(p.kv_cache_dtype, self.display_name, version, KV_CACHE_DTYPES)
        if plan.speculation.method == "none":
            return out
        tree = plan.speculation.tree
        w = spelling(METHODS, plan.speculation.method, version)
        if (w is not None and w.value == "DSPARK" and has_flag(plan.serve.extra_args, DP_ATTENTION_FLAG)
                and not has_flag(plan.serve.extra_args, DP_LM_HEAD_FLAG)):
            out.append(Problem(
                f"SGLang's DSPARK speculation with DP attention needs {DP_LM_HEAD_FLAG} as well.",
                f"Add {DP_LM_HEAD_FLAG} to serve.extra_args, or drop {DP_ATTENTION_FLAG}.",
                key="serve.extra_args",
            ))
        if (w is not None and plan.speculation.verification == "block" and spelling(FLAGS, BLOCK_VERIFICATION, version)
                and w.value not in BLOCK_VERIFICATION_ALGORITHMS):
            out.append(Problem(
                f"SGLang verifies blocks for {', '.join(BLOCK_VERIFICATION_ALGORITHMS)} only, not {w.value}.",
                "Leave speculation.verification unset for this method, or use EAGLE-3, MTP, DFlash or DSpark.",
                key="speculation.verification",
            ))
        if (w is not None and plan.speculation.draft_sampling == "probabilistic"
                and spelling(FLAGS, PROBABILISTIC_DRAFTING, version) and w.value not in REJECTION_SAMPLING_ALGORITHMS):
            out.append(Problem(
                f"SGLang samples drafts for rejection sampling with {'/'.join(REJECTION_SAMPLING_ALGORITHMS)} heads only, "
                f"not {w.value}.",
                "Leave speculation.draft_sampling unset for this method, or use EAGLE-3 or MTP.",
                key="speculation.draft_sampling",
            ))
        # Rejection sampling (asked for, or switched on by block verification of EAGLE drafts) verifies chains only.
        sampled = (plan.speculation.draft_sampling == "probabilistic" and spelling(FLAGS, PROBABILISTIC_DRAFTING, version)) or (
            plan.speculation.verification == "block" and spelling(FLAGS, BLOCK_VERIFICATION, version))
        if w is not None and w.value in REJECTION_SAMPLING_ALGORITHMS and sampled and tree is not None and tree.topk > 1:
            field = "draft_sampling" if plan.speculation.draft_sampling == "probabilistic" else "verification"
            out.append(Problem(
                f"SGLang's rejection sampling (which {field} turns on for {w.value}) needs a chain (topk 1), not a tree "
                f"with topk {tree.topk}.",
                f"Set speculation.tree.topk to 1 (or drop the tree), or leave speculation.{field} unset.",
                key=f"speculation.{field}",
            ))
        tree_algorithm = w is not None and w.value not in ("NGRAM", "LOOKAHEAD", "DFLASH", "DSPARK")
        if tree is not None and tree_algorithm and tree.topk > 1 and tree.num_draft_tokens > tree.steps * tree.topk + 1:
            most = tree.steps * tree.topk + 1
            out.append(Problem(
                f"A tree of {tree.steps} steps x topk {tree.topk} holds at most {most} draft tokens, not {tree.num_draft_tokens}.",
                f"Lower num_draft_tokens to {most} or less.",
                key="speculation.tree.num_draft_tokens",
            ))
        return out

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        entry = spelling({"serve": ENTRY_POINTS}, "serve", version) or ENTRY_POINTS[0]
        argv = [*entry.value.split(), "--model-path", c.model]
        argv += self._serve_args(c)
        argv += _precision_args(plan, c, version)
        files: dict[str, str] = {}
        if c.speculating:
            w = self.require_method(c.method, version)
            assert w is not None
            argv += self._spec_args(plan, c, w.value, version, files)
            argv += _draft_revision(argv, c)
            if plan.speculation.draft_sampling == "probabilistic" and (r := spelling(FLAGS, PROBABILISTIC_DRAFTING, version)):
                argv.append(r.value)
                c.notes.append("Probabilistic drafting: SGLang samples the EAGLE drafts and verifies them by rejection "
                               "sampling. The prediction does not count its gain.")
            if plan.speculation.verification == "block" and (b := spelling(FLAGS, BLOCK_VERIFICATION, version)):
                argv.append(b.value)
                c.notes.append("Block verification (CUDA/ROCm only)" + (": SGLang samples the EAGLE drafts for it (rejection "
                               "sampling on)" if c.method in ("eagle", "eagle3", "mtp") else "") +
                               ". The prediction does not count its gain.")
        argv += c.extra_args
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            files=files,
            env=dict(c.env),
            env_passthrough=list(HUB_SECRETS),
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )

    def _serve_args(self, c: Canon) -> list[str]:
        running = c.max_num_seqs
        if running is None and c.speculating:
            running = SPEC_DEFAULT_RUNNING
            c.notes.append(f"--max-running-requests {running} made explicit (SGLang's silent cap under speculation).")
        values = {
            "host": c.host,
            "port": c.port,
            "tp": c.tp if c.tp > 1 else None,
            "pp": c.pp if c.pp > 1 else None,
            "max_model_len": c.max_model_len,
            "dtype": c.dtype,
            "max_running": running,
            "revision": c.revision,
        }
        out: list[str] = []
        for key, flag in SERVE_FLAGS.items():
            v = values[key]
            if v is not None and not has_flag(c.extra_args, flag):
                out += [flag, str(v)]
        return out

    def _spec_args(self, plan: Plan, c: Canon, algorithm: str, version: str | None, files: dict[str, str]) -> list[str]:
        s = plan.speculation
        out = [SPEC_FLAGS["algorithm"], algorithm]
        if algorithm in ("NGRAM", "LOOKAHEAD"):
            # Tokens verified per step: the last token (the trie's root) plus k drafted after it (param.h: the tree holds
            # num_draft_tokens - 1 nodes). The trie's breadth plays topk's part.
            tree = s.tree
            out += [SPEC_FLAGS["draft_tokens"], str(tree.num_draft_tokens if tree else c.k + 1)]
            if tree is not None:
                out += [SPEC_FLAGS["ngram_breadth"], str(tree.topk)]
            out += self._match_window(plan, c, version)
            if s.schedule:
                c.notes.append("SGLang's adaptive steps run EAGLE/EAGLE3 only; the n-gram trie drafts the same at every batch size.")
            return out
        if algorithm == "DFLASH":
            # One forward drafts a block of k+1 (anchor + k masks); SGLang forces steps and topk to 1 itself. The
            # block is always stated: unset, SGLang takes the drafter's config.json block_size (16 if it has none).
            drafter = require_drafter(c, "SGLang", c.method)
            block = spelling(FLAGS, "dflash_block", version)
            out += [SPEC_FLAGS["drafter"], drafter, block.value if block else SPEC_FLAGS["draft_tokens"], str(c.k + 1)]
            trained = drafter_block_size(drafter)
            if trained is not None and trained != c.k + 1:
                # dflash_worker_v2.py (0.5.23) runs the stated block and logs "DFLASH block size mismatch".
                c.notes.append(f"The DFLASH block is {c.k + 1} (k={c.k} + the anchor) while the drafter's config.json says "
                               f"block_size {trained}: SGLang runs the plan's block and warns; k={trained - 1} matches "
                               "the drafter's training.")
            if s.schedule:
                c.notes.append(f"SGLang's adaptive steps run {'/'.join(ADAPTIVE_ALGORITHMS)} only; DFLASH drafts k={c.k} "
                               "at every batch size.")
            return out
        if algorithm == "DSPARK":
            # SGLang forces steps and topk to 1 and draft tokens to the block + 1 (setting them otherwise is an error).
            out += [SPEC_FLAGS["drafter"], require_drafter(c, "SGLang", c.method), DSPARK_BLOCK_FLAG, str(c.k)]
            if s.schedule:
                c.notes.append(f"SGLang's adaptive steps run {'/'.join(ADAPTIVE_ALGORITHMS)} only; DSPARK drafts a block "
                               f"of {c.k} at every batch size.")
            return out
        if c.method in ("eagle", "eagle3", "draft_model"):
            # Without a draft path SGLang loads the target as its own draft and crashes (sglang #36528).
            out += [SPEC_FLAGS["drafter"], require_drafter(c, "SGLang", c.method)]
        elif c.drafter:
            out += [SPEC_FLAGS["drafter"], c.drafter]
        steps, topk, ndraft = self._tree(plan, c)
        adaptive = self._adaptive(plan, c, algorithm, topk, version)
        if adaptive is not None:
            files[ADAPTIVE_CONFIG_FILE] = json.dumps(adaptive, indent=2) + "\n"
            steps = max(e.num_speculative_tokens for e in s.schedule)  # must be one of the candidate steps
            ndraft = steps + 1
        # All three or none: setting only some leaves the rest None and crashes resolution.
        out += [SPEC_FLAGS["steps"], str(steps), SPEC_FLAGS["topk"], str(topk), SPEC_FLAGS["draft_tokens"], str(ndraft)]
        if adaptive is not None:
            out += [FLAGS["adaptive"][0].value, "--speculative-adaptive-config", ADAPTIVE_CONFIG_FILE]
        if topk > 1 and not has_flag(c.extra_args, SPEC_FLAGS["attention"]):
            out += [SPEC_FLAGS["attention"], TREE_ATTENTION_BACKEND]
        if s.draft_tensor_parallel_size not in (None, c.tp):
            c.notes.append("SGLang runs the drafter at the target's tensor parallel size; draft TP is not rendered.")
        return out

    def _match_window(self, plan: Plan, c: Canon, version: str | None) -> list[str]:
        """prompt_lookup_min/max as the trie's match window where the version has one; from 0.5.23 (no window) the
        trie depth, always explicit."""
        s = plan.speculation
        w = spelling(FLAGS, "ngram_match_window", version)
        depth_flag = spelling(FLAGS, "ngram_trie_depth", version)
        if w is None and depth_flag is not None:
            if has_flag(c.extra_args, depth_flag.value):
                return []
            # A trie path holds a match and the drafts after it: deep enough for the plan's longest match and its k.
            longest = s.prompt_lookup_max or s.prompt_lookup_min or 0
            need = longest + (s.tree.num_draft_tokens - 1 if s.tree else c.k)
            default = self._trie_depth_default()
            if need > default:
                c.notes.append(f"The trie is made {need} deep (SGLang's default {default}) so a path holds a match of up "
                               f"to {longest} tokens and the drafts after it; SGLang has no minimum match length.")
            # Stated even at SGLang's own default (it matches suffixes up to that depth, longer than asked), so a
            # release that changes the default cannot shorten the drafts the plan predicts.
            return [depth_flag.value, str(max(need, default))]
        if s.prompt_lookup_min is None and s.prompt_lookup_max is None:
            return []
        if w is None:
            c.notes.append(f"SGLang {version or '(newest)'} has no n-gram match window; prompt_lookup_min/max are not rendered.")
            return []
        out: list[str] = []
        for bound, value in (("min", s.prompt_lookup_min), ("max", s.prompt_lookup_max)):
            if value is not None:
                out += [w.value.format(bound), str(value)]
        return out

    def _trie_depth_default(self) -> int:
        """SGLang's own n-gram trie depth (compat_sglang.yaml's defaults, read in 0.5.23's spec.py)."""
        pinned = self.compatibility().default("ngram_max_trie_depth")
        assert pinned is not None, f"{COMPAT_FILE} states ngram_max_trie_depth"
        return int(pinned.assumed)

    def _adaptive(self, plan: Plan, c: Canon, algorithm: str, topk: int, version: str | None) -> dict | None:
        """The plan's per-batch schedule as SGLang's adaptive-steps slots, or None (with a note) where it cannot be.

        Each slot starts at its range's k and may step down to the smaller k of the ranges above it (0: off), never
        above the plan's k for that batch size; SGLang moves between them from the measured acceptance."""
        s = plan.speculation
        if not s.schedule:
            return None
        why = None
        if spelling(FLAGS, "adaptive", version) is None:
            why = f"SGLang {version or '(newest)'} has no --speculative-adaptive (needs {FLAGS['adaptive'][0].since}+)"
        elif algorithm not in ADAPTIVE_ALGORITHMS:
            why = f"SGLang's adaptive steps run {'/'.join(ADAPTIVE_ALGORITHMS)} only, not {algorithm}"
        elif topk != 1:
            why = f"SGLang's adaptive steps need topk 1 (the plan's tree has topk {topk})"
        elif any(has_flag(c.extra_args, f) for f in ADAPTIVE_BLOCKERS):
            why = f"SGLang turns adaptive steps off with {', '.join(f for f in ADAPTIVE_BLOCKERS if has_flag(c.extra_args, f))}"
        elif plan.serve.lora and plan.serve.lora.adapters:
            # lora_hook.py (0.5.23): the draft is built from a static args snapshot (compat_sglang.yaml)
            why = "SGLang refuses --speculative-adaptive with LoRA"
        elif max(e.num_speculative_tokens for e in s.schedule) < 1:
            why = "the schedule never drafts"
        if why is not None:
            c.notes.append(f"{why}; k={c.k} is used at every batch size.")
            return None
        entries = sorted(s.schedule, key=lambda e: e.min_batch)
        ks = sorted({e.num_speculative_tokens for e in entries})
        slots = {str(e.min_batch): {"candidate_steps": [k for k in ks if k <= e.num_speculative_tokens]} for e in entries}
        c.notes.append(f"Per-batch schedule rendered as SGLang adaptive steps ({ADAPTIVE_CONFIG_FILE}): each batch-size slot "
                       "may lower k from the plan's value as acceptance falls.")
        return slots

    def _tree(self, plan: Plan, c: Canon) -> tuple[int, int, int]:
        tree = plan.speculation.tree
        if tree is None:
            return c.k, 1, c.k + 1
        steps, topk, ndraft = tree.steps, tree.topk, tree.num_draft_tokens
        if topk == 1 and ndraft != steps + 1:
            c.notes.append(f"num_draft_tokens set to steps+1={steps + 1} (SGLang forces it when topk is 1).")
            ndraft = steps + 1
        return steps, topk, ndraft  # a tree too small for ndraft is refused by stack_problems


def drafter_block_size(drafter: str) -> int | None:
    """The block a local DFlash drafter folder's config.json states, read as SGLang's parse_dflash_draft_config reads
    it (dflash_config.block_size, else the top-level block_size); None for a Hub id or no such field (no download
    while rendering)."""
    cfg_file = Path(drafter).expanduser() / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    nested = cfg.get("dflash_config")
    value = nested.get("block_size") if isinstance(nested, dict) and "block_size" in nested else cfg.get("block_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _draft_quantization_args(c: Canon, target_quantization: str, version: str | None) -> list[str]:
    """Keep a separate drafter in its own checkpoint's format, as the plan costs it, when the target is quantized at
    load (SGLang would otherwise quantize the drafter with it); the render's note says why."""
    if c.method not in OWN_DRAFT_CHECKPOINT or has_flag(c.extra_args, FLAGS[DRAFT_QUANTIZATION][0].value):
        return []
    w = spelling(FLAGS, DRAFT_QUANTIZATION, version)
    if w is None:
        c.notes.append(f"SGLang {version or '(newest)'} may quantize the drafter with the target (--quantization "
                       f"{target_quantization}); the plan costs it in its own checkpoint's format, and "
                       f"{FLAGS[DRAFT_QUANTIZATION][0].value} (which keeps it so) is confirmed from "
                       f"{FLAGS[DRAFT_QUANTIZATION][0].since} only.")
        return []
    c.notes.append(f"{w.value} unquant: SGLang gives the drafter the target's --quantization {target_quantization} "
                   "unless told otherwise; the plan costs the drafter in its own checkpoint's format (a quantized "
                   "drafter checkpoint is still read as its config states).")
    return [w.value, "unquant"]


def _draft_revision(argv: list[str], c: Canon) -> list[str]:
    """The draft path's revision: the target's where the draft is the target's repository (MTP), the drafter's where
    it was named at one. Given a draft path without a revision, SGLang loads the draft at the default branch."""
    flag = SPEC_FLAGS["drafter"]
    if flag not in argv:
        return []
    path = argv[argv.index(flag) + 1]
    at = c.revision if path.lower() == c.model.lower() else c.drafter_revision if path == c.drafter else None
    return [SPEC_FLAGS["draft_revision"], at] if at else []


def _precision_args(plan: Plan, c: Canon, version: str | None) -> list[str]:
    p = precision(plan)
    out: list[str] = []
    if p.quantizes_16bit and not has_flag(c.extra_args, "--quantization"):
        w = spelling(ONLINE_QUANTIZATION, p.served, version)
        assert w is not None  # stack_problems refused it otherwise
        out += ["--quantization", w.value]
        out += _draft_quantization_args(c, w.value, version)
    if p.kv_cache_dtype != "auto" and not has_flag(c.extra_args, "--kv-cache-dtype"):
        w = spelling(KV_CACHE_DTYPES, p.kv_cache_dtype, version)
        assert w is not None
        out += ["--kv-cache-dtype", w.value]
    return out


adapter = SGLangAdapter()
