"""Model catalog: architecture facts for popular open models, plus local Hugging Face folders read offline."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from specplug.catalog._csv import aliases, integer, norm, num, read_rows
from specplug.catalog.drafters import Drafter, drafters_for
from specplug.errors import CatalogError
from specplug.fileio import user_path

# Architectures whose attention caches MLA's compressed latent (see Model.uses_mla).
_MLA_ARCHITECTURES = ("deepseekv2", "deepseekv3", "kimik25", "glmmoedsa")


# A plain dataclass, not pydantic: catalog rows are trusted data, and class building is start-up time.
@dataclass(frozen=True, kw_only=True)
class Model:
    hf_id: str
    aliases: list[str] = field(default_factory=list)
    family: str = ""
    params_b: float | None = None
    active_params_b: float | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    tokenizer_family: str = ""
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool = False
    moe_num_experts: int | None = None
    moe_experts_per_token: int | None = None
    mtp_layers: int = 0
    architecture: str = ""
    weight_format: str = "bf16"  # the checkpoint's own format (weight_formats.csv name)
    moe_intermediate_size: int | None = None
    base_model: str = ""  # hf_id of the unquantized checkpoint this one was made from
    source: str = ""
    confirmed: str = ""
    notes: str = ""
    local_path: str | None = None  # set when the model was read from a local folder
    special_tokens: dict[str, str] = field(default_factory=dict)
    # Layers whose attention sees only the last sliding_window tokens (config.json layer_types): the stacks keep
    # just that window of their KV cache.
    sliding_window: int | None = None
    sliding_layers: int = 0

    @property
    def name(self) -> str:
        return self.aliases[0] if self.aliases else self.hf_id

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_num_experts)

    @property
    def uses_mla(self) -> bool:
        """DeepSeek-V3-style multi-head latent attention caches one compressed latent per token and layer
        (DeepSeek-V2/V3/V3.2, Kimi-K2/K2.5 and GLM-5 all use the 512-d latent + 64-d rope key)."""
        arch = self.architecture.lower()
        return any(a in arch for a in _MLA_ARCHITECTURES)

    def splits_heads(self, tp: int) -> bool:
        """Whether tensor parallel size ``tp`` shards the attention: it divides the heads, and the KV heads split
        evenly or replicate (tp a multiple of them); MLA's latent is replicated whole. Unknown heads: assumed so."""
        heads, kv = self.num_attention_heads, self.num_kv_heads
        if tp == 1 or not heads:
            return True
        return heads % tp == 0 and (not kv or self.uses_mla or kv % tp == 0 or tp % kv == 0)

    def kv_bytes_per_token(self, dtype_bytes: float = 2.0) -> float:
        """KV-cache bytes one token occupies across all layers (MLA: 512-d latent + 64-d rope key)."""
        layers = self.num_layers or 0
        if self.uses_mla:
            return layers * (512 + 64) * dtype_bytes
        kv_heads = self.num_kv_heads or self.num_attention_heads or 0
        head_dim = self.head_dim or (
            (self.hidden_size or 0) // self.num_attention_heads if self.num_attention_heads else 0
        )
        return 2 * layers * kv_heads * head_dim * dtype_bytes

    def kv_share(self, tokens: float) -> float:
        """Share of :meth:`kv_bytes_per_token` x ``tokens`` that one sequence of ``tokens`` keeps cached: sliding-window
        layers keep only their window."""
        if not (self.sliding_window and self.sliding_layers and self.num_layers) or tokens <= self.sliding_window:
            return 1.0
        return 1.0 - self.sliding_layers / self.num_layers * (1.0 - self.sliding_window / tokens)

    @property
    def embedding_params_b(self) -> float:
        """Input embeddings plus the LM head (once when tied), in billions."""
        if not (self.vocab_size and self.hidden_size):
            return 0.0
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2) / 1e9

    @property
    def expert_params_b(self) -> float:
        """Routed-expert parameters (total minus what every token uses), in billions; 0 for dense models."""
        if not (self.moe_num_experts and self.moe_experts_per_token and self.params_b and self.active_params_b):
            return 0.0
        share = self.moe_experts_per_token / self.moe_num_experts
        return max(self.params_b - self.active_params_b, 0.0) / max(1 - share, 1e-9)

    def known_drafters(self, method: str | None = None) -> list[Drafter]:
        """Drafters published for this checkpoint, then those of its base model (a quantized copy keeps the
        base's vocabulary and hidden states, so the base's draft models and heads apply)."""
        own = drafters_for(self.hf_id, method)
        if not self.base_model:
            return own
        seen = {(d.method, d.drafter_hf_id) for d in own}
        return own + [d for d in drafters_for(self.base_model, method) if (d.method, d.drafter_hf_id) not in seen]


