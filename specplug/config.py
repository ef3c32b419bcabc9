"""specplug.yaml: the schema (pydantic v2), loading with line-accurate errors, and JSON Schema export.

A file looks like::

    version: 1
    model: llama-3.1-70b
    stack: vllm                 # or {name: vllm, version: "0.10.2"}
    hardware: auto              # or {gpu: h100, num_gpus: 4}
    workload: {type: chat, concurrency: 16, input_len: 1024, output_len: 256, temperature: 0.0}
    speculation: auto           # or {method: eagle3, drafter: ..., num_speculative_tokens: 3}
    serve: {host: 127.0.0.1, port: 8000}
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from specplug.errors import ConfigError
from specplug.methods import COPY_METHODS, METHODS, MODEL_METHODS
from specplug.safetext import EnvName, Host, NoNul, OneLine

SCHEMA_VERSION = 1
DEFAULT_CONFIG = "specplug.yaml"

# The methods' names as types, from the one method table (specplug.methods).
Method = Literal[METHODS]  # type: ignore[valid-type]
CopyMethod = Literal[COPY_METHODS]  # type: ignore[valid-type]
ModelMethod = Literal[MODEL_METHODS]  # type: ignore[valid-type]
# Spec-Bench's and SpecDecode-Bench's categories and the names people use for mixed/instruction traffic.
Workload = Literal[
    "chat", "code", "code-edit", "rag", "summarization", "math", "reasoning", "translation", "qa", "creative", "agent",
    "instruction", "multi-turn", "long-context", "mixed",
]
WORKLOADS: tuple[str, ...] = Workload.__args__  # type: ignore[attr-defined]
# A stack's name as an adapter registers it (built-in or through the specplug.adapters entry points). Whether one
# is installed is asked where a plan is made (specplug.stackcaps), so a config or lock naming a plugin that is not
# installed here still loads.
StackName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]


def _unset(value: Any) -> bool:
    """Fields added after locks were first written are left out of dumps while unset (exclude_if), so a config that
    does not use them keeps its lock digest and render hash."""
    return value is None or value is False


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


class StackSpec(Strict):
    name: StackName = Field("vllm", description="Serving stack to configure.")
    version: OneLine | None = Field(None, description="Stack version to render for; default: the installed one.")


class HardwareSpec(Strict):
    gpu: OneLine | None = Field(None, description="GPU catalog name or alias (see 'specplug gpus'), or a spec memory_gib=..,bandwidth_gbs=..,bf16_tflops=..; default: probed.")
    num_gpus: int | None = Field(None, ge=1, le=1024, description="GPUs per deployment (all nodes).")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs in one node; more GPUs means several nodes.")


class WorkloadSpec(Strict):
    type: Workload = Field("chat", description="What the traffic looks like; drives acceptance priors.")
    concurrency: int = Field(1, ge=1, le=4096, description="Expected concurrent requests (decode batch size).")
    input_len: int = Field(1024, ge=1, le=2_000_000, description="Typical prompt length in tokens.")
    output_len: int = Field(256, ge=1, le=1_000_000, description="Typical output length in tokens.")
    temperature: float = Field(0.0, ge=0.0, le=5.0, description="Sampling temperature; 0 is greedy.")
    traffic: OneLine | None = Field(
        None, description="JSONL file of logged requests and completions; its measured shape and acceptance replace the type's prior."
    )
    multimodal: bool = Field(
        False, exclude_if=_unset,
        description="Requests carry images, audio or video: the planner avoids methods known broken with multimodal input.",
    )
    request_rate: float | None = Field(
        None, gt=0.0, le=1e6, exclude_if=_unset,
        description="Requests per second arriving (Poisson): the plan predicts the running batch, TPOT, TTFT and "
        "throughput at this rate, with and without speculation, and plans for the batch the rate keeps running.",
    )
    slo_tpot_ms: float | None = Field(
        None, gt=0.0, exclude_if=_unset,
        description="Target p90 time per output token (ms): the plan reports the highest request rate each arm sustains within it.",
    )
    slo_ttft_ms: float | None = Field(
        None, gt=0.0, exclude_if=_unset,
        description="Target p90 time to first token (ms): the plan reports the highest request rate each arm sustains within it.",
    )


# Speculation fields the config and the Plan both hold, stated once.
AcceptanceFloor = Annotated[float | None, Field(
    gt=0.0,
    lt=1.0,
    description="Acceptance rate (accepted / drafted tokens) under which speculation stops for good, on stacks with an "
    "acceptance gate (TensorRT-LLM); the planner sets it to where speculation stops paying when acceptance is a prior.",
)]
DraftSampling = Annotated[Literal["greedy", "probabilistic"] | None, Field(
    description="How the drafter proposes: 'greedy' (its argmax, scored as certain) or 'probabilistic' (sampled, its "
    "whole distribution used in the rejection test: more accepted at temperature > 0, more memory). Default: the "
    "stack's own (greedy).",
)]
Verification = Annotated[Literal["standard", "block", "fly"] | None, Field(
    description="How drafts are verified: 'standard' (token by token) or 'block' (jointly, as one block: still lossless, "
    "accepts more at temperature > 0, the same at 0); 'fly' (vLLM's FLy: accepts some drafts the target rejects, so "
    "LOSSY: output differs from the target's, needs allow_lossy: true). Default: the stack's own (standard).",
)]
# Verifiers that do not preserve the target's output distribution: refused unless speculation.allow_lossy.
LOSSY_VERIFICATION: tuple[str, ...] = ("fly",)
AllowLossy = Annotated[bool, Field(
    exclude_if=_unset,
    description="Accept a lossy verifier (verification: fly): outputs may differ from the target model's own. specplug "
    "refuses one otherwise, and marks every prediction made with it 'lossy'.",
)]


class TreeSpec(Strict):
    steps: int = Field(ge=1, le=64)
    topk: int = Field(ge=1, le=64)
    num_draft_tokens: int = Field(ge=1, le=1024)


class ScheduleEntry(Strict):
    """Draft length to use while the running batch is within [min_batch, max_batch] (max None = no limit)."""

    min_batch: int = Field(ge=1)
    max_batch: int | None = Field(None, ge=1)
    num_speculative_tokens: int = Field(ge=0, le=64)


class SpeculationSpec(Strict):
    """``speculation:`` in specplug.yaml. A file is read as the member of :data:`Speculation` its ``method`` names,
    which holds that kind of method's own rules; this base is what code builds and reads."""

    # A SpeculationSpec built in code is checked as its method's member when it enters a Config.
    model_config = ConfigDict(from_attributes=True)

    method: Method = Field(description="Speculation technique.")
    drafter: OneLine | None = Field(None, description="Draft model / head: catalog id, HF id or local folder.")
    num_speculative_tokens: int | None = Field(None, ge=0, le=64, description="Draft length k.")
    tree: TreeSpec | None = None
    prompt_lookup_min: int | None = Field(None, ge=1, le=64)
    prompt_lookup_max: int | None = Field(None, ge=1, le=64)
    schedule: list[ScheduleEntry] | None = None
    draft_tensor_parallel_size: int | None = Field(None, ge=1)
    acceptance_floor: AcceptanceFloor = None
    draft_sampling: DraftSampling = None
    verification: Verification = None
    allow_lossy: AllowLossy = False

    @model_validator(mode="after")
    def _as_its_method(self) -> SpeculationSpec:
        if type(self) is SpeculationSpec:  # built in code: held to its method's rules all the same
            try:
                _members().validate_python(self.model_dump(exclude_unset=True))
            except ValidationError as exc:
                raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self


