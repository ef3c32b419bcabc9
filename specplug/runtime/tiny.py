"""Tiny randomly initialised Llama models for fast tests (no download, a few milliseconds per forward)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    vocab_size: int = 96,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    init_std: float = 0.3,
) -> LlamaForCausalLM:
    """A random Llama. float64 and a wide init keep logits far from ties, so greedy paths compare exactly."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        initializer_range=init_std,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype).eval()
    return model


def layer_subset(model: LlamaForCausalLM, layers: tuple[int, ...]) -> LlamaForCausalLM:
    """A drafter that shares ``model``'s embeddings, final norm and head but keeps only ``layers``."""
    cfg = model.config.to_dict()
    cfg["num_hidden_layers"] = len(layers)
    cfg.pop("layer_types", None)
    draft = LlamaForCausalLM(LlamaConfig.from_dict(cfg)).to(device=model.device, dtype=model.dtype).eval()
    draft.model.embed_tokens.load_state_dict(model.model.embed_tokens.state_dict())
    draft.model.norm.load_state_dict(model.model.norm.state_dict())
    draft.lm_head.load_state_dict(model.lm_head.state_dict())
    for new_i, old_i in enumerate(layers):
        draft.model.layers[new_i].load_state_dict(model.model.layers[old_i].state_dict())
    return draft
