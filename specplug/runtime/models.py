"""Loading targets and drafters by name, and building an engine from names.

A model is ``smollm2-135m`` / ``smollm2-135m-draft`` (the packaged SmolLM2, see :mod:`specplug.runtime.smollm2`),
a local Hugging Face folder, or a hub id already in the local Hugging Face cache (hubs are not contacted).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplug.errors import SpecplugError
from specplug.fileio import user_path
from specplug.runtime import smollm2
from specplug.runtime.smollm2 import DRAFT_VOCAB_FILE

if TYPE_CHECKING:  # this module stays importable without torch (adapters ask is_packaged)
    import torch

    from specplug.runtime.engine import SpeculativeEngine

DTYPES = ("auto", "float32", "bfloat16", "float16")
METHODS = ("none", "ngram", "draft_model")
PACKAGED = {smollm2.TARGET_NAME: smollm2.ensure_target, smollm2.DRAFT_NAME: smollm2.ensure_draft}
DEFAULT_DRAFTERS = {smollm2.TARGET_NAME: smollm2.DRAFT_NAME}
# Other spellings that mean the packaged target.
ALIASES = {"smollm2": smollm2.TARGET_NAME, "huggingfacetb/smollm2-135m-instruct": smollm2.TARGET_NAME}


def ngram_match(paced: bool, lo: int | None = None, hi: int | None = None) -> tuple[int, int]:
    """Shortest and longest n-gram match for prompt lookup: the ones given, else the defaults.

    Paced decoding also drafts from one-token matches (as transformers' prompt lookup does): it keeps their
    acceptance apart from longer matches' and sends them only where a wider pass pays. A fixed k would send
    every weak match at full width, so it keeps 2.
    """
    lo = lo or min(1 if paced else 2, hi or 4)
    return lo, hi or max(4, lo)


def canonical(name: str) -> str:
    low = name.lower()
    return ALIASES.get(low, low if low in PACKAGED else name)


def is_packaged(name: str | None) -> bool:
    """Whether ``name`` is a model the runtime provides itself (no torch import)."""
    return bool(name) and canonical(name) in PACKAGED


def resolve_device(device: str) -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise SpecplugError(f"Unknown device {device!r}.", "Use auto, cpu, cuda or cuda:N.")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise SpecplugError(f"--device {device} was asked for, but torch sees no CUDA GPU.",
                                "Use --device cpu or auto.")
        if index and int(index) >= count:
            raise SpecplugError(f"--device {device} was asked for, but torch sees {count} CUDA GPU(s).",
                                f"Use cuda:0 to cuda:{count - 1}.")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    import torch

    if dtype not in DTYPES:
        raise SpecplugError(f"Unknown dtype {dtype!r}.", f"Use one of {', '.join(DTYPES)}.")
    if dtype == "auto":
        # Small models on CPU run fastest in float32; GPUs want half precision.
        if device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return getattr(torch, dtype)


def model_path(name: str) -> Path | str:
    """Where ``name`` lives: a packaged model (fetched/converted on first use), a folder, or a hub id."""
    if is_packaged(name):
        return PACKAGED[canonical(name)]()
    path = user_path(name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpecplugError(f"{path} has no config.json, so it is not a Hugging Face model folder.")
        return path
    return name


def draft_vocab(name: str) -> list[int] | None:
    """The draft vocabulary listed in drafter ``name``'s folder (:data:`DRAFT_VOCAB_FILE`), or None for all."""
    import json

    where = model_path(name)
    path = Path(where) / DRAFT_VOCAB_FILE
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text())["ids"]
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ValueError("ids is not a list of integers")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecplugError(f"Cannot read the draft vocabulary {path}: {exc}",
                            'Write it as {"ids": [token ids]}, or delete it to draft from every token.') from exc
    return ids


def load_model(name: str, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # transformers draws a per-tensor loading bar on stderr; for specplug's output it is only noise.
    hf_logging.disable_progress_bar()
    where = model_path(name)
    try:
        tok = AutoTokenizer.from_pretrained(str(where), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            str(where), dtype=dtype, local_files_only=True, attn_implementation="sdpa"
        )
    except OSError as exc:
        raise SpecplugError(
            f"Model {name!r} is neither packaged, a local folder, nor in the local Hugging Face cache ({exc}).",
            f"Use {smollm2.TARGET_NAME}, or download the model to a folder and pass its path.",
        ) from exc
    return model.to(device).eval(), tok


def build_engine(
    model: str,
    method: str = "ngram",
    drafter: str | None = None,
    k: int = 4,
    device: str = "auto",
    dtype: str = "auto",
    adaptive: bool = False,
    ngram_min: int | None = None,
    ngram_max: int | None = None,
    paced: bool = True,
    prefix_cache_mb: float = 0,
    prefill_chunk: int | None = None,
) -> SpeculativeEngine:
    """Load the target (and drafter) and return a ready engine.

    ``paced`` (the default here) makes ``k`` the longest draft: each step drafts the length that measured pass
    costs and acceptance say pays best (see :mod:`specplug.runtime.pacing`). Unset n-gram match lengths take
    :func:`ngram_match`'s defaults. ``prefix_cache_mb``: how much of the target's KV of prompt prefixes to keep
    for later prompts that start the same way (0: none, :mod:`specplug.runtime.prefix`).
    """
    from specplug.runtime.engine import SpeculativeEngine
    from specplug.runtime.proposers import DraftModelProposer, NgramProposer, vocab_ids

    if method not in METHODS:
        raise SpecplugError(f"Unknown method {method!r}.", f"Use one of {', '.join(METHODS)}.")
    if k < 1:
        raise SpecplugError(f"-k must be >= 1, got {k}.")
    ngram_min, ngram_max = ngram_match(paced, ngram_min, ngram_max)
    if not 1 <= ngram_min <= ngram_max:
        raise SpecplugError(f"Need 1 <= ngram min <= ngram max, got {ngram_min} and {ngram_max}.")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    target, tok = load_model(model, dev, dt)
    factory = None
    if method == "ngram":
        def factory() -> NgramProposer:
            return NgramProposer(ngram_min, ngram_max)
    elif method == "draft_model":
        drafter = drafter or DEFAULT_DRAFTERS.get(canonical(model))
        if drafter is None:
            raise SpecplugError(
                f"No default drafter for {model!r}.", "Pass --drafter with a smaller model that shares its tokenizer."
            )
        where = str(model_path(drafter))  # once: for the packaged drafter it hashes the shipped weights
        draft, _ = load_model(where, dev, dt)
        if draft.config.vocab_size != target.config.vocab_size:
            raise SpecplugError(
                f"Drafter {drafter!r} has a vocabulary of {draft.config.vocab_size}, the target "
                f"{target.config.vocab_size}.",
                "A drafter must share the target's tokenizer.",
            )

        vocab = draft_vocab(where)
        try:
            if vocab is not None:
                vocab_ids(vocab, draft.config.vocab_size)
        except ValueError as exc:
            raise SpecplugError(f"Drafter {drafter!r}: {exc}.", f"Fix or delete its {DRAFT_VOCAB_FILE}.") from exc

        def factory() -> DraftModelProposer:
            return DraftModelProposer(draft, dev, vocab=vocab)

    chunk = {} if prefill_chunk is None else {"prefill_chunk": prefill_chunk}  # None: the engine's own
    return SpeculativeEngine(target, tok, factory, k=k, adaptive=adaptive, device=dev, paced=paced,
                             prefix_cache_bytes=int(prefix_cache_mb * 2**20), **chunk)
