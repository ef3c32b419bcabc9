"""Model catalog: architecture facts for popular open models, and the one resolver for a model name.

``get_model`` takes a catalog alias or id, a Hugging Face Hub id (read from its config.json through
huggingface_hub, at an optional ``@revision``), a local folder or a .gguf file. Catalog rows are curated facts
with sources; a Hub id that is one is read from the Hub only when a revision is asked for, and then the row's
facts override the derived ones field by field.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, replace
from functools import cache

from specplug.catalog._csv import aliases, integer, norm, num, read_rows
from specplug.catalog.drafters import Drafter, drafters_for, find_drafter
from specplug.catalog.hub import is_repo_id, named_revision, split_revision
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
    revision: str = ""  # the Hub commit the facts were read at
    moe_shared_experts: int | None = None
    # Multi-head latent attention ranks (DeepSeek V2/V3 and the models built on them).
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Layers keeping a KV cache that grows with the context (None: all); hybrids' linear-attention and Mamba
    # layers keep a fixed-size state instead.
    attention_layers: int | None = None
    # K+V values (or MLA latent values) one token adds over all layers, where config.json gave them layer by
    # layer (heads that differ between layers); the part held in sliding-window layers.
    kv_values_per_token: int | None = None
    sliding_kv_values_per_token: int = 0
    layer_kinds: dict[str, int] = field(default_factory=dict)  # e.g. {"linear_attention": 36, "full_attention": 12}
    basis: dict[str, str] = field(default_factory=dict)  # field -> where its value came from

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
        return self.kv_lora_rank is not None or any(a in arch for a in _MLA_ARCHITECTURES)

    def basis_of(self, name: str) -> str:
        """Where the value of field ``name`` came from: a config.json key, a rule, or the catalog row's source."""
        if name in self.basis:
            return self.basis[name]
        return f"catalog: {self.source}" if self.confirmed not in ("local", "hub") else self.source

    def splits_heads(self, tp: int) -> bool:
        """Whether tensor parallel size ``tp`` shards the attention: it divides the heads, and the KV heads split
        evenly or replicate (tp a multiple of them); MLA's latent is replicated whole. Unknown heads: assumed so."""
        heads, kv = self.num_attention_heads, self.num_kv_heads
        if tp == 1 or not heads:
            return True
        return heads % tp == 0 and (not kv or self.uses_mla or kv % tp == 0 or tp % kv == 0)

    def kv_bytes_per_token(self, dtype_bytes: float = 2.0) -> float:
        """KV-cache bytes one token occupies across the layers that keep one (MLA: the latent + rope key)."""
        if self.kv_values_per_token:
            return self.kv_values_per_token * dtype_bytes
        layers = self.attention_layers if self.attention_layers is not None else self.num_layers or 0
        if self.uses_mla:
            return layers * ((self.kv_lora_rank or 512) + (self.qk_rope_head_dim or 64)) * dtype_bytes
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
        if self.kv_values_per_token and self.sliding_kv_values_per_token:
            sliding = self.sliding_kv_values_per_token / self.kv_values_per_token
        else:
            sliding = self.sliding_layers / (self.attention_layers or self.num_layers)
        return 1.0 - sliding * (1.0 - self.sliding_window / tokens)

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
        moe_shared_experts=integer(_extra(r, "n_shared_experts")),
        q_lora_rank=integer(_extra(r, "q_lora_rank")),
        kv_lora_rank=integer(_extra(r, "kv_lora_rank")),
        qk_nope_head_dim=integer(_extra(r, "qk_nope_head_dim")),
        qk_rope_head_dim=integer(_extra(r, "qk_rope_head_dim")),
        v_head_dim=integer(_extra(r, "v_head_dim")),
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


def served_revision(name: str | None, model: Model) -> str | None:
    """The Hub revision a deployment of ``model`` serves: the commit it was read at where ``name`` (what the user
    called it) asked for a revision ('org/name@v1'), else None (the repository's default branch, or a folder)."""
    at = named_revision(name) if name and not model.local_path else None
    return (model.revision or at) if at else None