def _row_to_model(r: dict[str, str]) -> Model:
    return Model(
        hf_id=r["hf_id"],
        aliases=aliases(r["aliases"]),
        family=r["family"],
        params_b=num(r["params_b"]),
        active_params_b=num(r["active_params_b"]),
        num_layers=integer(r["num_layers"]),
        hidden_size=integer(r["hidden_size"]),
        intermediate_size=integer(r["intermediate_size"]),
        num_attention_heads=integer(r["num_attention_heads"]),
        num_kv_heads=integer(r["num_kv_heads"]),
        head_dim=integer(r["head_dim"]),
        vocab_size=integer(r["vocab_size"]),
        tokenizer_family=r["tokenizer_family"],
        max_position_embeddings=integer(r["max_position_embeddings"]),
        tie_word_embeddings=r["tie_word_embeddings"].strip().lower() == "true",
        moe_num_experts=integer(r["moe_num_experts"]),
        moe_experts_per_token=integer(r["moe_experts_per_token"]),
        mtp_layers=integer(r["mtp_layers"]) or 0,
        architecture=r["architecture"],
        weight_format=(r.get("weight_format") or "").strip() or "bf16",
        moe_intermediate_size=integer(r.get("moe_intermediate_size")),
        base_model=(r.get("base_model") or "").strip(),
        source=r["source"],
        confirmed=r["confirmed"],
        notes=r["notes"],
        sliding_window=integer(_extra(r, "sliding_window")),
        sliding_layers=integer(_extra(r, "sliding_window_layers")) or 0,
    )


def _extra(r: dict[str, str], key: str) -> str:
    """One ``key=value`` of the row's dims_extra (config keys the columns lack), or ''."""
    for part in (r.get("dims_extra") or "").split(";"):
        k, _, v = part.partition("=")
        if k.strip() == key:
            return v.strip()
    return ""


@cache
def models() -> tuple[Model, ...]:
    rows = [_row_to_model(r) for r in read_rows("models.csv")]
    by_id = {m.hf_id.lower(): m for m in rows}
    # A quantized checkpoint keeps its base's tokenizer: the base row is the one place that fact is kept.
    return tuple(
        replace(m, tokenizer_family=by_id[m.base_model.lower()].tokenizer_family)
        if m.base_model and m.base_model.lower() in by_id and by_id[m.base_model.lower()].tokenizer_family
        else m
        for m in rows
    )


@cache
def _index() -> dict[str, Model]:
    idx: dict[str, Model] = {}
    for m in models():
        for key in [m.hf_id, m.hf_id.split("/", 1)[-1], *m.aliases]:
            idx.setdefault(norm(key), m)
    return idx


# Name suffixes of the usual quantized re-uploads, longest first so '-fp8-dynamic' wins over '-fp8'.
_QUANT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("-fp8-dynamic", "fp8"),
    ("-fp8-static", "fp8"),
    ("-awq-int4", "int4-awq"),
    ("-int4-awq", "int4-awq"),
    ("-gptq-int4", "int4-gptq"),
    ("-gptq-int8", "int8"),
    ("-w4a16", "int4-gptq"),
    ("-w8a8", "int8"),
    ("-nvfp4", "nvfp4"),
    ("-gptq", "int4-gptq"),
    ("-int4", "int4-gptq"),
    ("-int8", "int8"),
    ("-fp8", "fp8"),
    ("-fp4", "nvfp4"),
    ("-awq", "int4-awq"),
)
_SUFFIX_RE = re.compile(
    "(" + "|".join(re.escape(s) for s, _ in _QUANT_SUFFIXES) + ")$", re.IGNORECASE
)


