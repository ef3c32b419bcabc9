"""Deterministic traffic logs built from the built-in bench workloads (specplug/bench/workloads/).

code-edit: the answer returns the prompt's code with small edits (a renamed name, added comments and hints),
so most of it is copied; chat: the answer is free text drawn from a word list the prompt does not use, so
next to nothing is copied.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[2] / "specplug" / "bench" / "workloads"

# Free text: common function words between content words made of syllables (some 6,000 of them), so that
# little repeats beyond what prose repeats, and nothing comes from the prompt.
_FUNCTION = ["the", "a", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "on", "be", "at", "by"]
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def _word(rng: random.Random) -> str:
    if rng.random() < 0.4:
        return rng.choice(_FUNCTION)
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))


def prompts(workload: str) -> list[str]:
    out = []
    for line in (WORKLOADS / f"{workload}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            msgs = json.loads(line)["messages"]
            out.append("\n\n".join(m["content"] for m in msgs))
    return out


def code_block(prompt: str) -> str:
    m = re.search(r"```[a-z]*\n(.*?)```", prompt, re.S)
    return m.group(1) if m else prompt


def edit_answer(prompt: str, rng: random.Random) -> str:
    """The prompt's code returned with a few small edits, as a code-edit answer does."""
    lines = code_block(prompt).splitlines()
    out = []
    for line in lines:
        r = rng.random()
        if r < 0.08 and line.strip():
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# {_word(rng)} {_word(rng)}")
        if r > 0.95:
            line = line.replace("self", "this")
        out.append(line)
    return "Here is the updated code:\n\n```python\n" + "\n".join(out) + "\n```\n"


def chat_answer(rng: random.Random, words: int = 180) -> str:
    sentences, n = [], 0
    while n < words:
        k = rng.randint(6, 16)
        s = " ".join(_word(rng) for _ in range(k))
        sentences.append(s[0].upper() + s[1:] + rng.choice([".", ".", "!", "?"]))
        n += k
    return " ".join(sentences)


def build(kind: str, n: int | None = None, seed: int = 0, words: int = 180) -> list[dict]:
    """Records {"prompt": ..., "completion": ...} of ``kind`` ('code-edit' or 'chat'); ``n`` cycles the prompts."""
    rng = random.Random(seed)
    ps = prompts(kind)
    n = n or len(ps)
    recs = []
    for i in range(n):
        p = ps[i % len(ps)]
        comp = edit_answer(p, rng) if kind == "code-edit" else chat_answer(rng, words)
        recs.append({"prompt": p, "completion": comp})
    return recs


def write(path: Path, records: list[dict], shape: str = "plain") -> Path:
    """Write records as JSONL in one of the formats load_traffic reads."""
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            if shape == "plain":
                obj = r
            elif shape == "chat-pair":
                obj = {"request": {"model": "m", "messages": [{"role": "user", "content": r["prompt"]}]},
                       "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": r["completion"]}}]}}
            elif shape == "completions-pair":
                obj = {"request": {"model": "m", "prompt": r["prompt"]}, "response": {"choices": [{"text": r["completion"]}]}}
            elif shape == "messages":
                obj = {"messages": [{"role": "user", "content": r["prompt"]}], "response": r["completion"]}
            elif shape == "custom":
                obj = {"input": {"text": r["prompt"]}, "output": {"body": r["completion"]}}
            else:
                raise ValueError(shape)
            fh.write(json.dumps(obj) + "\n")
    return path