def get_model(name: str, revision: str | None = None) -> Model:
    """Resolve an alias ('llama-3.1-70b'), an HF id ('meta-llama/Llama-3.1-70B-Instruct'), a local folder or a
    .gguf file.

    A name that is not a catalog row but ends in a quantization suffix ('llama-3.1-70b-awq',
    'RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic') resolves to its base model with that weight format. Any other
    'org/name' is read from the Hugging Face Hub; ``revision`` (or 'org/name@revision') reads a branch, tag or
    commit, catalog models included, whose curated facts then override the derived ones field by field."""
    if not name or not name.strip():
        raise CatalogError("No model given.", "Pass --model NAME (an alias, a Hugging Face id or a local folder).")
    name = name.strip()
    if _looks_like_path(name):
        if revision:
            raise CatalogError(f"'{name}' is a local path; a revision names a version of a Hugging Face id.",
                               "Leave the revision out, or name the model by its Hub id.")
        from specplug.catalog.local import read_local_model

        return read_local_model(name)
    repo, at = split_revision(name)
    revision = revision or at
    row = _index().get(norm(repo))
    if revision is None and (m := row or _from_quant_suffix(repo)) is not None:
        return m
    if revision is None and (dm := _draft_model(repo)) is not None:
        return dm
    if revision is None and find_drafter(repo) is not None:
        # Planning probes the catalog's drafters by id: those stay offline answers, as they were before the Hub.
        raise CatalogError(f"'{repo}' is a drafter in the catalog, which has no model row for it.",
                           f"Pass it with --drafter; to read its config.json from the Hub, name a revision ('{repo}@main').")
    if is_repo_id(repo):
        from specplug.catalog.hubmodel import merge_catalog, read_hub_model

        derived = read_hub_model(repo, revision)
        return merge_catalog(row, derived) if row else derived
    if revision:
        raise CatalogError(f"'{repo}' is not a Hugging Face id (org/name), so '@{revision}' names no revision.",
                           "Name the model as org/name@revision, or leave the revision out for a catalog alias.")
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
        f"{hint}Run 'specplug models list' or 'specplug models search TEXT', name a Hugging Face id (org/name), "
        "or pass a local model folder.",
    )


def in_catalog(name: str) -> bool:
    """Whether ``name`` (alias or HF id, optionally @revision) is one of the catalog's models, its quantized copies
    or its draft models, rather than read from the Hub or a folder."""
    repo, _ = split_revision(name.strip())
    return norm(repo) in _index() or _from_quant_suffix(repo) is not None or _draft_model(repo) is not None


@cache
def _draft_models() -> dict[str, Model]:
    """Catalog drafters that are whole models (PARD draft models): the catalog row of the model each was adapted
    from, under the drafter's own id, so that planning and `models show` know its size and tokenizer."""
    out: dict[str, Model] = {}
    for r in read_rows("draft_model_shapes.csv"):
        base = _index().get(norm(r["same_shape_as"]))
        if base is None:
            raise CatalogError(f"draft_model_shapes.csv names '{r['same_shape_as']}', which is not a catalog model.")
        why = f"catalog: {r['same_shape_as']} (the model {r['drafter_hf_id']} was adapted from)"
        basis = {f.name: why for f in fields(Model) if f.name not in _NOT_SHAPE and getattr(base, f.name) not in (None, "", 0, [], {})}
        out[r["drafter_hf_id"].lower()] = replace(
            base, hf_id=r["drafter_hf_id"], aliases=[], base_model="", source=f"{r['source']}; shape: {base.source}",
            confirmed="partial", notes=r["notes"], basis=basis, revision="", local_path=None)
    return out


# Identity and provenance: the drafter's own, not facts borrowed from the model it was adapted from.
_NOT_SHAPE = {"hf_id", "aliases", "base_model", "source", "confirmed", "notes", "local_path", "special_tokens",
              "revision", "basis"}


def _draft_model(repo: str) -> Model | None:
    return _draft_models().get(repo.lower())


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
