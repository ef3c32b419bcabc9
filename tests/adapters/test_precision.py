"""Weight formats and KV-cache dtypes per stack: each stack's own spelling, and a clear refusal naming what works."""

from __future__ import annotations

import pytest
import yaml

from specplug.errors import StackError
from specplug.rendering import render_plan

from .conftest import make_plan

L8 = "meta-llama/Llama-3.1-8B-Instruct"


def argv_of(stack, version, **kw):
    return render_plan(make_plan(stack, version, model=kw.pop("model", L8), **kw)).spec.argv


def value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def refused(stack, version, match, **kw):
    with pytest.raises(StackError, match=match) as exc:
        render_plan(make_plan(stack, version, model=kw.pop("model", L8), **kw))
    return exc.value


# -- vLLM ------------------------------------------------------------------------------------------------


def test_vllm_quantizes_a_16bit_checkpoint_to_fp8_and_sets_the_kv_dtype():
    argv = argv_of("vllm", "0.32.0", serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})
    assert value(argv, "--quantization") == "fp8" and value(argv, "--kv-cache-dtype") == "fp8"
    assert argv.index("--quantization") < argv.index("--speculative-config")


def test_vllm_renders_nothing_for_a_checkpoint_served_as_it_is():
    for serve, fmt in (({}, "bf16"), ({"quantization": "fp8"}, "fp8"), ({"quantization": "int4-awq"}, "int4-awq"),
                       ({"quantization": "bf16"}, "fp16")):
        argv = argv_of("vllm", "0.32.0", weight_format=fmt, serve=serve)
        assert "--quantization" not in argv and "--kv-cache-dtype" not in argv, (serve, fmt)


def test_a_16bit_checkpoint_served_in_the_other_16bit_format_is_a_dtype():
    assert value(argv_of("vllm", "0.32.0", serve={"quantization": "fp16"}), "--dtype") == "float16"
    assert value(argv_of("sglang", "0.5.23", weight_format="fp16", serve={"quantization": "bf16"}), "--dtype") == "bfloat16"
    assert "--dtype" not in argv_of("vllm", "0.32.0", serve={"quantization": "bf16"})
    assert value(argv_of("vllm", "0.32.0", serve={"quantization": "fp16", "dtype": "bfloat16"}), "--dtype") == "bfloat16"


def test_vllm_int8_at_load_only_where_the_shorthand_exists():
    assert value(argv_of("vllm", "0.32.0", serve={"quantization": "int8"}), "--quantization") == "int8_per_channel_weight_only"
    err = refused("vllm", "0.20.0", "int8", serve={"quantization": "int8"})
    assert "fp8" in err.hint


def test_vllm_refuses_awq_of_a_16bit_checkpoint_and_says_what_works():
    err = refused("vllm", "0.32.0", "serves int4-awq only from a checkpoint", serve={"quantization": "int4-awq"})
    assert "Leave serve.quantization unset" in err.hint and "int4-awq checkpoint" in err.hint and "fp8" in err.hint


def test_vllm_refuses_gguf_types_and_dequantizing():
    assert "llamacpp" in refused("vllm", "0.32.0", "GGUF", serve={"quantization": "q4_k_m"}).hint
    refused("vllm", "0.32.0", "cannot turn the fp8 checkpoint back", weight_format="fp8", serve={"quantization": "bf16"})


def test_vllm_kv_dtypes_follow_the_version():
    assert value(argv_of("vllm", "0.32.0", serve={"kv_cache_dtype": "float16"}), "--kv-cache-dtype") == "float16"
    assert value(argv_of("vllm", "0.20.0", serve={"kv_cache_dtype": "bfloat16"}), "--kv-cache-dtype") == "bfloat16"
    err = refused("vllm", "0.20.0", "float16", serve={"kv_cache_dtype": "float16"})
    assert "fp8_e4m3" in err.hint


# -- SGLang ----------------------------------------------------------------------------------------------


