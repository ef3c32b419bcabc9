"""Request and response bodies of the OpenAI-compatible API, and OpenAI's error shape.

Requests speak vLLM's dialect: known fields are strict (integers must be JSON integers, not ``true`` or
``"5"``; numbers are range-checked), vLLM's extra sampling parameters (:data:`VLLM_EXTRAS`) are accepted,
and a field neither OpenAI nor vLLM defines is accepted and ignored as vLLM does (the app logs it and names
it in the ``X-Ignored-Fields`` header). Arguments the runtime cannot honour are accepted at their neutral
value (``n: 1``, ``presence_penalty: 0``, ``repetition_penalty: 1``...); any other value is a 400 that says
it is not supported, rather than being silently ignored.

Structured output (``response_format`` json_object / json_schema, and vLLM's ``guided_*`` / ``structured_outputs``)
is checked for shape here; the grammar itself is compiled by the app (:mod:`specplug.runtime.structured`), which
answers a grammar llguidance refuses with a 400 too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, StrictStr, model_validator

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]

# Hard ceilings that hold whatever the server's configured limits are (those are checked per request).
MAX_TOKENS_CEILING = 1 << 20
MAX_STOP_SEQUENCES = 8
MAX_STOP_LENGTH = 256
MAX_STOP_TOKEN_IDS = 256
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


class UnsupportedParameter(ValueError):
    """A known OpenAI argument at a value this server cannot honour."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool | None = None
    continuous_usage_stats: StrictBool | None = None


# vLLM's extra sampling parameters (its CompletionRequest / ChatCompletionRequest), stated once: name ->
# the neutral value, or None where the server honours every valid value. Non-neutral values of the others
# are refused in _check_common, so a client never gets silently different sampling.
VLLM_EXTRAS: dict[str, object] = {
    "ignore_eos": None,
    "include_stop_str_in_output": None,
    "skip_special_tokens": None,
    "spaces_between_special_tokens": None,
    "min_tokens": None,
    "stop_token_ids": None,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "length_penalty": 1.0,
    "use_beam_search": False,
}


