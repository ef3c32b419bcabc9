"""Pieces every built-in adapter needs: reading canonical plan fields once, with the same checks everywhere.

Stack-specific spellings stay in each adapter's tables; this module only knows specplug's canonical terms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specplug.catalog.hub import named_revision
from specplug.errors import StackError
from specplug.plan import Plan
from specplug.stacks.protocol import Problem

# Variables a server reads for hub access: passed through from the caller's environment, never written down.
HUB_SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


@dataclass
class Canon:
    """The plan's canonical choices, validated once: what every adapter renders from."""

    model: str
    method: str
    drafter: str | None  # without the revision a Hub drafter was named at ('org/head@v1' -> 'org/head')
    drafter_revision: str | None
    k: int
    tp: int
    pp: int
    host: str
    port: int
    max_model_len: int | None
    revision: str | None
    max_num_seqs: int | None
    dtype: str | None
    extra_args: list[str]
    env: dict[str, str]
    api_key_env: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def speculating(self) -> bool:
        return self.method != "none"


def canon(plan: Plan, display_name: str) -> Canon:
    """The plan's canonical choices, for a plan the adapter's problems() (which hold :func:`canon_problems`) passed."""
    s, serve = plan.speculation, plan.serve
    method = s.method
    tp, pp = plan.parallelism.tensor_parallel_size, plan.parallelism.pipeline_parallel_size
    dtype = None if serve.dtype in ("auto", "") else serve.dtype
    p = precision(plan)
    if dtype is None and p.served != p.checkpoint and p.served in DTYPE_OF_FORMAT and p.checkpoint_bits >= 16:
        dtype = DTYPE_OF_FORMAT[p.served]  # 16-bit to another 16-bit format: a cast at load, which --dtype is
    drafter_at = named_revision(s.drafter) if s.drafter else None
    return Canon(
        model=plan.model.local_path or plan.model.hf_id,
        method=method,
        drafter=s.drafter.partition("@")[0] if drafter_at else s.drafter,
        drafter_revision=drafter_at,
        k=s.num_speculative_tokens,
        tp=tp,
        pp=pp,
        host=serve.host,
        port=serve.port,
        max_model_len=serve.max_model_len,
        revision=plan.model.revision,
        max_num_seqs=serve.max_num_seqs,
        dtype=dtype,
        extra_args=list(serve.extra_args),
        env=dict(serve.env),
        api_key_env=serve.api_key_env,
        notes=feature_notes(plan),
    )


def feature_notes(plan: Plan) -> list[str]:
    """What the render says about the features specplug plans around but does not turn on: the plan was checked
    against the stack's compatibility table with them; the stack's own flags for them go in serve.extra_args."""
    from specplug.compat import FEATURES, PLANNED_ONLY, serve_features

    on = serve_features(plan.serve, plan.workload, 1) & frozenset(PLANNED_ONLY)
    if not on:
        return []
    return [f"Planned with {', '.join(FEATURES[f] for f in sorted(on))}: checked against this release's known "
            "incompatibilities with speculation, but not rendered; add the stack's own flags for them with serve.extra_args."]


def require_drafter(c: Canon, display_name: str, method: str) -> str:
    if not c.drafter:  # problems() reports this first; kept for adapters that skip it
        raise StackError(
            f"'{method}' on {display_name} needs a drafter (draft model or head), and the plan has none.",
            "Pass --drafter HF_ID_OR_FOLDER, or pick a drafter-free method such as ngram.",
        )
    return c.drafter


def url(host: str, port: int, path: str = "") -> str:
    """A URL clients on this machine can use: a wildcard bind is reached through loopback."""
    h = "127.0.0.1" if host in ("0.0.0.0", "", "*") else ("[::1]" if host == "::" else host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}{path}"


# ---------------------------------------------------------------------------------------------- precision

# 16-bit weight formats -> the activation dtype name stacks take in --dtype.
DTYPE_OF_FORMAT = {"bf16": "bfloat16", "fp16": "float16"}
# KV dtypes that only name the 16-bit cache a model gets anyway (no stack needs a flag for its own dtype).
KV_16BIT = ("bfloat16", "float16")


@dataclass(frozen=True)
class Precision:
    """What the plan serves: the checkpoint's own weight format, the one to serve, and the KV-cache dtype."""

    checkpoint: str  # weight_formats.csv name
    served: str
    kv_cache_dtype: str
    checkpoint_bits: float
    served_bits: float
    served_kind: str  # float | integer | gguf

    @property
    def converts(self) -> bool:
        """True when the stack must produce another format than the checkpoint's (16-bit to 16-bit is not)."""
        if self.served == self.checkpoint:
            return False
        return not (self.served_bits >= 16 and self.checkpoint_bits >= 16)

    @property
    def quantizes_16bit(self) -> bool:
        """A 16-bit checkpoint served in a quantized format (the stack quantizes at load)."""
        return self.converts and self.checkpoint_bits >= 16

    @property
    def dequantizes(self) -> bool:
        return self.converts and self.checkpoint_bits < 16 and self.served_bits >= 16


