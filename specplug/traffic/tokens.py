"""Which tokenizer a traffic file is counted and replayed with.

The model's own tokenizer when it can be had offline (a local model folder, or the Hugging Face cache), read
with the optional ``tokenizers`` package; otherwise a stated proxy. Token ids come back as *strings* (one
character per token, ``chr(id)``): the plain replay searches them with ``str.find`` (in C), and the vectorised
one reads a whole batch into an array with one ``encode("utf-32-le")``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specplug.catalog import Model

# Roughly the pieces a byte-level BPE pre-tokenizer (GPT-2/Llama-3/Qwen style) cuts text into: words with
# their leading space, runs of up to three digits, punctuation runs, newlines. Whole words stand in for their
# BPE pieces: rarer words split into several tokens under a real tokenizer, so the proxy undercounts lengths by
# about a quarter on English prose, while copy structure (what replay measures) survives unchanged.
_PROXY = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s*\n|\s+(?!\S)|\s+", re.UNICODE)


@dataclass
class Tokenizer:
    """Encodes texts to token strings (``chr(id)`` per token)."""

    name: str
    encode_batch: Callable[[Sequence[str]], list[str]]
    exact: bool = False  # the model's own tokenizer (not the proxy)


def _hf_cache_roots() -> list[Path]:
    roots = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]).expanduser())
    if os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    return roots


def find_tokenizer_file(model: Model) -> tuple[Path, str] | None:
    """``tokenizer.json`` for ``model`` and where it was found, or None when it is not on this machine."""
    if model.local_path:
        p = Path(model.local_path) / "tokenizer.json"
        if p.is_file():
            return p, f"local folder {model.local_path}"
    if "/" in model.hf_id and not model.local_path and not model.hf_id.startswith(("/", ".", "~")):
        org, name = model.hf_id.split("/", 1)
        for root in _hf_cache_roots():
            snaps = root / f"models--{org}--{name}" / "snapshots"
            if snaps.is_dir():
                # Newest snapshot first: the one a download most recently refreshed.
                for snap in sorted(snaps.iterdir(), key=lambda s: s.stat().st_mtime, reverse=True):
                    if (snap / "tokenizer.json").is_file():
                        return snap / "tokenizer.json", f"Hugging Face cache {snaps.parent}"
    return None


def _encode_ids(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def from_file(path: Path, label: str) -> Tokenizer | None:
    """A ``tokenizers``-backed tokenizer for ``path``; None when the package is missing or the file unreadable."""
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        return None
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - any unreadable tokenizer.json means: fall back to the proxy
        return None
    tok.no_truncation()
    tok.no_padding()

    # encode_batch_fast (tokenizers >= 0.20) skips the character offsets, which the replay never reads.
    batch = getattr(tok, "encode_batch_fast", tok.encode_batch)

    def encode_batch(texts: Sequence[str]) -> list[str]:
        # No special tokens: logged prompts already carry whatever template text the client sent.
        return [_encode_ids(e.ids) for e in batch(list(texts), add_special_tokens=False)]

    return Tokenizer(name=label, encode_batch=encode_batch, exact=True)


def proxy() -> Tokenizer:
    """Regex pieces numbered in order of first appearance (stable within one replay)."""
    vocab: dict[str, str] = {}
    findall = _PROXY.findall

    def piece(p: str) -> str:
        # Past the code-point range, pieces share ids by hash: a rare collision costs a spurious match, no error.
        n = len(vocab)
        c = vocab[p] = chr(n if n < 0x110000 else hash(p) % 0x110000)
        return c

    def encode_batch(texts: Sequence[str]) -> list[str]:
        get = vocab.get
        out = []
        for t in texts:
            out.append("".join([get(p) or piece(p) for p in findall(t)]))
        return out

    return Tokenizer(name="proxy: regex word pieces (model tokenizer not available offline)", encode_batch=encode_batch)


def choose(model: Model) -> Tokenizer:
    """The model's tokenizer when it is on this machine and ``tokenizers`` is installed, else the proxy."""
    found = find_tokenizer_file(model)
    if found is not None:
        path, where = found
        tok = from_file(path, f"{model.hf_id} tokenizer ({where})")
        if tok is not None:
            return tok
        p = proxy()
        p.name = f"proxy: regex word pieces ({path} found, but the 'tokenizers' package is not installed)"
        return p
    return proxy()
