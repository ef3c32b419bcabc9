"""What a drafter checkpoint is, read from its config.json (and model card) the way the stacks read it: its
method, checkpoint format, draft vocabulary and the target it was trained for.

The same files the model reader uses: a Hub repository through huggingface_hub (cache, HF_TOKEN, offline mode,
revisions) or a local folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplug.catalog import hub
from specplug.errors import CatalogError

# Draft architectures by the substrings the stacks' registries name them with (vLLM, SGLang, SpecForge,
# speculators): new targets add classes such as Gemma4DSparkModel or EagleMistralForCausalLM monthly.
_ARCH_PATTERNS = (("PEagle", "p_eagle", "p_eagle"), ("Eagle3", "eagle3", "eagle3"), ("DFlash2", "dflash", "dflash2"),
                  ("DFlash", "dflash", "dflash"), ("LiLiCorr", "dflash", "lilicorr"), ("DSpark", "dspark", "dspark"),
                  ("Eagle", "eagle", "eagle1"), ("MTP", "mtp", "mtp"), ("NextN", "mtp", "mtp"))
_SPECULATORS_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "dflash": "dflash", "dspark": "dspark", "mtp": "mtp"}
_LABEL = {"eagle": "an EAGLE-1/EAGLE-2 head", "eagle3": "an EAGLE-3 head", "medusa": "Medusa heads",
          "mlp_speculator": "an MLP speculator", "dflash": "a DFlash block drafter", "dspark": "a DSpark block drafter",
          "draft_model": "a plain causal LM (a draft model)", "mtp": "an MTP module", "p_eagle": "a P-EAGLE drafter"}


@dataclass(frozen=True)
class DrafterInfo:
    """A drafter checkpoint as its files describe it."""

    repo: str
    method: str  # specplug method name (specplug.methods), or 'p_eagle' for a format no stack here runs
    format: str  # checkpoint format: eagle1, eagle3, eagle3.1, speculators, medusa, mlp_speculator, dflash, ...
    basis: str  # what in config.json said so
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    trained_for: str = ""  # the target the files name (speculators verifier, base_model, base_model_name_or_path)
    trained_for_basis: str = ""
    layers: int | None = None
    source: str = ""

    @property
    def label(self) -> str:
        return _LABEL.get(self.method, self.method)


def classify(cfg: dict[str, Any], repo: str = "", source: str = "", card: dict[str, Any] | None = None) -> DrafterInfo:
    """The drafter ``cfg`` (a parsed config.json) describes; ``card`` is the model card's front matter."""
    archs = [a for a in (cfg.get("architectures") or []) if isinstance(a, str)] if isinstance(cfg.get("architectures"), list) else (
        [cfg["architectures"]] if isinstance(cfg.get("architectures"), str) else [])
    arch = archs[0] if archs else ""
    model_type = str(cfg.get("model_type") or "")
    layers = _int(cfg.get("num_hidden_layers"))
    vocab = _int(cfg.get("vocab_size"))
    draft_vocab = _int(cfg.get("draft_vocab_size"))
    target, target_basis = "", ""
    spec_type = cfg.get("speculators_model_type")
    if isinstance(spec_type, str):
        verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path") or ""
        layer_cfg = cfg.get("transformer_layer_config") or {}
        method = _SPECULATORS_METHODS.get(spec_type, spec_type)
        fmt, basis = "speculators", f"speculators_model_type '{spec_type}'"
        vocab = _int(layer_cfg.get("vocab_size")) or vocab
        layers = _int(layer_cfg.get("num_hidden_layers")) or layers
        target, target_basis = verifier, "speculators_config.verifier.name_or_path" if verifier else ""
    elif "medusa_num_heads" in cfg or model_type == "medusa" or arch == "MedusaModel":
        method, fmt = "medusa", "medusa"
        heads = cfg.get("medusa_num_heads") or cfg.get("num_heads")
        basis = f"medusa_num_heads {heads}" if heads else "model_type 'medusa'"
        layers = _int(cfg.get("medusa_num_layers")) or layers
    elif model_type == "mlp_speculator" or arch == "MLPSpeculatorPreTrainedModel":
        method, fmt, basis = "mlp_speculator", "mlp_speculator", f"model_type 'mlp_speculator', n_predict {cfg.get('n_predict')}"
    elif (named := _by_arch(arch)) and named[0] != "eagle3":
        method, fmt = named
        basis = f"architectures {arch}"
        if method in ("dflash", "dspark"):
            basis += f", block_size {cfg.get('block_size') or (cfg.get('dflash_config') or {}).get('block_size')}"
    elif named or draft_vocab is not None:
        method = "eagle3"
        v31 = bool(cfg.get("fc_norm")) or bool(cfg.get("norm_output"))
        fmt = "eagle3.1" if v31 else "eagle3"
        basis = f"architectures {arch}" if named else "draft_vocab_size (a reduced draft vocabulary)"
        if v31:
            basis += " with fc_norm/norm_output (the EAGLE 3.1 variant)"
    elif model_type == "eagle":
        method, fmt, basis = "eagle", "eagle1", "model_type 'eagle'"
    elif model_type.endswith("_mtp"):
        method, fmt, basis = "mtp", "mtp", f"model_type {model_type}"
    elif arch.endswith("ForCausalLM") and layers == 1:
        # One decoder layer and the LM's own vocabulary: the EAGLE-1 head layout (no draft model has one layer).
        method, fmt, basis = "eagle", "eagle1", f"architectures {arch} with num_hidden_layers 1 and no draft_vocab_size"
    elif arch.endswith(("ForCausalLM", "ForConditionalGeneration")) or model_type:
        method, fmt, basis = "draft_model", "draft_model", f"architectures {arch or model_type}, {layers} layers"
    else:
        raise CatalogError(
            f"config.json of {repo or 'the drafter'} names no architecture or speculative format specplug knows.",
            "Pass --method explicitly with a drafter whose config.json its stack documents, or a catalog drafter "
            "(specplug models drafters TARGET).",
        )
    if not target:
        for key in ("base_model_name_or_path", "target_model", "verifier_name_or_path"):
            if isinstance(cfg.get(key), str) and cfg[key]:
                target, target_basis = cfg[key], f"config.json {key}"
                break
    if not target and card:
        base = card.get("base_model")
        base = base[0] if isinstance(base, list) and base else base
        if isinstance(base, str) and base:
            target, target_basis = base, "model card base_model"
    if method == "draft_model":
        target, target_basis = "", ""  # a draft model's base_model is the model it was tuned from, not a target
    return DrafterInfo(repo=repo, method=method, format=fmt, basis=f"config.json {basis}", vocab_size=vocab,
                       draft_vocab_size=draft_vocab, trained_for=target, trained_for_basis=target_basis, layers=layers,
                       source=source)


