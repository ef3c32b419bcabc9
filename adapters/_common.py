"""Pieces every built-in adapter needs: reading canonical plan fields once, with the same checks everywhere.

Stack-specific spellings stay in each adapter's tables; this module only knows specplug's canonical terms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specplug.errors import StackError
from specplug.plan import Plan

# Variables a server reads for hub access: passed through from the caller's environment, never written down.
HUB_SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Canon:
    """The plan's canonical choices, validated once: what every adapter renders from."""

    model: str
    method: str
    drafter: str | None
    k: int
    tp: int
    pp: int
    host: str
    port: int
    max_model_len: int | None
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
    s, serve = plan.speculation, plan.serve
    method = s.method
    if s.method != "none" and s.num_speculative_tokens <= 0 and s.method != "suffix":
        raise StackError(
            f"The plan uses '{s.method}' with num_speculative_tokens={s.num_speculative_tokens}.",
            "Set num_speculative_tokens (-k) to 1 or more, or method 'none'.",
        )
    if serve.api_key_env is not None and not _ENV_NAME.match(serve.api_key_env):
        raise StackError(
            f"serve.api_key_env must name an environment variable, got {serve.api_key_env!r}.",
            "Put the key in a variable (export MY_KEY=...) and set api_key_env: MY_KEY; never the key itself.",
        )
    for k in serve.env:
        if not _ENV_NAME.match(k):
            raise StackError(f"serve.env has an invalid variable name {k!r}.", "Use letters, digits and _.")
    lo, hi = s.prompt_lookup_min, s.prompt_lookup_max
    if lo is not None and hi is not None and lo > hi:
        raise StackError(
            f"prompt_lookup_min ({lo}) is larger than prompt_lookup_max ({hi}).",
            "Make prompt_lookup_min <= prompt_lookup_max.",
        )
    tp = serve.tensor_parallel_size or plan.parallelism.tensor_parallel_size
    pp = max(serve.pipeline_parallel_size, plan.parallelism.pipeline_parallel_size)
    return Canon(
        model=plan.model.local_path or plan.model.hf_id,
        method=method,
        drafter=s.drafter,
        k=s.num_speculative_tokens,
        tp=tp,
        pp=pp,
        host=serve.host,
        port=serve.port,
        max_model_len=serve.max_model_len,
        max_num_seqs=serve.max_num_seqs,
        dtype=None if serve.dtype in ("auto", "") else serve.dtype,
        extra_args=list(serve.extra_args),
        env=dict(serve.env),
        api_key_env=serve.api_key_env,
    )


def require_drafter(c: Canon, display_name: str, method: str) -> str:
    if not c.drafter:
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


def has_flag(args: list[str], *names: str) -> bool:
    """Whether the user's extra args already set one of ``names`` (then ours must not repeat it)."""
    return any(a == n or a.startswith(n + "=") for a in args for n in names)
