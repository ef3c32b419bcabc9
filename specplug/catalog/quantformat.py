"""A checkpoint's weight format (a weight_formats.csv name) from config.json's quantization_config, ModelOpt's
hf_quant_config.json or, unquantized, its dtype. A quantization specplug cannot name is an error, not a guess."""

from __future__ import annotations

from collections import Counter
from typing import Any

from specplug.errors import CatalogError

# quant_method values whose weight format is fixed.
QUANT_METHODS: dict[str, str] = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4-awq"}

# compressed-tensors 'format' values -> weight format (None: read the weights' bits and type instead).
COMPRESSED_FORMATS: dict[str, str | None] = {
    "float-quantized": "fp8",
    "nvfp4-pack-quantized": "nvfp4",
    "mxfp4-pack-quantized": "mxfp4",
    "pack-quantized": None,
    "int-quantized": None,
    "naive-quantized": None,
}

# ModelOpt quant_algo values -> weight format.
MODELOPT_ALGOS: dict[str, str] = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "W4A8_NVFP4_FP8": "nvfp4",
                                  "W4A16_AWQ": "int4-awq", "W4A8_AWQ": "int4-awq", "W8A8_SQ_PER_CHANNEL": "int8",
                                  "MXFP4": "mxfp4"}

# (bits, kind of number) of quantized weights -> weight format.
BITS: dict[tuple[int, str], str] = {(8, "float"): "fp8", (4, "float"): "nvfp4", (4, "int"): "int4-gptq", (8, "int"): "int8"}

DTYPES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "bf16", "float": "bf16"}


def weight_format(quant: dict[str, Any] | None, modelopt: dict[str, Any] | None, dtype: str | None) -> tuple[str, str]:
    """(weight format, basis) of a checkpoint: ``quant`` is config.json's quantization_config, ``modelopt`` the
    'quantization' section of hf_quant_config.json, ``dtype`` config.json's torch_dtype / dtype."""
    if quant:
        method = str(quant.get("quant_method") or "").lower()
        fmt = _from_quantization_config(method, quant)
        return fmt, f"config.json quantization_config quant_method {method}" + (f" ({_detail(quant)})" if _detail(quant) else "")
    if modelopt:
        return _modelopt(modelopt), f"hf_quant_config.json quant_algo {modelopt.get('quant_algo')}"
    name = DTYPES.get(str(dtype or "bfloat16").lower().removeprefix("torch."))
    if name is None:
        raise CatalogError(f"config.json's dtype '{dtype}' is not a weight format specplug knows.",
                           "Pass the format you serve with --quantization (see 'specplug schema').")
    note = "; served as bf16" if str(dtype).endswith("float32") else ""
    return name, f"config.json dtype {dtype or 'absent (bf16, as the stacks load it)'}, no quantization_config{note}"


def _from_quantization_config(method: str, q: dict[str, Any]) -> str:
    if method in QUANT_METHODS:
        return QUANT_METHODS[method]
    if method == "gptq":
        return BITS.get((int(q.get("bits") or 4), "int"), "int4-gptq")
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "modelopt":
        return _modelopt(q)
    raise CatalogError(
        f"config.json's quantization_config uses quant_method '{method or '?'}', which specplug cannot size.",
        "Plan the unquantized release, or name the format you serve with --quantization (fp8, int4-awq, nvfp4 ...).",
    )


def _compressed_tensors(q: dict[str, Any]) -> str:
    groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
    fmt = q.get("format") or next((g.get("format") for g in groups if g.get("format")), None)
    if COMPRESSED_FORMATS.get(str(fmt)):
        return str(COMPRESSED_FORMATS[str(fmt)])
    weights = next((g.get("weights") for g in groups if g.get("weights")), None) or {}
    key = (int(weights.get("num_bits") or 0), str(weights.get("type") or "int"))
    if key == (4, "float") and weights.get("group_size") == 32:
        return "mxfp4"  # MX blocks hold 32 values; NVFP4 blocks 16
    if key in BITS:
        return BITS[key]
    raise CatalogError(f"config.json's compressed-tensors scheme ({fmt}, {key[0]}-bit {key[1]}) is not one specplug can size.",
                       "Name the format you serve with --quantization (fp8, int8, int4-gptq, nvfp4).")


def _modelopt(q: dict[str, Any]) -> str:
    algo = str(q.get("quant_algo") or "")
    if algo == "MIXED_PRECISION":
        # Several formats: the one of the MLP / expert layers, which hold most of the weights.
        layers = q.get("quantized_layers") or {}
        bulk = Counter(str(v.get("quant_algo")) for k, v in layers.items() if isinstance(v, dict) and ("mlp" in k or "expert" in k))
        algo = (bulk or Counter(str(v.get("quant_algo")) for v in layers.values() if isinstance(v, dict))).most_common(1)[0][0] if layers else algo
    if algo in MODELOPT_ALGOS:
        return MODELOPT_ALGOS[algo]
    raise CatalogError(f"ModelOpt quant_algo '{algo or '?'}' is not a format specplug can size.",
                       "Name the format you serve with --quantization (fp8, nvfp4, int4-awq).")


def _detail(q: dict[str, Any]) -> str:
    if q.get("quant_algo"):
        return f"quant_algo {q['quant_algo']}"
    if q.get("format"):
        return f"format {q['format']}"
    if q.get("bits"):
        return f"{q['bits']}-bit"
    return ""