def test_sglang_spells_fp8_and_its_kv_cache_its_own_way():
    argv = argv_of("sglang", "0.5.23", serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})
    assert value(argv, "--quantization") == "fp8" and value(argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert value(argv_of("sglang", "0.5.23", serve={"quantization": "nvfp4"}), "--quantization") == "nvfp4_online"


def test_sglang_refuses_what_it_lacks():
    refused("sglang", "0.5.23", "float16", serve={"kv_cache_dtype": "float16"})
    refused("sglang", "0.5.2", "nvfp4", serve={"quantization": "nvfp4"})
    refused("sglang", "0.5.23", "int4-gptq", serve={"quantization": "int4-gptq"})


# -- TensorRT-LLM ----------------------------------------------------------------------------------------


def trt_yaml(version, **kw):
    r = render_plan(make_plan("trtllm", version, model=kw.pop("model", L8), **kw))
    return yaml.safe_load(r.spec.files["trtllm-config.yaml"])


def test_trtllm_kv_dtype_goes_into_kv_cache_config():
    from specplug.adapters.trtllm import llm_args_problems

    args = trt_yaml("1.2.0", method="eagle3", drafter="x/e3", k=3, serve={"kv_cache_dtype": "fp8"})
    assert args["kv_cache_config"] == {"dtype": "fp8"}
    assert llm_args_problems(args, "1.2.0") == []
    # no speculation: the YAML carries the cache dtype alone
    assert trt_yaml("1.0.0", method="none", serve={"kv_cache_dtype": "fp8_e4m3"}) == {"kv_cache_config": {"dtype": "fp8"}}


def test_trtllm_refusals_name_what_works():
    assert "1.0.0" in refused("trtllm", "0.17.0", "KV cache as fp8", serve={"kv_cache_dtype": "fp8"}).hint
    refused("trtllm", "1.2.0", "e4m3", serve={"kv_cache_dtype": "fp8_e5m2"})
    refused("trtllm", "1.2.0", "TensorRT engine", model="/engines/m", method="medusa", drafter="x/m", k=3,
            serve={"kv_cache_dtype": "fp8"})
    err = refused("trtllm", "1.2.0", "quantized that way", serve={"quantization": "fp8"})
    assert "fp8 checkpoint" in err.hint
    # a checkpoint already in the format is served as it is
    assert "trtllm-config.yaml" not in render_plan(make_plan("trtllm", "1.2.0", method="none", weight_format="fp8",
                                                             serve={"quantization": "fp8"})).spec.files


# -- llama.cpp -------------------------------------------------------------------------------------------

GGUF = "/models/qwen2.5-32b-q4_k_m.gguf"


def test_llamacpp_fetches_the_gguf_type_asked_for():
    argv = argv_of("llamacpp", "b10576", model="Qwen/Qwen2.5-32B-Instruct", method="none", serve={"quantization": "q5_k_m"})
    assert value(argv, "-hf") == "Qwen/Qwen2.5-32B-Instruct-GGUF:Q5_K_M"


def test_llamacpp_fetches_the_checkpoints_own_gguf_type():
    argv = argv_of("llamacpp", "b10576", model="Qwen/Qwen2.5-32B-Instruct", method="none", weight_format="q6_k")
    assert value(argv, "-hf") == "Qwen/Qwen2.5-32B-Instruct-GGUF:Q6_K"


def test_llamacpp_checks_a_gguf_file_against_the_type():
    assert value(argv_of("llamacpp", "b10576", model=GGUF, method="none", serve={"quantization": "q4_k_m"}), "-m") == GGUF
    err = refused("llamacpp", "b10576", "is a q4_k_m GGUF", model=GGUF, method="none", serve={"quantization": "q8_0"})
    assert "Q8_0.gguf" in err.hint
    r = render_plan(make_plan("llamacpp", "b10576", model="/models/mystery.gguf", method="none", serve={"quantization": "q8_0"}))
    assert any("does not name its GGUF type" in n for n in r.spec.notes)


def test_llamacpp_refuses_formats_that_are_not_gguf():
    err = refused("llamacpp", "b10576", "not a GGUF type", model=GGUF, method="none", serve={"quantization": "fp8"})
    assert "q4_k_m" in err.hint and "vLLM" in err.hint


def test_llamacpp_kv_cache_types():
    argv = argv_of("llamacpp", "b10576", model=GGUF, method="none", serve={"kv_cache_dtype": "fp8"})
    assert value(argv, "--cache-type-k") == "q8_0" and value(argv, "--cache-type-v") == "q8_0"
    assert "--cache-type-k" not in argv_of("llamacpp", "b10576", model=GGUF, method="none", serve={"kv_cache_dtype": "float16"})
    assert value(argv_of("llamacpp", "b10576", model=GGUF, method="none", serve={"kv_cache_dtype": "bfloat16"}), "--cache-type-v") == "bf16"
    refused("llamacpp", "b5000", "bf16 caches need build", model=GGUF, method="none", serve={"kv_cache_dtype": "bfloat16"})
    refused("llamacpp", "b10576", "no fp8 encodings", model=GGUF, method="none", serve={"kv_cache_dtype": "fp8_e5m2"})


# -- TGI and the embedded runtime -----------------------------------------------------------------------

MISTRAL = "mistralai/Mistral-7B-Instruct-v0.2"


def test_tgi_quantizes_on_the_fly_with_its_names():
    argv = argv_of("tgi", "3.3.7", model=MISTRAL, serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})
    assert value(argv, "--quantize") == "fp8" and value(argv, "--kv-cache-dtype") == "fp8_e4m3fn"
    assert value(argv_of("tgi", "3.3.7", model=MISTRAL, serve={"quantization": "int8"}), "--quantize") == "eetq"


def test_tgi_refusals():
    refused("tgi", "3.3.7", "int4-awq", model=MISTRAL, serve={"quantization": "int4-awq"})
    refused("tgi", "3.3.7", "--dtype cannot be used with --quantize", model=MISTRAL,
            serve={"quantization": "fp8", "dtype": "float16"})
    refused("tgi", "2.0.0", "fp8", model=MISTRAL, serve={"kv_cache_dtype": "fp8"})


def test_embedded_serves_checkpoints_as_they_are_and_its_fallback_drops_precision():
    from specplug.adapters.embedded import adapter

    plan = make_plan("embedded", "0.1.0", model="HuggingFaceTB/SmolLM2-135M-Instruct",
                     serve={"quantization": "fp8", "kv_cache_dtype": "fp8"})
    with pytest.raises(StackError, match="serves checkpoints as they are"):
        render_plan(plan)
    fb = adapter.fallback_plan(plan, "vllm is not installed")
    assert fb.serve.quantization is None and fb.serve.kv_cache_dtype == "auto"
    render_plan(fb)
