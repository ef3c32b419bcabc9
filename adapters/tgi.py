"""Hugging Face TGI: ``text-generation-launcher --model-id M --speculate N`` (maintenance mode since 2025).

TGI picks the technique from the checkpoint: a Medusa repo (config.json has ``medusa_num_heads``) or an MLP
speculator repo is served *as the model id* (its config names the base model); anything else with
``--speculate N`` uses n-gram speculation (TGI's launcher/src/main.rs @db931fcf).
"""

from __future__ import annotations

import re
from typing import ClassVar

from specplug.adapters._common import (
    HUB_SECRETS,
    canon,
    kv_problems,
    precision,
    quantization_problems,
    require_drafter,
    url,
)

from specplug.argv import has_flag
from specplug.plan import Plan
from specplug.stacks.base import BaseAdapter, program_output
from specplug.stacks.metrics import SkippedTokens, StackMetrics
from specplug.stacks.protocol import LaunchSpec, Problem, StackImage
from specplug.stacks.windows import Window, spelling

METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("ngram", "2.0.0"),),
    "medusa": (Window("medusa", "2.0.0"),),
    "mlp_speculator": (Window("mlp_speculator", "2.0.0"),),
}
_NONE = "TGI speculates only with n-gram, Medusa heads or MLP speculators (no draft models, EAGLE or MTP)."
UNSUPPORTED = {m: _NONE for m in ("draft_model", "eagle", "eagle3", "mtp", "suffix", "lookahead", "ngram_gpu", "dspark", "dflash")}

# Served weight format -> --quantize value that quantizes a 16-bit checkpoint on the fly (launcher/src/main.rs
# enum Quantization @009c4e0b: "eetq: 8 bit, doesn't require specific model", "fp8 (e4m3)"; present since 2.0).
ONLINE_QUANTIZATION: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8", "2.0.0"),),
    "int8": (Window("eetq", "2.0.0", source="EETQ int8 weight-only kernels"),),
}
# awq, gptq, marlin, exl2 "require a specific ... quantized model"; TGI reads a pre-quantized checkpoint's method
# from its config ("It is not necessary to specify this option for pre-quantized models").
PREQUANTIZED = ("int4-awq", "int4-gptq", "fp8", "int8")
# canonical serve.kv_cache_dtype -> --kv-cache-dtype (enum KVCacheDtype: fp8_e4m3fn, fp8_e5m2; "When this option is
# not provided, the dtype of the model is used"). First release with it not pinned: present in the 3.x launcher.
KV_CACHE_DTYPES: dict[str, tuple[Window, ...]] = {
    "fp8": (Window("fp8_e4m3fn", "3.0.0", source="launcher/src/main.rs @009c4e0b; earlier releases unconfirmed"),),
    "fp8_e4m3": (Window("fp8_e4m3fn", "3.0.0"),),
    "fp8_e5m2": (Window("fp8_e5m2", "3.0.0"),),
}

SERVE_FLAGS = {
    "host": "--hostname",
    "port": "--port",
    "tp": "--num-shard",
    "max_num_seqs": "--max-batch-size",
    "max_model_len": "--max-total-tokens",
    "dtype": "--dtype",
    "revision": "--revision",  # launcher Args.revision @009c4e0b
}