def _from_quant_suffix(name: str) -> Model | None:
    """'<alias or id>-fp8', '-awq', '-nvfp4' ...: the base model with the suffix's weight format."""
    folded = name.strip().replace("_", "-")
    match = _SUFFIX_RE.search(folded)
    if not match:
        return None
    suffix = match.group(1).lower()
    fmt = dict(_QUANT_SUFFIXES)[suffix]
    stem = folded[: match.start()]
    idx = _index()
    base = idx.get(norm(stem)) or idx.get(norm(stem.rsplit("/", 1)[-1]))
    if base is None:
        return None
    typed = name.strip()
    root = base.base_model or base.hf_id  # a suffix on a quantized row still points at the original release
    return replace(
        base,
        hf_id=typed if "/" in typed else base.hf_id + typed[match.start():],
        aliases=[typed],
        weight_format=fmt,
        base_model=root,
        confirmed="inferred",
        notes=f"weight format {fmt} inferred from the name suffix '{suffix}'; architecture of {base.hf_id}",
    )


def _looks_like_path(name: str) -> bool:
    if name.lower().endswith(".gguf"):
        return True
    return name.startswith((".", "/", "~")) or user_path(name).is_dir()


def get_model(name: str) -> Model:
    """Resolve an alias ('llama-3.1-70b'), an HF id ('meta-llama/Llama-3.1-70B-Instruct') or a local folder.

    A name that is not a catalog row but ends in a quantization suffix ('llama-3.1-70b-awq',
    'RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic') resolves to its base model with that weight format."""
    if not name or not name.strip():
        raise CatalogError("No model given.", "Pass --model NAME (an alias, a Hugging Face id or a local folder).")
    if _looks_like_path(name):
        return read_local_model(name)
    m = _index().get(norm(name)) or _from_quant_suffix(name)
    if m is not None:
        return m
    close = difflib.get_close_matches(norm(name), list(_index()), n=3, cutoff=0.6)
    # Prefer the canonical alias in suggestions rather than whichever key matched.
    names: list[str] = []
    for c in close:
        n = _index()[c].name
        if n not in names:
            names.append(n)
    hint = f"Did you mean {', '.join(repr(n) for n in names)}? " if names else ""
    raise CatalogError(
        f"Unknown model '{name}'.",
        f"{hint}Run 'specplug models list' or 'specplug models search TEXT', or pass a local model folder.",
    )


def _fold(text: str) -> str:
    """Lower-case with separators removed, so 'Qwen3-Coder', 'qwen3_coder' and 'qwen3coder' meet."""
    return re.sub(r"[\s_\-./:]+", "", text.lower())


def search_models(text: str) -> list[Model]:
    """Models whose id (with or without org), alias or family contains every word of ``text``, separators
    folded; an exact alias or id comes first, then names starting with the text, then any other match."""
    words = [_fold(w) for w in text.split() if _fold(w)]
    whole = _fold(text)
    if not words:
        return []
    ranked: list[tuple[int, int, int, Model]] = []
    for pos, m in enumerate(models()):
        names = [_fold(x) for x in [m.hf_id, m.hf_id.split("/", 1)[-1], *m.aliases]]
        names_hay = " ".join(names)
        hay = " ".join([names_hay, _fold(m.family), _fold(m.architecture)])
        if not all(w in hay for w in words):
            continue
        if whole in names:
            rank = 0
        elif any(n.startswith(whole) for n in names):
            rank = 1
        elif all(w in names_hay for w in words):
            rank = 2
        else:
            rank = 3  # matched through the family or architecture only
        # Within a rank, an original release before its quantized re-uploads.
        ranked.append((rank, 1 if m.base_model else 0, pos, m))
    return [t[-1] for t in sorted(ranked, key=lambda t: t[:3])]


