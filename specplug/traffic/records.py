"""Reading logged traffic: one JSON object per line, each a request and the completion it got.

Formats recognised (per line, so one file may mix them):

- an OpenAI-style pair, ``{"request": {...}, "response": {...}}`` (a ``body`` wrapper is unwrapped, as in
  OpenAI batch files): ``/v1/completions`` (``prompt``, ``choices[0].text``) and ``/v1/chat/completions``
  (``messages``, ``choices[0].message.content``);
- ``{"prompt": "...", "completion": "..."}`` (``response`` or ``output`` also name the completion);
- ``{"messages": [...], "completion" | "response": "..."}``, or a conversation whose last message is the
  assistant's answer;
- anything else through a field map: ``prompt=input.text,completion=output`` names dotted paths (list
  indices as numbers: ``choices.0.text``); ``messages=`` may name a list of chat messages instead of a prompt.

Chat messages become one prompt text: contents joined by blank lines (the chat template's few tokens are left
out; they add nothing a copy-based drafter could copy).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from specplug.errors import UsageError

FORMATS_HELP = (
    'one JSON object per line: {"request": {...}, "response": {...}} (OpenAI completions or chat completions), '
    '{"prompt": ..., "completion": ...}, {"messages": [...], "completion": ...}, or other shapes with a field map '
    "such as --traffic-map prompt=input.text,completion=output"
)
MAP_KEYS = ("prompt", "completion", "messages", "time")
# Where a line says when its request arrived, first found wins: a log's own field, then the OpenAI response's
# 'created' (set when the server accepted the request). Unix seconds (milliseconds above 1e11) or ISO 8601.
TIME_KEYS = ("timestamp", "time", "arrival_time", "created_at", "created")
MAX_LISTED = 20

# The field map a command line gave (--traffic-map): load_traffic falls back to it when called without one,
# so the map reaches the reader through the policy code that calls load_traffic(path, model).
DEFAULT_FIELD_MAP: ContextVar[dict[str, str] | None] = ContextVar("specplug_traffic_field_map", default=None)
DEFAULT_PROGRESS: ContextVar[ReadProgress | None] = ContextVar("specplug_traffic_progress", default=None)


class ReadProgress(Protocol):
    """What load_traffic reports while it reads a file: its size, then the bytes read as they go. The CLI draws
    a bar with it; a script may pass its own, or nothing."""

    def start(self, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def using_field_map(text: str | dict[str, str] | None, progress: ReadProgress | None = None) -> Iterator[None]:
    """Make ``text`` (``prompt=a.b,completion=c``) the field map of every load_traffic call inside, and
    ``progress`` what each reports its reading to."""
    token = DEFAULT_FIELD_MAP.set(parse_field_map(text))
    ptoken = DEFAULT_PROGRESS.set(progress)
    try:
        yield
    finally:
        DEFAULT_FIELD_MAP.reset(token)
        DEFAULT_PROGRESS.reset(ptoken)


@dataclass
class Record:
    prompt: str
    completion: str
    arrived: float | None = None  # unix seconds the request arrived, where the line says


def arrival(obj: Any, field_map: dict[str, str] | None = None) -> float | None:
    """When the request on this line arrived (unix seconds), or None where the line does not say."""
    if field_map and "time" in field_map:
        try:
            return _seconds(_get(obj, field_map["time"]))
        except _Bad:
            return None
    places = [obj]
    if isinstance(obj.get("request"), dict) or isinstance(obj.get("response"), dict):
        places += [_unwrap(obj.get("request")), _unwrap(obj.get("response"))]
    for place in places:
        if isinstance(place, dict):
            for key in TIME_KEYS:
                if key in place and (t := _seconds(place[key])) is not None:
                    return t
    return None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) / 1000 if value > 1e11 else float(value)
    if isinstance(value, str) and value.strip():
        from datetime import datetime

        try:
            t = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return t.timestamp()
    return None


@dataclass
class ReadStats:
    lines: int = 0
    records: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)

    def bad(self, line: int, reason: str) -> None:
        self.malformed += 1
        if len(self.malformed_lines) < MAX_LISTED:
            self.malformed_lines.append(line)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


class _Bad(Exception):
    pass


def parse_field_map(text: str | dict[str, str] | None) -> dict[str, str] | None:
    """``prompt=a.b,completion=c`` (or a dict) -> {"prompt": "a.b", "completion": "c"}, validated."""
    if text is None or text == "":
        return None
    if isinstance(text, dict):
        pairs = dict(text)
    else:
        pairs = {}
        for part in text.split(","):
            if not part.strip():
                continue
            key, sep, path = part.partition("=")
            if not sep or not path.strip():
                raise UsageError(f"Bad traffic field map entry '{part}'.", "Write KEY=dotted.path, e.g. prompt=input.text,completion=output.")
            pairs[key.strip()] = path.strip()
    unknown = sorted(set(pairs) - set(MAP_KEYS))
    if unknown:
        raise UsageError(f"Unknown traffic field map key(s): {', '.join(unknown)}.", f"Use {', '.join(MAP_KEYS)}.")
    if "completion" not in pairs or not ({"prompt", "messages"} & set(pairs)):
        raise UsageError("A traffic field map needs completion= and prompt= (or messages=).",
                            "For example: --traffic-map prompt=input.text,completion=output.")
    return pairs


def _get(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict):
            if part not in cur:
                raise _Bad(f"no field '{path}'")
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit():
            i = int(part)
            if not -len(cur) <= i < len(cur):
                raise _Bad(f"no field '{path}'")
            cur = cur[i]
        else:
            raise _Bad(f"no field '{path}'")
    return cur


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    if c is None:
        return ""
    raise _Bad("message content is neither text nor a list of parts")


def _messages_text(msgs: Any) -> str:
    if not isinstance(msgs, list):
        raise _Bad("'messages' is not a list")
    parts = []
    for m in msgs:
        if not isinstance(m, dict):
            raise _Bad("a message is not an object")
        parts.append(_content(m.get("content")))
    return "\n\n".join(p for p in parts if p)


def _prompt_text(p: Any) -> str:
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
        return p[0]  # a batched completions request: the first prompt goes with choices[0]
    if isinstance(p, list) and p and all(isinstance(x, dict) for x in p):
        return _messages_text(p)
    raise _Bad("the prompt is not text")


def _completion_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, dict):
        if "choices" in c:
            return _choice_text(c)
        if "content" in c:
            return _content(c["content"])
        if "text" in c:
            return _completion_text(c["text"])
    raise _Bad("the completion is not text")


def _choice_text(resp: dict) -> str:
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Bad("the response has no choices")
    ch = choices[0]
    if isinstance(ch.get("message"), dict):
        return _content(ch["message"].get("content"))
    if "text" in ch:
        return _content(ch["text"])
    if isinstance(ch.get("delta"), dict):
        return _content(ch["delta"].get("content"))
    raise _Bad("choices[0] has neither text nor message.content")


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, dict) and isinstance(obj.get("body"), dict):
        return obj["body"]
    return obj


def extract(obj: Any, field_map: dict[str, str] | None = None) -> Record:
    """One record from one parsed line, or _Bad saying why not."""
    if not isinstance(obj, dict):
        raise _Bad("the line is not a JSON object")
    if field_map:
        if "messages" in field_map:
            prompt = _messages_text(_get(obj, field_map["messages"]))
        else:
            prompt = _prompt_text(_get(obj, field_map["prompt"]))
        return Record(prompt, _completion_text(_get(obj, field_map["completion"])))
    if "request" in obj and "response" in obj:
        req, resp = _unwrap(obj["request"]), _unwrap(obj["response"])
        if not isinstance(req, dict):
            raise _Bad("'request' is not an object")
        if "messages" in req:
            prompt = _messages_text(req["messages"])
        elif "prompt" in req:
            prompt = _prompt_text(req["prompt"])
        else:
            raise _Bad("the request has neither 'prompt' nor 'messages'")
        return Record(prompt, _completion_text(resp))
    comp = next((obj[k] for k in ("completion", "response", "output") if k in obj), None)
    if "prompt" in obj:
        if comp is None:
            raise _Bad("a 'prompt' without 'completion'")
        return Record(_prompt_text(obj["prompt"]), _completion_text(comp))
    if "messages" in obj:
        msgs = obj["messages"]
        if comp is None:
            # A logged conversation: the last assistant message is the completion, what precedes it the prompt.
            if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "assistant":
                return Record(_messages_text(msgs[:-1]), _content(msgs[-1].get("content")))
            raise _Bad("'messages' without a completion (and the last message is not the assistant's)")
        return Record(_messages_text(msgs), _completion_text(comp))
    raise _Bad("unrecognised shape (keys: " + ", ".join(sorted(obj)[:6]) + ")")


def read_records(fh: Any, stats: ReadStats, field_map: dict[str, str] | None = None) -> Iterator[Record]:
    """Records from a binary file handle, line by line (the file is never read whole)."""
    for n, raw in enumerate(fh, 1):
        stats.lines = n
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            stats.bad(n, "not valid JSON")
            continue
        try:
            rec = extract(obj, field_map)
        except _Bad as exc:
            stats.bad(n, str(exc))
            continue
        if not rec.completion:
            stats.bad(n, "empty completion")
            continue
        rec.arrived = arrival(obj, field_map)
        stats.records += 1
        yield rec
