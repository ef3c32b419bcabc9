"""Models from llama.cpp GGUF files: the architecture read from the file's key/value header, no tensor loaded."""

from __future__ import annotations

import struct
from pathlib import Path

from specplug.catalog.models import Model
from specplug.errors import CatalogError
from specplug.fileio import user_path

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path: Path) -> dict[str, object]:
    """The key/value header of a GGUF file (llama.cpp's format), read without loading any tensor.

    Arrays are summarised by their length (the tokenizer's token list is what gives the vocabulary size)."""

    def read(fmt: str):
        size = struct.calcsize(fmt)
        data = fh.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def read_str() -> str:
        return fh.read(read("<Q")).decode("utf-8", errors="replace")

    def read_value(vtype: int):
        if vtype in _GGUF_SCALARS:
            return read(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return read_str()
        if vtype == 9:
            etype, count = read("<I"), read("<Q")
            if etype in _GGUF_SCALARS:
                fh.seek(struct.calcsize(_GGUF_SCALARS[etype]) * count, 1)
            else:
                for _ in range(count):
                    read_value(etype)
            return count
        raise ValueError(f"unknown GGUF value type {vtype}")

    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError("not a GGUF file (bad magic)")
        version = read("<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is too old")
        read("<Q")  # tensor count
        meta: dict[str, object] = {}
        for _ in range(read("<Q")):
            key = read_str()
            meta[key] = read_value(read("<I"))
    return meta


def dense_params_b(hidden, inter, layers, heads, kv_heads, head_dim, vocab, tie) -> float | None:
    """Billions of parameters of a dense decoder from its dims (embeddings, attention, gated MLP)."""
    if not all([hidden, inter, layers, heads, head_dim, vocab]):
        return None
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    emb = vocab * hidden * (1 if tie else 2)
    return round((layers * (attn + 3 * hidden * inter) + emb) / 1e9, 4)


def read_gguf_model(path: str) -> Model:
    """A llama.cpp GGUF file: architecture from its header, so planning works for GGUF-only deployments."""
    file = user_path(path)
    if not file.is_file():
        raise CatalogError(
            f"GGUF file '{path}' does not exist here.",
            "Give the path of a local .gguf file, or the model's catalog alias / Hugging Face id.",
        )
    try:
        meta = gguf_metadata(file)
    except (OSError, ValueError) as exc:
        raise CatalogError(f"Cannot read GGUF file '{path}': {exc}.", "Check that it is a complete .gguf file.") from None
    arch = str(meta.get("general.architecture", ""))

    def get(key: str) -> int | None:
        v = meta.get(f"{arch}.{key}")
        return int(v) if isinstance(v, int | float) else None

    hidden, heads, layers = get("embedding_length"), get("attention.head_count"), get("block_count")
    kv_heads = get("attention.head_count_kv") or heads
    head_dim = get("attention.key_length") or (hidden // heads if hidden and heads else None)
    inter = get("feed_forward_length")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = int(tokens) if isinstance(tokens, int) else None
    name = str(meta.get("general.name") or file.stem)
    return Model(
        hf_id=str(file.resolve()),
        aliases=[file.stem],
        family=arch,
        params_b=dense_params_b(hidden, inter, layers, heads, kv_heads, head_dim, vocab, True),
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        tokenizer_family=f"gguf:{meta.get('tokenizer.ggml.model', '')}-{vocab}",
        max_position_embeddings=get("context_length"),
        tie_word_embeddings=True,
        architecture=arch,
        source=f"GGUF header of {file} ({name})",
        confirmed="local",
        local_path=str(file.resolve()),
    )
