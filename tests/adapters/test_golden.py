"""Golden renders per stack and version: the exact launch script and files a user gets.

Regenerate after an intended change with SPECPLUG_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import pytest

from specplug.rendering import render_plan

from .conftest import make_plan

TREE = {"steps": 3, "topk": 4, "num_draft_tokens": 8}
SCHEDULE = [
    {"min_batch": 1, "max_batch": 8, "num_speculative_tokens": 4},
    {"min_batch": 9, "max_batch": 32, "num_speculative_tokens": 2},
    {"min_batch": 33, "num_speculative_tokens": 0},
]
DS = "deepseek-ai/DeepSeek-V3"
L8 = "meta-llama/Llama-3.1-8B-Instruct"
E3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DFLASH = "z-lab/Qwen3-8B-DFlash-b16"
DSPARK = "deepseek-ai/dspark_qwen3_8b_block7"

CASES = {
    # vLLM: legacy flags before --speculative-config; JSON after, with method always explicit
    "vllm-0.7.3-ngram-legacy": ("vllm", "0.7.3", dict(method="ngram", k=4, prompt_lookup_min=2, prompt_lookup_max=5)),
    "vllm-0.7.3-draft-legacy": ("vllm", "0.7.3", dict(model=L8, method="draft_model", drafter="meta-llama/Llama-3.2-1B-Instruct", k=5)),
    "vllm-0.8.0-ngram": ("vllm", "0.8.0", dict(method="ngram", k=4, prompt_lookup_min=2, prompt_lookup_max=5)),
    "vllm-0.10.1-mtp-per-model": ("vllm", "0.10.1", dict(model=DS, method="mtp", k=1, tp=8)),
    "vllm-0.32.0-mtp": ("vllm", "0.32.0", dict(model=DS, method="mtp", k=3, tp=8)),
    "vllm-0.32.0-eagle3-draft-tp1-schedule": ("vllm", "0.32.0", dict(model=L8, method="eagle3", drafter=E3, k=4, tp=2,
                                                                       draft_tensor_parallel_size=1, schedule=SCHEDULE)),
    "vllm-0.20.0-schedule-unsupported": ("vllm", "0.20.0", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    # vLLM late-2026: suffix, PARD with parallel drafting (and before the field: autoregressive), a speculators head
    # served as the model (and before overrides merge: the bare form)
    "vllm-0.32.0-suffix": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="suffix", k=8)),
    "vllm-0.32.0-ngram-gpu": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="ngram_gpu", k=4, prompt_lookup_min=2,
                                                     prompt_lookup_max=4)),
    "vllm-0.32.0-pard-parallel": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-1.7B", method="draft_model", drafter="amd/PARD-Qwen3-0.6B", k=8)),
    "vllm-0.20.0-pard-autoregressive": ("vllm", "0.20.0", dict(model="Qwen/Qwen3-1.7B", method="draft_model", drafter="amd/PARD-Qwen3-0.6B", k=8)),
    "vllm-0.32.0-speculator": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="eagle3", drafter="RedHatAI/Qwen3-8B-speculator.eagle3", k=4, schedule=SCHEDULE)),
    "vllm-0.20.0-speculator-bare": ("vllm", "0.20.0", dict(model="Qwen/Qwen3-8B", method="eagle3", drafter="RedHatAI/Qwen3-8B-speculator.eagle3", k=3)),
    # DFlash block diffusion: vLLM method dflash, SGLang DFLASH with its block, TensorRT-LLM DFlash, llama.cpp draft-dflash
    "vllm-0.32.0-dflash": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=15)),
    "sglang-0.5.23-dflash": ("sglang", "0.5.23", dict(model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=15)),
    # DSpark: vLLM method dspark with adaptive verification (and without, under pipeline parallelism), SGLang DSPARK
    "vllm-0.32.0-dspark": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="dspark", drafter=DSPARK, k=7)),
    "vllm-0.32.0-dspark-pp": ("vllm", "0.32.0", dict(model="Qwen/Qwen3-8B", method="dspark", drafter=DSPARK, k=7, pp=2)),
    "sglang-0.5.23-dspark": ("sglang", "0.5.23", dict(model="Qwen/Qwen3-8B", method="dspark", drafter=DSPARK, k=7)),
    "trtllm-1.3.0rc14-dflash": ("trtllm", "1.3.0rc14", dict(model="Qwen/Qwen3-8B", method="dflash", drafter=DFLASH, k=15)),
    "trtllm-1.3.0rc22-dspark": ("trtllm", "1.3.0rc22", dict(model="Qwen/Qwen3-8B", method="dspark", drafter=DSPARK, k=7)),
    "trtllm-1.3.0rc8-suffix-sa": ("trtllm", "1.3.0rc8", dict(model="Qwen/Qwen3-8B", method="suffix", k=4, schedule=SCHEDULE)),
    "llamacpp-b10576-dflash": ("llamacpp", "b10576", dict(model="/models/qwen3-8b-q4_k_m.gguf", method="dflash",
                                                          drafter="/models/qwen3-8b-dflash-b16-q8_0.gguf", k=15)),
    # SGLang: algorithm names by version, all three knobs, steps+1 with topk 1, trees get an attention backend
    "sglang-0.5.2-ngram-lookahead": ("sglang", "0.5.2", dict(method="ngram", k=8)),
    "sglang-0.5.23-ngram": ("sglang", "0.5.23", dict(method="ngram", k=8)),
    "sglang-0.5.23-ngram-trie-depth": ("sglang", "0.5.23", dict(method="ngram", k=8, prompt_lookup_min=2, prompt_lookup_max=16)),
    "sglang-0.5.23-eagle3-chain": ("sglang", "0.5.23", dict(model=L8, method="eagle3", drafter=E3, k=3)),
    "sglang-0.5.23-eagle-tree": ("sglang", "0.5.23", dict(model=L8, method="eagle", drafter="lmsys/sglang-EAGLE-LLaMA3-Instruct-8B", k=3, tree=TREE, serve={"max_num_seqs": 64})),
    # SGLang: the schedule as adaptive-steps slots; the n-gram match window where the version has one
    "sglang-0.5.23-eagle3-adaptive": ("sglang", "0.5.23", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    "sglang-0.5.3-ngram-window": ("sglang", "0.5.3", dict(method="ngram", k=8, prompt_lookup_min=2, prompt_lookup_max=6,
                                                         tree={"steps": 8, "topk": 4, "num_draft_tokens": 8})),
    "sglang-0.5.23-mtp": ("sglang", "0.5.23", dict(model=DS, method="mtp", k=1, tp=8)),
    # TensorRT-LLM: decoding_type and model-path key per version, backend per type
    "trtllm-0.17.0-ngram": ("trtllm", "0.17.0", dict(method="ngram", k=3, prompt_lookup_max=4)),
    "trtllm-1.0.0-eagle3": ("trtllm", "1.0.0", dict(model=L8, method="eagle3", drafter=E3, k=4)),
    "trtllm-1.2.0-eagle3-schedule": ("trtllm", "1.2.0", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    # draft_len_schedule's keys change meaning at 1.3.0rc8 (PR #10860): batch >= key before, batch <= key after;
    # 1.0.0 has only max_concurrency, the schedule's k=0 top as an on/off threshold
    "trtllm-1.3.0rc7-eagle3-schedule": ("trtllm", "1.3.0rc7", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    "trtllm-1.3.0rc8-eagle3-schedule": ("trtllm", "1.3.0rc8", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    "trtllm-1.0.0-eagle3-max-concurrency": ("trtllm", "1.0.0", dict(model=L8, method="eagle3", drafter=E3, k=4, schedule=SCHEDULE)),
    "trtllm-1.3.0rc8-mtp": ("trtllm", "1.3.0rc8", dict(model=DS, method="mtp", k=3, tp=8)),
    "trtllm-1.2.0-pard-as-draft": ("trtllm", "1.2.0", dict(model="Qwen/Qwen3-1.7B", method="draft_model", drafter="amd/PARD-Qwen3-0.6B", k=8)),
    "trtllm-1.3.0rc8-pard": ("trtllm", "1.3.0rc8", dict(model="Qwen/Qwen3-1.7B", method="draft_model", drafter="amd/PARD-Qwen3-0.6B", k=8)),
    "trtllm-1.2.0-draft": ("trtllm", "1.2.0", dict(model=L8, method="draft_model", drafter="meta-llama/Llama-3.2-1B-Instruct", k=3, tp=2)),
    "trtllm-1.2.0-mtp": ("trtllm", "1.2.0", dict(model=DS, method="mtp", k=3, tp=8)),
    "trtllm-1.2.0-medusa-engine": ("trtllm", "1.2.0", dict(model="/engines/vicuna-7b-medusa", method="medusa", drafter="FasterDecoding/medusa-vicuna-7b-v1.3", k=4)),
    # llama.cpp: old --draft-* vs new --spec-* generation, draft GPU layers
    "llamacpp-b5000-draft": ("llamacpp", "b5000", dict(model="/models/qwen2.5-32b-q4_k_m.gguf", method="draft_model", drafter="/models/qwen2.5-0.5b-q8_0.gguf", k=16)),
    "llamacpp-b10576-draft": ("llamacpp", "b10576", dict(model="/models/qwen2.5-32b-q4_k_m.gguf", method="draft_model", drafter="/models/qwen2.5-0.5b-q8_0.gguf", k=16)),
    "llamacpp-b10576-ngram": ("llamacpp", "b10576", dict(model="/models/qwen2.5-32b-q4_k_m.gguf", method="ngram", k=8, prompt_lookup_max=3, serve={"api_key_env": "LLAMA_KEY"})),
    # TGI: --speculate N; Medusa checkpoints as the model id
    "tgi-3.3.7-ngram": ("tgi", "3.3.7", dict(model="mistralai/Mistral-7B-Instruct-v0.2", method="ngram", k=2, tp=2)),
    # precision: each stack's own spelling of the served weight format and KV-cache dtype
    "vllm-0.32.0-fp8-kv-fp8": ("vllm", "0.32.0", dict(model=L8, method="eagle3", drafter=E3, k=3,
                                                      serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})),
    "sglang-0.5.23-fp8-kv-fp8": ("sglang", "0.5.23", dict(model=L8, method="eagle3", drafter=E3, k=3,
                                                          serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})),
    "trtllm-1.2.0-eagle3-kv-fp8": ("trtllm", "1.2.0", dict(model=L8, method="eagle3", drafter=E3, k=3,
                                                           serve={"kv_cache_dtype": "fp8"})),
    "llamacpp-b10576-hf-q5-kv-q8": ("llamacpp", "b10576", dict(model="Qwen/Qwen2.5-32B-Instruct", method="ngram", k=8,
                                                               serve={"quantization": "q5_k_m", "kv_cache_dtype": "fp8"})),
    "tgi-3.3.7-fp8": ("tgi", "3.3.7", dict(model="mistralai/Mistral-7B-Instruct-v0.2", method="ngram", k=2,
                                           serve={"quantization": "fp8", "kv_cache_dtype": "fp8_e5m2"})),
    "tgi-3.3.7-medusa": ("tgi", "3.3.7", dict(model="mistralai/Mistral-7B-Instruct-v0.2", method="medusa", drafter="text-generation-inference/Mistral-7B-Instruct-v0.2-medusa", k=3)),
}


def _text(r) -> str:
    parts = [r.script]
    for name, content in sorted(r.files.items()):
        parts.append(f"===== {name} =====\n{content}")
    return "\n".join(parts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_render(case, golden):
    stack, version, kw = CASES[case]
    r = render_plan(make_plan(stack, version, **kw))
    golden(f"{case}.txt", _text(r))