class JsonSchemaFormat(BaseModel):
    """OpenAI's ``response_format.json_schema``: the schema is read from ``schema`` (vLLM also takes ``json_schema``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: StrictStr = Field("response", max_length=256)
    description: StrictStr | None = None
    schema_: dict[str, Any] | StrictBool | None = Field(None, alias="schema")
    strict: StrictBool | None = None

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "json_schema" in data and "schema" not in data:
            data = {**data, "schema": data["json_schema"]}
            del data["json_schema"]
        return data


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


# structured_outputs keys the server honours (vLLM's StructuredOutputsParams); others are a 400, not ignored.
STRUCTURED_OUTPUT_KEYS = frozenset({"json", "regex", "choice", "grammar", "json_object"})


class _Sampling(BaseModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    # Unknown fields are kept aside (model_extra) and ignored, as vLLM's OpenAIBaseModel does.
    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1, max_length=512, description="Served model name (see GET /v1/models).")
    max_tokens: Int | None = Field(None, ge=1, le=MAX_TOKENS_CEILING, description="Tokens to generate at most.")
    temperature: Float | None = Field(None, ge=0.0, le=2.0, description="0 is greedy. Default 1.")
    top_p: Float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass. Default 1.")
    top_k: Int | None = Field(None, ge=-1, le=MAX_TOKENS_CEILING, description="Keep the k likeliest; 0 or -1: off.")
    stop: StrictStr | list[StrictStr] | None = Field(None, description="Up to 8 strings that end the output.")
    seed: Int | None = Field(None, ge=SEED_MIN, le=SEED_MAX, description="Makes sampling reproducible.")
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    n: Int | None = Field(None, ge=1, le=128, description="Only 1 is supported.")
    user: StrictStr | None = Field(None, max_length=512)
    # Accepted only at their neutral values (checked below), because clients send them by default.
    presence_penalty: Float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[StrictStr, Float] | None = None
    # vLLM's extras (see VLLM_EXTRAS).
    ignore_eos: StrictBool | None = False
    include_stop_str_in_output: StrictBool | None = False
    skip_special_tokens: StrictBool | None = True
    spaces_between_special_tokens: StrictBool | None = True
    min_tokens: Int | None = Field(0, ge=0, le=MAX_TOKENS_CEILING)
    stop_token_ids: list[Annotated[int, Strict(), Field(ge=0)]] | None = Field(
        None, max_length=MAX_STOP_TOKEN_IDS, description="Token ids that end the output (counted, not in the text)."
    )
    repetition_penalty: Float | Int | None = Field(None, gt=0.0, le=100.0)
    min_p: Float | Int | None = Field(None, ge=0.0, le=1.0)
    length_penalty: Float | Int | None = None
    use_beam_search: StrictBool | None = False
    # Structured output: OpenAI's response_format, and vLLM's guided_* fields and structured_outputs (one at most).
    response_format: ResponseFormat | None = None
    guided_json: StrictStr | dict[str, Any] | None = None
    guided_regex: StrictStr | None = None
    guided_choice: list[StrictStr] | None = None
    guided_grammar: StrictStr | None = None
    structured_outputs: dict[str, Any] | None = None

    def structure(self) -> tuple[str, str, Any] | None:
        """The output's grammar as (request field, format for specplug.runtime.structured, spec), or None."""
        found: list[tuple[str, str, Any]] = []
        rf = self.response_format
        if rf is not None and rf.type == "json_object":
            found.append(("response_format", "json_schema", {"type": "object"}))
        elif rf is not None and rf.type == "json_schema":
            found.append(("response_format", "json_schema", rf.json_schema.schema_ if rf.json_schema else None))
        for name, fmt in (("guided_json", "json_schema"), ("guided_regex", "regex"), ("guided_choice", "choice"),
                          ("guided_grammar", "grammar")):
            if getattr(self, name) is not None:
                found.append((name, fmt, getattr(self, name)))
        so = self.structured_outputs or {}
        for key, fmt in (("json", "json_schema"), ("regex", "regex"), ("choice", "choice"), ("grammar", "grammar")):
            if so.get(key) is not None:
                found.append((f"structured_outputs.{key}", fmt, so[key]))
        if so.get("json_object"):
            found.append(("structured_outputs.json_object", "json_schema", {"type": "object"}))
        if len(found) > 1:
            raise UnsupportedParameter(found[1][0], "Send one structured-output constraint per request, got "
                                       + ", ".join(f[0] for f in found) + ".")
        return found[0] if found else None

    def ignored_fields(self) -> list[str]:
        """Fields neither OpenAI nor vLLM defines: accepted and ignored, as vLLM does."""
        return sorted(self.model_extra or {})

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @model_validator(mode="after")
    def _check_common(self) -> _Sampling:
        stops = self.stop_list()
        if len(stops) > MAX_STOP_SEQUENCES:
            raise UnsupportedParameter("stop", f"At most {MAX_STOP_SEQUENCES} stop sequences are supported, got {len(stops)}.")
        for s in stops:
            if not s or len(s) > MAX_STOP_LENGTH:
                raise UnsupportedParameter("stop", f"Each stop sequence must be 1 to {MAX_STOP_LENGTH} characters long.")
        if self.n not in (None, 1):
            raise UnsupportedParameter("n", "n > 1 is not supported by the embedded server; send one request per completion.")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                raise UnsupportedParameter(name, f"{name} is not supported by the embedded server; omit it or send 0.")
        if self.logit_bias:
            raise UnsupportedParameter("logit_bias", "logit_bias is not supported by the embedded server; omit it.")
        for name, neutral in VLLM_EXTRAS.items():
            value = getattr(self, name)
            if neutral is None or value is None:
                continue
            if isinstance(neutral, tuple):
                if value:
                    raise UnsupportedParameter(name, f"{name} is not supported by the embedded server; omit it.")
            elif value != neutral:
                raise UnsupportedParameter(
                    name, f"{name} is not supported by the embedded server; omit it or send {neutral!r}."
                )
        if self.response_format is not None and self.response_format.type == "json_schema":
            js = self.response_format.json_schema
            if js is None or js.schema_ is None:
                raise UnsupportedParameter(
                    "response_format", "response_format of type json_schema needs json_schema.schema (a JSON schema)."
                )
        unknown = sorted(set(self.structured_outputs or {}) - STRUCTURED_OUTPUT_KEYS)
        if unknown:
            raise UnsupportedParameter(
                "structured_outputs", f"structured_outputs.{unknown[0]} is not supported by the embedded server; "
                f"use one of {', '.join(sorted(STRUCTURED_OUTPUT_KEYS))}.",
            )
        self.structure()
        return self


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: StrictStr | list[StrictStr] | list[Int] | list[list[Int]] = Field(
        description="Text, or token ids; one prompt per request."
    )
    echo: StrictBool | None = False
    logprobs: Int | None = Field(None, ge=0, le=20, description="Log-probabilities of each token, with this many alternatives.")
    best_of: Int | None = Field(None, ge=1, le=128, description="Only 1 is supported.")
    suffix: StrictStr | None = Field(None, description="Not supported; omit it.")

    @model_validator(mode="after")
    def _check_completion(self) -> CompletionRequest:
        p = self.prompt
        if isinstance(p, list):
            if len(p) == 0:
                raise UnsupportedParameter("prompt", "prompt must not be empty.")
            if isinstance(p[0], str | list) and len(p) != 1:
                raise UnsupportedParameter(
                    "prompt", "Only one prompt per request is supported by the embedded server; send several requests."
                )
            if isinstance(p[0], list) and len(p[0]) == 0:
                raise UnsupportedParameter("prompt", "prompt must not be empty.")
        if self.logprobs is not None and self.echo:
            raise UnsupportedParameter(
                "logprobs", "logprobs with echo (the prompt's logprobs) are not supported by the embedded server; send one."
            )
        if self.best_of not in (None, 1):
            raise UnsupportedParameter("best_of", "best_of > 1 is not supported by the embedded server.")
        if self.suffix:
            raise UnsupportedParameter("suffix", "suffix (insertion) is not supported by the embedded server.")
        return self

    def prompt_text_or_ids(self) -> str | list[int]:
        p = self.prompt
        if isinstance(p, str):
            return p
        first = p[0]
        if isinstance(first, str):
            return first
        if isinstance(first, list):
            return list(first)
        return list(p)  # type: ignore[arg-type]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant"]
    content: StrictStr | list[TextPart] | None = None
    name: StrictStr | None = Field(None, max_length=256)

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


