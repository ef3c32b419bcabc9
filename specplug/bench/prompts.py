"""Prompt sets: the built-in workloads shipped in ``workloads/*.jsonl`` and user JSONL files.

One JSON object per line, either ``{"prompt": "..."}`` (sent to /v1/completions) or
``{"messages": [{"role": "user", "content": "..."}]}`` (sent to /v1/chat/completions); optional ``id``
and ``max_tokens`` (a per-prompt cap under the command's ``--max-tokens``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplug.errors import SpecplugError


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The prompt as plain text (messages joined), for completions-only servers and for length counts."""
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(m["content"] for m in self.messages or [])

    def as_messages(self) -> list[dict[str, str]]:
        return list(self.messages) if self.messages is not None else [{"role": "user", "content": self.prompt or ""}]

    def api(self, mode: str) -> str:
        """Which OpenAI route this prompt goes to: 'chat' or 'completions'."""
        if mode != "auto":
            return mode
        return "chat" if self.messages is not None else "completions"


def builtin_workloads() -> list[str]:
    """Names of the shipped prompt sets (file stems under specplug/bench/workloads)."""
    from importlib import resources

    root = resources.files("specplug.bench").joinpath("workloads")
    return sorted(p.name.removesuffix(".jsonl") for p in root.iterdir() if p.name.endswith(".jsonl"))


def load_workload(name: str) -> list[Prompt]:
    from importlib import resources

    names = builtin_workloads()
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        hint = f"Did you mean '{close[0]}'? " if close else ""
        raise SpecplugError(
            f"Unknown workload '{name}'.",
            f"{hint}Built-in workloads: {', '.join(names)}; or pass your own with --prompts FILE.jsonl.",
        )
    f = resources.files("specplug.bench").joinpath("workloads", f"{name}.jsonl")
    return parse_jsonl(f.read_text(encoding="utf-8"), f"workload {name}")


def load_prompts_file(path: str | Path) -> list[Prompt]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecplugError(f"Prompts file {p} does not exist.", "Pass a JSONL file, or --workload NAME.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecplugError(f"Cannot read prompts file {p}: {exc}.") from None
    return parse_jsonl(text, str(p))


def parse_jsonl(text: str, where: str) -> list[Prompt]:
    """Parse prompt lines; every malformed line is an error naming its line number (never skipped silently)."""
    out: list[Prompt] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecplugError(
                f"{where}, line {n}: not valid JSON ({exc.msg}).",
                'Each line must be one JSON object, e.g. {"prompt": "..."} or {"messages": [...]}.',
            ) from None
        out.append(_prompt(obj, f"{where}, line {n}", default_id=f"{Path(where).stem}-{n}"))
    if not out:
        raise SpecplugError(f"{where} holds no prompts.", 'Add one JSON object per line, e.g. {"prompt": "..."}.')
    return out


def _prompt(obj: Any, where: str, default_id: str) -> Prompt:
    if not isinstance(obj, dict):
        raise SpecplugError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise SpecplugError(f"{where}: give exactly one of 'prompt' (a string) or 'messages' (a list).")
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise SpecplugError(f"{where}: 'prompt' must be a non-empty string.")
    if messages is not None:
        ok = isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
        )
        if not ok:
            raise SpecplugError(f"{where}: 'messages' must be a non-empty list of {{\"role\": ..., \"content\": ...}}.")
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise SpecplugError(f"{where}: 'max_tokens' must be a positive integer.")
    meta = {k: v for k, v in obj.items() if k not in ("id", "prompt", "messages", "max_tokens")}
    return Prompt(id=str(obj.get("id", default_id)), prompt=prompt, messages=messages, max_tokens=max_tokens, meta=meta)


def select(prompts: list[Prompt], num: int | None) -> list[Prompt]:
    """The first ``num`` prompts, cycling through the set when more are asked for than it holds."""
    if num is None:
        return list(prompts)
    return [prompts[i % len(prompts)] for i in range(num)]


def load_prompt_set(workload: str | None, prompts_file: str | None) -> list[Prompt]:
    """The prompts a bench sends: a JSONL file, or a built-in workload (chat when neither is named)."""
    if workload and prompts_file:
        raise SpecplugError("Give --workload or --prompts, not both.")
    if prompts_file:
        return load_prompts_file(prompts_file)
    return load_workload(workload or "chat")