def _by_arch(arch: str) -> tuple[str, str] | None:
    """(method, format) an architecture name says, by the first pattern it contains."""
    return next(((method, fmt) for part, method, fmt in _ARCH_PATTERNS if part in arch), None)


def read_drafter(name: str, revision: str | None = None) -> DrafterInfo:
    """The drafter at a Hub id (``org/name[@rev]``) or a local folder, from its config.json and model card."""
    path = Path(name).expanduser()
    if path.is_dir():
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise CatalogError(f"'{name}' has no config.json, so it is not a drafter checkpoint folder.",
                               "Point --drafter at the folder that holds the drafter's config.json and weights.")
        card = path / "README.md"
        return classify(_json(cfg_file, name), str(path.resolve()), f"local folder {path.resolve()}",
                        front_matter(card.read_text(encoding="utf-8", errors="replace")) if card.is_file() else None)
    repo, at = hub.split_revision(name)
    revision = revision or at
    if not hub.is_repo_id(repo):
        raise CatalogError(f"'{name}' is neither a local folder nor a Hugging Face id (org/name).",
                           "Name the drafter as org/name, or give the folder that holds its config.json.")
    cfg_file = hub.fetch(repo, "config.json", revision)
    assert cfg_file is not None
    card = hub.fetch(repo, "README.md", cfg_file.commit, optional=True)
    text = card.path.read_text(encoding="utf-8", errors="replace") if card else ""
    return classify(_json(cfg_file.path, repo), repo, f"config.json of {repo} at revision {cfg_file.commit[:10]}",
                    front_matter(text))


def check_method(info: DrafterInfo, method: str) -> None:
    """CatalogError when ``method`` is not the one the drafter's files say: the stack would load the checkpoint
    under the wrong method and accept (almost) nothing, or refuse it."""
    if method == info.method:
        return
    if method == "draft_model" and info.method == "draft_model":
        return
    hint = f"Run it with --method {info.method}" if info.method != "p_eagle" else (
        "No stack specplug drives runs P-EAGLE checkpoints; pick another drafter")
    raise CatalogError(
        f"{info.repo} is {info.label} ({info.basis}), not a drafter for --method {method}: run as {method} it "
        f"{'loads but accepts almost no drafted tokens' if {method, info.method} == {'eagle', 'eagle3'} else 'will not load or draft'}.",
        f"{hint}, or name a drafter for {method} (specplug models drafters TARGET).",
    )


def front_matter(text: str) -> dict[str, Any]:
    """The YAML front matter of a model card: only the flat keys and lists the Hub writes (base_model, tags)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, Any] = {}
    key = ""
    for line in lines[1:]:
        if line.strip() == "---":
            break
        if line.startswith(("- ", "  - ")) and key:
            out.setdefault(key, [])
            if isinstance(out[key], list):
                out[key].append(line.split("- ", 1)[1].strip().strip("'\""))
            continue
        name, sep, value = line.partition(":")
        if sep and not line.startswith(" "):
            key = name.strip()
            value = value.strip().strip("'\"")
            out[key] = value if value else []
    return out


def _json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"Cannot parse config.json of {what}: {exc}.", "Check the drafter's config.json.") from None
    if not isinstance(data, dict):
        raise CatalogError(f"config.json of {what} is not a JSON object.", "Check the drafter's config.json.")
    return data


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