class NoSpeculation(SpeculationSpec):
    """Plain decoding."""

    method: Literal["none"] = Field(description="Speculation technique.")

    @model_validator(mode="after")
    def _nothing_to_control(self) -> NoSpeculation:
        given = [f for f in ("acceptance_floor", "draft_sampling", "verification") if getattr(self, f) is not None]
        given += ["allow_lossy"] if self.allow_lossy else []
        if given:
            raise ValueError(f"{', '.join(given)} shape speculation, and method 'none' does not speculate: remove "
                             f"{'it' if len(given) == 1 else 'them'} or pick a method")
        return self


class CopySpeculation(SpeculationSpec):
    """Drafts copied from text already seen (the prompt, earlier output): n-gram lookup (on the host, or on the GPU:
    ngram_gpu), suffix trees, lookahead."""

    method: CopyMethod = Field(description="Speculation technique.")

    @model_validator(mode="after")
    def _lookup_window(self) -> CopySpeculation:
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) must not exceed prompt_lookup_max ({hi})")
        if self.draft_sampling is not None:
            raise ValueError(f"draft_sampling applies to drafters; {self.method} copies its drafts from text (no "
                             "distribution to sample): remove it")
        if self.verification in LOSSY_VERIFICATION:
            raise ValueError(f"verification {self.verification} applies to drafters; {self.method} copies its drafts "
                             "from text: remove it")
        return self


class DrafterSpeculation(SpeculationSpec):
    """Drafts from a model: a separate draft model, a head trained on the target (EAGLE, Medusa, MLP, a DFlash
    block-diffusion drafter, a DSpark block drafter) or the target's own MTP layers."""

    method: ModelMethod = Field(description="Speculation technique.")


# speculation: as specplug.yaml gives it, read as the member its method names.
Speculation = Annotated[NoSpeculation | CopySpeculation | DrafterSpeculation, Field(discriminator="method")]


@cache
def _members() -> TypeAdapter[Any]:
    return TypeAdapter(Speculation)