class TGIAdapter(BaseAdapter):
    name = "tgi"
    serves_revisions = True
    compat_file = "compat_tgi.yaml"  # what breaks speculation per release (specplug.compat)
    cost_profile = "tgi"  # its own row in policies/default.yaml
    vocab_mismatch = "TGI has no separate-draft-model mode"
    display_name = "TGI (text-generation-inference)"
    shards_heads = True
    install_hint = "docker pull ghcr.io/huggingface/text-generation-inference (or build text-generation-launcher)"
    executables = ("text-generation-launcher",)
    method_table = METHODS
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = "2.0.0"
    image = StackImage("ghcr.io/huggingface/text-generation-inference", "{version}", "/data")
    # Tokens a request skipped thanks to speculation, against tokens generated (router/src/server.rs histograms).
    metrics = StackMetrics(
        markers=("tgi_",),
        acceptance=SkippedTokens(
            "tgi skipped-tokens histogram", "tgi_request_skipped_tokens_sum", "tgi_request_generated_tokens_sum"
        ),
    )

    def installed_version(self) -> str | None:
        out = program_output(["text-generation-launcher", "--version"])
        m = re.search(r"(\d+\.\d+\.\d+)", out or "")
        return m.group(1) if m else None

    def stack_problems(self, plan: Plan, version: str | None) -> list[Problem]:
        p = precision(plan)
        online = {f: None if spelling(ONLINE_QUANTIZATION, f, version) else "not in this release"
                  for f in ONLINE_QUANTIZATION}
        out = quantization_problems(p, self.display_name, version, online, PREQUANTIZED)
        out += kv_problems(p.kv_cache_dtype, self.display_name, version, KV_CACHE_DTYPES,
                           " (without --kv-cache-dtype TGI keeps the cache in the model's dtype)")
        if plan.model.revision and plan.speculation.method in ("medusa", "mlp_speculator"):
            # The heads' repository is TGI's --model-id: its --revision would name a revision of the heads.
            out.append(Problem(
                f"TGI serves {plan.speculation.method} from the heads' repository, so it cannot load "
                f"{plan.model.hf_id} at revision {plan.model.revision}.",
                "Name the model without a revision, or pick another method.", key="model",
            ))
        if p.quantizes_16bit and plan.serve.dtype not in ("auto", ""):
            out.append(Problem(
                f"TGI's --dtype cannot be used with --quantize (serve.dtype {plan.serve.dtype}, serve.quantization {p.served}).",
                "Set serve.dtype auto, or leave serve.quantization unset.", key="serve.dtype",
            ))
        return out

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
        if legacy := self.compatibility().legacy:
            c.notes.append(f"Legacy stack: {legacy}")
        model_id = c.model
        if c.speculating:
            self.require_method(c.method, version)
            if c.method in ("medusa", "mlp_speculator"):
                # The heads' repo is the model id; its config points at the base model.
                model_id = require_drafter(c, "TGI", c.method)
                c.notes.append(
                    f"TGI serves the {c.method} checkpoint {model_id} as --model-id; its config.json must name "
                    f"{c.model} as base_model_name_or_path. --speculate may not exceed its number of heads."
                )
        argv = ["text-generation-launcher", "--model-id", model_id]
        values = {
            "host": c.host,
            "port": c.port,
            "tp": c.tp if c.tp > 1 else None,
            "max_num_seqs": c.max_num_seqs,
            "max_model_len": c.max_model_len,
            "dtype": c.dtype,
            "revision": c.revision,
        }
        for key, flag in SERVE_FLAGS.items():
            v = values[key]
            if v is not None and not has_flag(c.extra_args, flag):
                argv += [flag, str(v)]
        p = precision(plan)
        if p.quantizes_16bit and not has_flag(c.extra_args, "--quantize"):
            w = spelling(ONLINE_QUANTIZATION, p.served, version)
            assert w is not None  # stack_problems refused it otherwise
            argv += ["--quantize", w.value]
        if p.kv_cache_dtype not in ("auto", "bfloat16", "float16") and not has_flag(c.extra_args, "--kv-cache-dtype"):
            w = spelling(KV_CACHE_DTYPES, p.kv_cache_dtype, version)
            assert w is not None
            argv += ["--kv-cache-dtype", w.value]
        if c.speculating:
            argv += ["--speculate", str(c.k)]
        env_from = {"API_KEY": c.api_key_env} if c.api_key_env else {}  # TGI's --api-key reads env API_KEY
        argv += c.extra_args
        return LaunchSpec(
            stack=self.name,
            argv=argv,
            env=dict(c.env),
            env_from=env_from,
            env_passthrough=list(HUB_SECRETS),
            health_url=url(c.host, c.port, "/health"),
            metrics_url=url(c.host, c.port, "/metrics"),
            base_url=url(c.host, c.port, "/v1"),
            notes=c.notes,
        )


adapter = TGIAdapter()