def read_local_model(path: str) -> Model:
    """Read a local Hugging Face model folder offline: config.json for the architecture, tokenizer files
    for the vocabulary fingerprint that tokenizer-compatibility checks compare."""
    if path.lower().endswith(".gguf"):
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
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogError(f"Cannot read {cfg_file}: {exc}.", "Check that the file is valid JSON.") from None
    text_cfg = cfg.get("text_config") or {}

    def get(*keys: str):
        for k in keys:
            for c in (cfg, text_cfg):
                if c.get(k) is not None:
                    return c[k]
        return None

    hidden = get("hidden_size", "n_embd", "d_model")
    heads = get("num_attention_heads", "n_head")
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    inter = get("intermediate_size", "ffn_dim")
    vocab = get("vocab_size")
    kv_heads = get("num_key_value_heads") or heads
    head_dim = get("head_dim") or (hidden // heads if hidden and heads else None)
    tie = bool(get("tie_word_embeddings"))
    experts = get("num_local_experts", "n_routed_experts", "num_experts")
    params = _estimate_params(folder, hidden, inter, layers, heads, kv_heads, head_dim, vocab, tie)
    vocab_fp, special = _tokenizer_fingerprint(folder)
    archs = cfg.get("architectures") or [""]
    return Model(
        hf_id=str(folder.resolve()),
        aliases=[folder.name],
        family=str(cfg.get("model_type", "")),
        params_b=params,
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        tokenizer_family=f"local:{vocab_fp}" if vocab_fp else "",
        max_position_embeddings=get("max_position_embeddings", "n_positions"),
        tie_word_embeddings=tie,
        moe_num_experts=experts,
        moe_experts_per_token=get("num_experts_per_tok"),
        mtp_layers=int(get("num_nextn_predict_layers") or 0),
        architecture=str(archs[0]),
        source=f"local folder {folder}",
        confirmed="local",
        local_path=str(folder.resolve()),
        special_tokens=special,
        # Only layer_types says which layers slide (Qwen2 configs carry a sliding_window they do not use).
        sliding_window=get("sliding_window") if isinstance(cfg.get("layer_types"), list) else None,
        sliding_layers=sum(t == "sliding_attention" for t in cfg.get("layer_types") or []),
    )


def _estimate_params(folder: Path, hidden, inter, layers, heads, kv_heads, head_dim, vocab, tie) -> float | None:
    """Billions of parameters: from safetensors headers when present (exact), else from the config dims."""
    total = 0
    for st in sorted(folder.glob("*.safetensors")):
        try:
            with st.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(n))
        except (OSError, ValueError):
            total = 0
            break
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            count = 1
            for d in meta.get("shape", []):
                count *= d
            total += count
    if total:
        return round(total / 1e9, 4)
    if not all([hidden, inter, layers, heads, head_dim, vocab]):
        return None
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    mlp = 3 * hidden * inter
    emb = vocab * hidden * (1 if tie else 2)
    return round((layers * (attn + mlp) + emb) / 1e9, 4)


def _tokenizer_fingerprint(folder: Path) -> tuple[str, dict[str, str]]:
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


# ---------------------------------------------------------------------------------------------- GGUF files

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _gguf_metadata(path: Path) -> dict[str, object]:
    """The key/value header of a GGUF file (llama.cpp's format), read without loading any tensor.

    Arrays are summarised by their length (the tokenizer's token list is what gives the vocabulary size)."""
    import struct

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


def read_gguf_model(path: str) -> Model:
    """A llama.cpp GGUF file: architecture from its header, so planning works for GGUF-only deployments."""
    file = user_path(path)
    if not file.is_file():
        raise CatalogError(
            f"GGUF file '{path}' does not exist here.",
            "Give the path of a local .gguf file, or the model's catalog alias / Hugging Face id.",
        )
    try:
        meta = _gguf_metadata(file)
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
    params = _estimate_params(file.parent / "__no_safetensors__", hidden, inter, layers, heads, kv_heads, head_dim, vocab, True)
    name = str(meta.get("general.name") or file.stem)
    return Model(
        hf_id=str(file.resolve()),
        aliases=[file.stem],
        family=arch,
        params_b=params,
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
