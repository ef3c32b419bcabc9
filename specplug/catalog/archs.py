"""The architectures specplug reads from config.json, as data: which keys name each fact, each model type's
defaults for keys its configs may omit, and how its layers are laid out (attention, sliding-window, linear
attention or Mamba; dense MLP or experts). ``specplug.catalog.derive`` turns a config into facts with these tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Config keys that name one fact, first match wins (families spell the same thing differently).
KEYS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim", "attention_head_dim", "kv_channels"),
    "v_head_dim": ("v_head_dim",),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"),
    "tie_word_embeddings": ("tie_word_embeddings",),
    "moe_num_experts": ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts"),
    "moe_experts_per_token": ("num_experts_per_tok", "moe_k", "top_k_experts", "num_experts_per_token", "moe_topk"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size"),
    "moe_shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts", "num_shared_expert"),
    "shared_expert_intermediate_size": (
        "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "share_expert_dim", "shared_intermediate_size",
    ),
    "mtp_layers": ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers"),
    "sliding_window": ("sliding_window",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
}

# Sub-configs that hold the language model of a multimodal or wrapped checkpoint, searched in this order.
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")

# config.json layer_types spellings -> specplug's layer kinds (only attention kinds keep a KV cache). "linear"
# is the model type's own linear mixer (ArchSpec.linear): configs write linear_attention for all of them.
LAYER_TYPE_KINDS: dict[str, str] = {
    "full_attention": "full_attention",
    "attention": "full_attention",
    "global_attention": "full_attention",
    "indexed_attention": "full_attention",  # DeepSeek sparse attention: full attention with a token indexer
    "sliding_attention": "sliding_attention",
    "local_attention": "sliding_attention",
    "linear_attention": "linear",
    "mamba": "mamba",
}

# Nemotron-H hybrid_override_pattern characters -> (mixer kind, feed-forward kind) of one block.
NEMOTRON_BLOCKS: dict[str, tuple[str, str]] = {
    "M": ("mamba", "none"),
    "*": ("full_attention", "none"),
    "-": ("none", "dense"),
    "E": ("none", "moe"),
}


@dataclass(frozen=True)
class ArchSpec:
    """How one ``model_type`` lays out its layers. ``layout`` names the rule that reads the per-layer kinds
    (derive.LAYOUTS); ``defaults`` are its transformers config class's values for keys a config.json may omit."""

    layout: str = "plain"
    mlp: str = "gated"  # gated: gate+up+down projections; plain: up+down only
    defaults: dict[str, object] = field(default_factory=dict)
    linear: str = "linear_attention"  # what its linear layers are: linear_attention (Gated DeltaNet), mamba, lightning


_GEMMA_TIE = {"tie_word_embeddings": True}

# The model types specplug reads; any other is refused with what would work instead of being guessed at.
ARCHS: dict[str, ArchSpec] = {
    # dense decoders: one attention and one gated MLP per layer
    "llama": ArchSpec(),
    "mistral": ArchSpec(layout="mistral"),
    "ministral": ArchSpec(),
    "ministral3": ArchSpec(),
    "qwen2": ArchSpec(layout="qwen2"),
    "qwen3": ArchSpec(),
    "qwen2_5_vl_text": ArchSpec(),
    "qwen2_5_vl": ArchSpec(),
    "qwen3_vl_text": ArchSpec(),
    "phi3": ArchSpec(),
    "granite": ArchSpec(),
    "olmo": ArchSpec(),
    "olmo2": ArchSpec(),
    "olmo3": ArchSpec(),
    "exaone4": ArchSpec(),
    "ernie4_5": ArchSpec(defaults={"tie_word_embeddings": True}),
    "hunyuan_v1_dense": ArchSpec(),
    "mimo": ArchSpec(),
    "smollm3": ArchSpec(),
    "nemotron-nas": ArchSpec(layout="deci"),
    "gemma": ArchSpec(defaults=_GEMMA_TIE),
    "gemma2": ArchSpec(layout="gemma2", defaults=_GEMMA_TIE),
    # Gemma 3's released config.json names only what differs from Gemma3TextConfig's defaults.
    "gemma3_text": ArchSpec(layout="gemma3", defaults={
        **_GEMMA_TIE, "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "max_position_embeddings": 131072, "sliding_window": 4096,
    }),
    "gemma3n_text": ArchSpec(defaults=_GEMMA_TIE),
    "gemma4_text": ArchSpec(defaults=_GEMMA_TIE),
    # mixture of experts
    "mixtral": ArchSpec(layout="mistral"),
    "qwen2_moe": ArchSpec(),
    "qwen3_moe": ArchSpec(),
    "qwen3_vl_moe_text": ArchSpec(),
    "olmoe": ArchSpec(),
    "granitemoe": ArchSpec(),
    "phimoe": ArchSpec(),
    "gpt_oss": ArchSpec(),
    "minimax_m2": ArchSpec(),
    "minimax_m3": ArchSpec(),
    "llama4_text": ArchSpec(defaults={"n_shared_experts": 1}),  # each MoE layer adds one shared expert
    "ernie4_5_moe": ArchSpec(defaults={"tie_word_embeddings": True}),
    "hunyuan_v1_moe": ArchSpec(),
    "glm4_moe": ArchSpec(),
    "mimo_v2_flash": ArchSpec(layout="mimo_v2"),
    # multi-head latent attention (DeepSeek V2/V3 and the models built on them)
    "deepseek_v2": ArchSpec(),
    "deepseek_v3": ArchSpec(),
    "deepseek_v32": ArchSpec(),
    "kimi_k2": ArchSpec(),
    "glm_moe_dsa": ArchSpec(),
    # hybrids: only their attention layers keep a KV cache that grows with the context
    "qwen3_next": ArchSpec(layout="qwen3_next", defaults={"attn_output_gate": True}),  # its attention is always gated
    "qwen3_5_text": ArchSpec(layout="qwen3_next"),
    "qwen3_5_moe_text": ArchSpec(layout="qwen3_next"),
    "minimax": ArchSpec(layout="minimax", linear="lightning"),
    "nemotron_h": ArchSpec(layout="nemotron_h", mlp="plain"),
    "granitemoehybrid": ArchSpec(linear="mamba"),
    "falcon_h1": ArchSpec(layout="falcon_h1"),
    "jamba": ArchSpec(layout="jamba"),
}

# Wrapper model types whose text model sits in a sub-config without its own model_type.
WRAPPED_TEXT_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "gemma3n": "gemma3n_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "mistral3": "mistral",
    "kimi_k25": "deepseek_v3",
}
