"""Models from local Hugging Face folders, read offline the same way as Hub repositories: config.json for the
architecture, safetensors headers for an exact parameter count, tokenizer files for the vocabulary fingerprint
that tokenizer-compatibility checks compare."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specplug.catalog.fromconfig import Origin, model_from_config
from specplug.catalog.models import Model
from specplug.errors import CatalogError
from specplug.fileio import user_path


def read_local_model(path: str) -> Model:
    """A local model folder (config.json and weights) or a llama.cpp .gguf file."""
    if path.lower().endswith(".gguf"):
        from specplug.catalog.gguf import read_gguf_model

        return read_gguf_model(path)
    folder = user_path(path)
    cfg_file = folder / "config.json"
    if not folder.is_dir():
        raise CatalogError(f"Model folder '{path}' does not exist.", "Give a folder holding config.json.")
    if not cfg_file.is_file():
        raise CatalogError(
            f"'{path}' has no config.json, so it is not a Hugging Face model folder.",
            "Point --model at the folder that holds config.json and the weights.",
        )
    cfg = read_json(cfg_file)
    quant = folder / "hf_quant_config.json"
    modelopt = read_json(quant).get("quantization") if quant.is_file() else None
    vocab_fp, special = tokenizer_fingerprint(folder)
    where = folder.resolve()
    origin = Origin(
        hf_id=str(where), at=f" in {where}", source=f"local folder {where}", confirmed="local", aliases=[folder.name],
        local_path=str(where), tokenizer_family=f"local:{vocab_fp}" if vocab_fp else "", special_tokens=special,
    )
    count = safetensors_params(folder)
    exact = (count, f"safetensors headers in {where} (every tensor)") if count else None
    return model_from_config(cfg, origin, modelopt=modelopt if isinstance(modelopt, dict) else None, exact_params=exact)


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"Cannot read {path}: {exc}.", "Check that the file is valid JSON.") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path} is not a JSON object.", "A config.json holds one object of keys.")
    return data


def safetensors_params(folder: Path) -> int:
    """Elements of every tensor in the folder's safetensors files, read from their headers (0: none, or unreadable)."""
    total = 0
    for st in sorted(folder.glob("*.safetensors")):
        try:
            with st.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(n))
        except (OSError, ValueError):
            return 0
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            count = 1
            for d in meta.get("shape", []):
                count *= d
            total += count
    return total


def tokenizer_fingerprint(folder: Path) -> tuple[str, dict[str, str]]:
    """A short hash of the token->id map (tokenizer.json or vocab.json) and the special tokens, if any."""
    vocab: dict | None = None
    tj = folder / "tokenizer.json"
    try:
        if tj.is_file():
            data = json.loads(tj.read_text(encoding="utf-8"))
            vocab = (data.get("model") or {}).get("vocab")
            if isinstance(vocab, list):  # unigram tokenizers store [piece, score] pairs
                vocab = {p[0]: i for i, p in enumerate(vocab)}
            for tok in data.get("added_tokens") or []:
                vocab = dict(vocab or {})
                vocab[tok["content"]] = tok["id"]
        elif (folder / "vocab.json").is_file():
            vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        vocab = None
    special: dict[str, str] = {}
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        try:
            tcfg = json.loads(tc.read_text(encoding="utf-8"))
            for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
                val = tcfg.get(key)
                if isinstance(val, dict):
                    val = val.get("content")
                if isinstance(val, str):
                    special[key] = val
        except (OSError, json.JSONDecodeError):
            pass
    if not vocab:
        return "", special
    blob = json.dumps(sorted(vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16], special