# A LoRA adapter's name as clients ask for it (the OpenAI 'model' field), and the largest rank a stack takes.
LoraName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
# Structured-output (guided decoding) backends as the stacks name them; true: the stack's default one.
StructuredOutputBackend = Literal["auto", "xgrammar", "guidance", "llguidance", "outlines", "lm-format-enforcer"]


class LoraSpec(Strict):
    """serve.lora: LoRA adapters served on top of the target (speculation drafts for the base model)."""

    adapters: dict[LoraName, OneLine] = Field(
        default_factory=dict, description="Adapter name (what requests ask for) -> its Hugging Face id or folder."
    )
    max_rank: int | None = Field(None, ge=1, le=1024, description="The largest LoRA rank among the adapters.")


class ServeOptions(Strict):
    """How the server is run, apart from how it is split over GPUs (the Plan keeps that in ``parallelism``).

    lora, structured_output, prefix_caching and reasoning_parser say which features the deployment uses, so
    plans avoid combinations a stack release is known to break with speculation (specplug.compat)."""

    host: Host = Field("127.0.0.1", description="Bind address; loopback unless you mean to expose it.")
    port: int = Field(8000, ge=1, le=65535)
    max_model_len: int | None = Field(None, ge=16)
    max_num_seqs: int | None = Field(None, ge=1)
    dtype: OneLine = Field("auto", description="Activation dtype: auto, bfloat16, float16 (fp8 here means quantization: fp8).")
    quantization: OneLine | None = Field(
        None,
        description="Weight format to serve (fp8, int4-awq, int4-gptq, mxfp4, nvfp4, int8, GGUF q4_k_m ...); default: the checkpoint's own.",
    )
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="KV-cache dtype; fp8 halves the cache of a 16-bit model."
    )
    api_key_env: EnvName | None = Field(
        None, description="Name of the environment variable holding the API key (never the key itself)."
    )
    extra_args: list[NoNul] = Field(default_factory=list, description="Extra engine arguments, passed verbatim.")
    env: dict[EnvName, NoNul] = Field(default_factory=dict, description="Extra non-secret environment variables.")
    lora: LoraSpec | None = Field(None, exclude_if=_unset, description="LoRA adapters served with the target.")
    structured_output: bool | StructuredOutputBackend = Field(
        False, exclude_if=_unset,
        description="Requests use structured output (JSON schema, regex, grammar): true, or the backend's name.",
    )
    prefix_caching: bool | None = Field(
        None, exclude_if=lambda v: v is None, description="Reuse the KV cache of shared prompt prefixes (unset: the stack's default).",
    )
    reasoning_parser: OneLine | None = Field(
        None, exclude_if=_unset,
        description="The stack's reasoning parser for a thinking model (deepseek_r1, qwen3, kimi_k2 ...).",
    )

    @field_validator("quantization")
    @classmethod
    def _known_format(cls, v: str | None) -> str | None:
        if v is None or v.lower() in ("auto", "none"):
            return None
        from specplug.catalog.precision import get_weight_format
        from specplug.errors import CatalogError

        try:
            return get_weight_format(v).name
        except CatalogError as exc:
            raise ValueError(f"{exc.message} {exc.hint}") from None


# The keys of serve: that ask for a split; the planner resolves them into Plan.parallelism.
PARALLEL_KEYS = ("tensor_parallel_size", "pipeline_parallel_size")


class ServeSpec(ServeOptions):
    """serve: in specplug.yaml: the server options plus the split the user asks for."""

    tensor_parallel_size: int | None = Field(None, ge=1, description="Default: enough GPUs for the model.")
    pipeline_parallel_size: int = Field(1, ge=1)

    def options(self) -> ServeOptions:
        """Everything but the split, as the Plan carries it."""
        return ServeOptions.model_validate(self.model_dump(exclude=set(PARALLEL_KEYS), exclude_unset=True))


class Config(Strict):
    """The whole of specplug.yaml."""

    version: int = Field(SCHEMA_VERSION, description="Schema version of this file.")
    model: OneLine | None = Field(None, description="Model alias, Hugging Face id or local folder.")
    stack: StackSpec = Field(default_factory=StackSpec)
    hardware: Literal["auto"] | HardwareSpec = "auto"
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    speculation: Literal["auto"] | Speculation = "auto"
    serve: ServeSpec = Field(default_factory=ServeSpec)
    policy: dict[str, Any] = Field(default_factory=dict, description="Overrides merged onto the default policy.")
    calibration: OneLine | None = Field(None, description="Calibration file written by 'specplug calibrate'.")
    fallback: Literal["none", "embedded"] = Field("none", description="What 'launch' runs if the stack can't.")

    @field_validator("stack", mode="before")
    @classmethod
    def _stack_shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v > SCHEMA_VERSION:
            raise ValueError(f"schema version {v} is newer than this specplug understands ({SCHEMA_VERSION}); upgrade specplug")
        if v < 1:
            raise ValueError("schema version must be 1 or more")
        return v

    def hardware_spec(self) -> HardwareSpec:
        return self.hardware if isinstance(self.hardware, HardwareSpec) else HardwareSpec()


