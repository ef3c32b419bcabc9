"""Hugging Face TGI: ``text-generation-launcher --model-id M --speculate N`` (maintenance mode since 2025).

TGI picks the technique from the checkpoint: a Medusa repo (config.json has ``medusa_num_heads``) or an MLP
speculator repo is served *as the model id* (its config names the base model); anything else with
``--speculate N`` uses n-gram speculation. Source: stacks.md section 5 (launcher/src/main.rs @db931fcf).
"""

from __future__ import annotations

import re
from typing import ClassVar

from specplug.adapters._common import HUB_SECRETS, canon, has_flag, require_drafter, url

from specplug.adapter import BaseAdapter, LaunchSpec, StackImage, Window, program_output
from specplug.plan import Plan

METHODS: dict[str, tuple[Window, ...]] = {
    "ngram": (Window("ngram", "2.0.0"),),
    "medusa": (Window("medusa", "2.0.0"),),
    "mlp_speculator": (Window("mlp_speculator", "2.0.0"),),
}
_NONE = "TGI speculates only with n-gram, Medusa heads or MLP speculators (no draft models, EAGLE or MTP)."
UNSUPPORTED = {m: _NONE for m in ("draft_model", "eagle", "eagle3", "mtp", "suffix", "lookahead")}

SERVE_FLAGS = {
    "host": "--hostname",
    "port": "--port",
    "tp": "--num-shard",
    "max_num_seqs": "--max-batch-size",
    "max_model_len": "--max-total-tokens",
    "dtype": "--dtype",
}


class TGIAdapter(BaseAdapter):
    name = "tgi"
    display_name = "TGI (text-generation-inference)"
    install_hint = "docker pull ghcr.io/huggingface/text-generation-inference (or build text-generation-launcher)"
    executables = ("text-generation-launcher",)
    method_table = METHODS
    unsupported: ClassVar[dict[str, str]] = UNSUPPORTED
    oldest = "2.0.0"
    image = StackImage("ghcr.io/huggingface/text-generation-inference", "{version}", "/data")

    def installed_version(self) -> str | None:
        out = program_output(["text-generation-launcher", "--version"])
        m = re.search(r"(\d+\.\d+\.\d+)", out or "")
        return m.group(1) if m else None

    def build(self, plan: Plan, version: str | None) -> LaunchSpec:
        c = canon(plan, self.display_name)
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
        }
        for key, flag in SERVE_FLAGS.items():
            v = values[key]
            if v is not None and not has_flag(c.extra_args, flag):
                argv += [flag, str(v)]
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
