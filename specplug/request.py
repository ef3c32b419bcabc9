"""The plan flags (the CLI's and the Python API's, same names), laid over specplug.yaml by one rule.

recommend, plan, render and launch take the same :class:`PlanRequest`; values are checked where they land, as
the config's fields, so a bad flag is reported by the key it sets (``Invalid options: serve.host: ...``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from specplug.config import Config, explain_options
from specplug.errors import SpecplugError

# Flag -> where it lands in specplug.yaml.
WORKLOAD_FLAGS = {"concurrency": "concurrency", "input_len": "input_len", "output_len": "output_len",
                  "workload": "type", "temperature": "temperature", "traffic": "traffic", "multimodal": "multimodal",
                  "request_rate": "request_rate", "slo_tpot_ms": "slo_tpot_ms", "slo_ttft_ms": "slo_ttft_ms"}
SERVE_FLAGS = ("host", "port", "quantization", "kv_cache_dtype", "max_model_len", "structured_output", "reasoning_parser")
# On/off flags that can only turn a feature on (absent: the config's value stands).
SWITCHES = ("structured_output", "multimodal")


class PlanRequest(BaseModel):
    """What a command was asked for on top of the config: None (or empty) leaves the config's value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    stack: str | None = None
    stack_version: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    concurrency: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    workload: str | None = None
    temperature: float | None = None
    traffic: str | None = None
    request_rate: float | None = None
    slo_tpot_ms: float | None = None
    slo_ttft_ms: float | None = None
    method: str | None = None
    drafter: str | None = None
    num_speculative_tokens: int | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    host: str | None = None
    port: int | None = None
    extra_args: tuple[str, ...] = ()
    # Features that decide what speculation can be combined with (specplug.compat).
    structured_output: bool | str | None = None
    reasoning_parser: str | None = None
    multimodal: bool | None = None
    lora: tuple[str, ...] = ()  # NAME=PATH, added to serve.lora.adapters

    @classmethod
    def from_flags(cls, *, batch_size: int | None = None, **flags: Any) -> PlanRequest:
        """From keyword flags; ``batch_size`` is another name for ``concurrency`` (decode batch size)."""
        if batch_size is not None and flags.get("concurrency") is None:
            flags["concurrency"] = batch_size
        if flags.get("traffic") is not None:
            flags["traffic"] = str(flags["traffic"])
        flags["extra_args"] = tuple(flags.get("extra_args") or ())
        flags["lora"] = tuple(flags.get("lora") or ())
        for switch in SWITCHES:
            flags[switch] = flags.get(switch) or None
        return cls(**flags)

    def overrides(self) -> bool:
        """Whether any flag changes what the config says (the stack version alone only picks a release)."""
        return any(v not in (None, ()) for k, v in self if k not in ("stack", "stack_version"))

    def apply(self, cfg: Config) -> Config:
        """``cfg`` with these flags on top, validated as a config; an invalid result names the option's key."""
        data = cfg.model_dump(exclude_unset=True)
        if self.model is not None:
            data["model"] = self.model
        self._stack(cfg, data)
        if self.gpu is not None or self.num_gpus is not None:
            hw = data.get("hardware") if isinstance(data.get("hardware"), dict) else {}
            data["hardware"] = {**hw, **_given(gpu=self.gpu, num_gpus=self.num_gpus)}
        workload = _given(**{key: getattr(self, flag) for flag, key in WORKLOAD_FLAGS.items()})
        if workload:
            data["workload"] = {**(data.get("workload") or {}), **workload}
        self._speculation(data)
        serve = _given(**{key: getattr(self, key) for key in SERVE_FLAGS})
        if serve or self.extra_args or self.lora:
            merged = {**(data.get("serve") or {}), **serve}
            if self.extra_args:
                merged["extra_args"] = [*merged.get("extra_args", []), *self.extra_args]
            if self.lora:
                lora = dict(merged.get("lora") or {})
                lora["adapters"] = {**(lora.get("adapters") or {}), **_lora_adapters(self.lora)}
                merged["lora"] = lora
            data["serve"] = merged
        try:
            return Config.model_validate(data)
        except ValidationError as exc:
            raise SpecplugError(explain_options(exc)) from None

    def _stack(self, cfg: Config, data: dict[str, Any]) -> None:
        if self.stack is None and self.stack_version is None:
            return
        name = self.stack or cfg.stack.name
        # A version pinned for another stack is not this one's: render sglang from a vLLM config plans sglang's own.
        version = self.stack_version if self.stack_version is not None else (
            cfg.stack.version if cfg.stack.name == name else None)
        data["stack"] = {"name": name, **({"version": version} if version is not None else {})}

    def _speculation(self, data: dict[str, Any]) -> None:
        if self.method is None and self.drafter is None and self.num_speculative_tokens is None:
            return
        given = data.get("speculation") if isinstance(data.get("speculation"), dict) else None
        if self.method is not None:
            spec = dict(given) if given and given.get("method") == self.method else {"method": self.method}
        elif given is not None:
            spec = dict(given)
        elif self.drafter is not None:
            # A drafter alone means "use this draft model or head": its method is the catalog's, else a draft model.
            from specplug.catalog.drafters import find_drafter

            known = find_drafter(self.drafter)
            spec = {"method": known.method if known else "draft_model"}
        else:
            raise SpecplugError("-k needs a technique to apply to.", "Add --method (ngram, draft_model, eagle3, ...).")
        spec.update(_given(drafter=self.drafter, num_speculative_tokens=self.num_speculative_tokens))
        data["speculation"] = spec


def _lora_adapters(pairs: tuple[str, ...]) -> dict[str, str]:
    """--lora NAME=PATH (repeatable) as serve.lora.adapters."""
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise SpecplugError(f"--lora {pair!r} is not NAME=PATH.", "Give each adapter as --lora NAME=HF_ID_OR_FOLDER.")
        out[name] = path
    return out


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