def json_schema(stacks: Sequence[str]) -> dict[str, Any]:
    """specplug.yaml's JSON Schema, with ``stacks`` (the registered ones) as the stack names editors offer."""
    schema = Config.model_json_schema()
    # The loader also takes the shorthand 'stack: vllm'; say so in the schema editors see.
    stack = schema["properties"]["stack"]
    schema["properties"]["stack"] = {
        "anyOf": [{"$ref": "#/$defs/StackSpec"}, {"enum": list(stacks), "type": "string"}],
        "description": "Stack name, or {name, version}.",
        "default": stack.get("default"),
    }
    schema["$defs"]["StackSpec"]["properties"]["name"]["enum"] = list(stacks)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "specplug.yaml"
    return schema


# ---------------------------------------------------------------------------------------------- loading


def find_config(path: str | None) -> Path | None:
    """The explicit file, else ./specplug.yaml when it exists, else None."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"Config file '{path}' does not exist.", "Create one with 'specplug init --model M'.")
        return p
    default = Path(DEFAULT_CONFIG)
    return default if default.is_file() else None


def load_config(path: str | Path) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read {p}: {exc.strerror}.") from None
    return parse_config(text, str(p))


def parse_config(text: str, filename: str = DEFAULT_CONFIG) -> Config:
    import yaml

    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}.", "Fix the syntax at that line.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{filename}: the top level must be a mapping of keys (model:, stack:, ...).")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, root, filename)) from None


def explain_options(exc: ValidationError) -> str:
    """A validation error of flags laid over the config: one line per option, named by its config key."""
    return _explain(exc, None, "", heading="Invalid options")


def _explain(exc: ValidationError, root: Any, filename: str, heading: str = "Invalid specplug.yaml") -> str:
    lines = []
    errors = [(err, [p for p in err["loc"] if not _is_union_tag(p)]) for err in exc.errors()]
    for err, loc in errors:
        # "auto" | {mapping}: when a mapping was given, the 'should be auto' branch is noise.
        if err["type"] == "literal_error" and isinstance(err.get("input"), dict):
            continue
        if err["type"] in ("model_type", "dict_type", "model_attributes_type") and any(
            e["type"] == "literal_error" and o == loc for e, o in errors
        ):
            continue
        if err["type"] in ("union_tag_not_found", "union_tag_invalid"):
            # The member is chosen by the discriminator (speculation.method): report that key.
            disc = str((err.get("ctx") or {}).get("discriminator", "method")).strip("'")
            loc = [*loc, disc]
            expected = ", ".join(repr(m) for m in METHODS[:-1]) + f" or {METHODS[-1]!r}"
            err = {**err, "msg": "Field required" if err["type"] == "union_tag_not_found" else f"Input should be {expected}"}
        key = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(root, loc)
        where = f"{filename}:{line}" if line else filename
        where = where or key
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            tip = f" Did you mean '{close[0]}'?" if close else ""
            lines.append(f"{where}: unknown key '{key}'.{tip} Allowed here: {', '.join(allowed)}.")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {msg}." if where == key else f"{where}: {key}: {msg}.")
    # Union errors repeat per branch; keep each message once, in order.
    seen: list[str] = []
    for ln in lines:
        if ln not in seen:
            seen.append(ln)
    return f"{heading}:\n  " + "\n  ".join(seen[:12])


def _is_union_tag(part: Any) -> bool:
    # Union members in a location: 'literal[...]', 'tagged-union[...]', model names, and the method that chose
    # the speculation member.
    return isinstance(part, str) and (
        part.startswith(("literal[", "function-", "tagged-union[")) or part in {"HardwareSpec", "SpeculationSpec", *METHODS}
    )


def _allowed_keys(loc: list[Any]) -> list[str]:
    model: Any = Config
    for part in loc:
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        models = _models_in(field.annotation)
        if not models:
            return []
        model = models[-1]  # the members of a union of models share their keys (SpeculationSpec's)
    return list(model.model_fields)


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names, through unions, Annotated and containers."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in getattr(ann, "__args__", ()) for m in _models_in(a)]


def _line_of(node: Any, loc: list[Any]) -> int | None:
    """Line (1-based) of the YAML node at ``loc``, or of the deepest ancestor found."""
    import yaml

    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def dump_config(cfg: Config) -> str:
    import yaml

    return yaml.safe_dump(cfg.model_dump(mode="json", exclude_defaults=False), sort_keys=False)