def precision(plan: Plan) -> Precision:
    from specplug.catalog.precision import get_weight_format
    from specplug.errors import CatalogError

    try:
        ck = get_weight_format(plan.model.weight_format or "bf16")
    except CatalogError:
        ck = get_weight_format("bf16")  # an unknown checkpoint format is read as the usual release format
    served = get_weight_format(plan.serve.quantization) if plan.serve.quantization else ck
    return Precision(ck.name, served.name, plan.serve.kv_cache_dtype or "auto", ck.bits_per_weight,
                     served.bits_per_weight, served.kind)


def gguf_types() -> list[str]:
    from specplug.catalog.precision import weight_formats

    return [f.name for f in weight_formats() if f.kind == "gguf"]


def quantization_problems(
    p: Precision, display_name: str, version: str | None, online: dict[str, str | None], prequantized: tuple[str, ...]
) -> list[Problem]:
    """The weight-format checks stacks share.

    ``online``: served format -> None when the stack quantizes a 16-bit checkpoint to it at load at ``version``,
    else why not; ``prequantized``: formats it serves only from a checkpoint already in them (read from its config).
    """
    if not p.converts:
        return []
    at = f"{display_name} {version or '(newest)'}"
    ok_online = [f for f, why in online.items() if why is None]
    online_hint = f"serve.quantization {' or '.join(ok_online)} (quantized at load)" if ok_online else None
    if p.served_kind == "gguf":
        return [Problem(
            f"{at} does not serve GGUF weights ({p.served}).",
            "Use stack llamacpp for GGUF files" + (f", or {online_hint}" if online_hint else "") + ".",
            key="serve.quantization",
        )]
    if p.dequantizes:
        return [Problem(
            f"{at} cannot turn the {p.checkpoint} checkpoint back into {p.served} weights.",
            f"Leave serve.quantization unset to serve it as {p.checkpoint}, or point model at an {p.served} checkpoint.",
            key="serve.quantization",
        )]
    if p.quantizes_16bit and online.get(p.served, "") is None:
        return []
    why = online.get(p.served)
    reason = f" ({why})" if why else ""
    if p.served in prequantized:
        lead = f"{at} serves {p.served} only from a checkpoint already quantized that way (it reads the format from the checkpoint's config){reason}; {p.checkpoint} is the model's own format."
    elif p.quantizes_16bit:
        lead = f"{at} cannot quantize the {p.checkpoint} checkpoint to {p.served}{reason}."
    else:
        lead = f"{at} cannot convert the {p.checkpoint} checkpoint to {p.served}."
    fixes = ["Leave serve.quantization unset to serve the checkpoint as it is",
             f"point model at an {p.served} checkpoint (and leave serve.quantization unset)"]
    if online_hint and p.checkpoint_bits >= 16:
        fixes.append(f"use {online_hint}")
    return [Problem(lead, ", ".join(fixes[:-1]) + ", or " + fixes[-1] + ".", key="serve.quantization")]


def kv_problems(kv: str, display_name: str, version: str | None, table: dict, extra: str = "") -> list[Problem]:
    """serve.kv_cache_dtype against a stack's table (canonical dtype -> windows of its spelling)."""
    from specplug.stacks.windows import describe_windows, spelling

    if kv == "auto" or spelling(table, kv, version) is not None:
        return []
    windows = table.get(kv, ())
    ok = [d for d in table if spelling(table, d, version) is not None]
    why = f"it needs {display_name} {describe_windows(windows)}" if windows else f"{display_name} has no such cache type"
    return [Problem(
        f"{display_name} {version or '(newest)'} cannot keep the KV cache as {kv}: {why}{extra}.",
        f"serve.kv_cache_dtype there: {', '.join(ok)}.",
        key="serve.kv_cache_dtype",
    )]


# ---------------------------------------------------------------------------------------------- drafters


def drafter_format(drafter: str | None) -> str:
    """The drafter's checkpoint format: its catalog row's, else read from a local folder's config.json."""
    if not drafter:
        return ""
    verifier = local_speculator_verifier(drafter)
    if verifier is not None:
        return "speculators"
    from specplug.catalog.drafters import find_drafter

    row = find_drafter(drafter)
    return row.format if row else ""


def local_speculator_verifier(drafter: str) -> str | None:
    """``speculators_config.verifier.name_or_path`` of a local speculators-format folder (None otherwise)."""
    cfg = Path(drafter) / "config.json"
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
        name = data["speculators_config"]["verifier"]["name_or_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None