NO_TOOLS_HINT = (
    "Omit it; for arguments in a fixed shape, describe them as a JSON schema in "
    "response_format={'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}."
)


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=1024)
    max_completion_tokens: Int | None = Field(None, ge=1, le=MAX_TOKENS_CEILING, description="Alias of max_tokens.")
    logprobs: StrictBool | None = None
    top_logprobs: Int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    # OpenAI's deprecated function calling; refused like tools (known, so never silently ignored).
    functions: list[dict[str, Any]] | None = None
    function_call: StrictStr | dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check_chat(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise UnsupportedParameter("top_logprobs", "top_logprobs needs logprobs: true.")
        if self.tools:
            raise UnsupportedParameter("tools", "Tool calling is not supported by the embedded server. " + NO_TOOLS_HINT)
        if self.tool_choice not in (None, "none", "auto"):
            raise UnsupportedParameter("tool_choice", "Tool calling is not supported by the embedded server. " + NO_TOOLS_HINT)
        if self.functions:
            raise UnsupportedParameter(
                "functions", "The legacy 'functions' field (function calling) is not supported by the embedded server, "
                "nor is 'tools'. " + NO_TOOLS_HINT,
            )
        if self.function_call not in (None, "none", "auto"):
            raise UnsupportedParameter(
                "function_call", "The legacy 'function_call' field (function calling) is not supported by the embedded "
                "server. " + NO_TOOLS_HINT,
            )
        if (
            self.max_tokens is not None
            and self.max_completion_tokens is not None
            and self.max_tokens != self.max_completion_tokens
        ):
            raise UnsupportedParameter("max_completion_tokens", "max_tokens and max_completion_tokens disagree; send one.")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# ------------------------------------------------------------------------------------------ responses


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: dict[str, Any] | None = None
    finish_reason: Literal["stop", "length"] | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: dict[str, Any] | None = None
    finish_reason: Literal["stop", "length"] | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specplug"
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
