"""The speculation methods specplug knows, one row each: every list of methods in the package derives from here.

Adding a method is one row here, its prior in the policy's data and what each stack renders for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class MethodInfo:
    name: str
    # none: plain decoding; copy: drafts copied from text already seen; draft_model: a separate small LM;
    # head: a drafter trained on one target's hidden states; native: the target's own MTP layers; block: a
    # drafter that proposes a whole block in one pass.
    family: Literal["none", "copy", "draft_model", "head", "native", "block"]
    summary: str
    # Checkpoint formats a drafter of this method comes in (drafters.csv's `format` column).
    formats: tuple[str, ...] = ()
    # Takes the prompt_lookup_min/max match window (n-gram proposers).
    lookup_window: bool = False
    # Checkpoint formats that run under this method only in some stacks: format -> ((stack, first version), ...).
    # A stack's own source is the basis (the drafter's architecture dispatched under this method).
    format_stacks: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def takes_drafter(self) -> bool:
        """The user names a drafter (a draft model or a head) for it; MTP layers come with the target."""
        return self.family in ("draft_model", "head", "block")

    @property
    def needs_drafter(self) -> bool:
        """A separate checkpoint must be named or found (draft model, head, block drafter)."""
        return self.takes_drafter

    @property
    def drafts_by(self) -> Literal["none", "copy", "model", "learned"]:
        """copy: from text already seen; model: a general small LM; learned: a drafter trained on the target's
        own features (heads, block drafters, MTP layers)."""
        if self.family in ("none", "copy"):
            return self.family  # type: ignore[return-value]
        return "model" if self.family == "draft_model" else "learned"

    def stacks_for_format(self, fmt: str) -> dict[str, str]:
        """Stacks (and first versions) whose source runs checkpoint format ``fmt`` under this method; empty when
        the table states none (the format's stacks are the drafter row's)."""
        return {stack: version for f, pairs in self.format_stacks if f == fmt for stack, version in pairs}

    @property
    def trained_on_target(self) -> bool:
        """A drafter trained on one target's features: it drafts for that target (or a sibling) only."""
        return self.family in ("head", "block")


# Row order is the policy's candidate order: ties in predicted speedup go to the earlier (simpler to run) method.
TABLE: tuple[MethodInfo, ...] = (
    MethodInfo("none", "none", "plain decoding, no speculation"),
    MethodInfo("ngram", "copy", "prompt lookup: n-gram matches in the prompt and output, on the host", lookup_window=True),
    MethodInfo("ngram_gpu", "copy", "prompt lookup on the GPU", lookup_window=True),
    MethodInfo("suffix", "copy", "suffix-tree lookup over the prompt and earlier outputs"),
    MethodInfo("mtp", "native", "the target's own multi-token-prediction layers", formats=("mtp",)),
    MethodInfo("eagle3", "head", "EAGLE-3 head (multi-layer features)", formats=("eagle3", "speculators", "specforge")),
    MethodInfo("eagle", "head", "EAGLE / EAGLE-2 head (last-layer features)", formats=("eagle1", "speculators")),
    MethodInfo("draft_model", "draft_model", "a separate small model sharing the target's vocabulary",
               formats=("draft_model", "pard")),
    # DFlash2 and LiLiCorr checkpoints run as method dflash: vLLM 0.32 dispatches architectures DFlash2DraftModel
    # and LiLiCorrDraftModel under it (v1/worker/gpu/spec_decode/__init__.py, model_executor/models/registry.py);
    # SGLang 0.5.23 loads LiLiCorrDraftModel in its DFlash worker (srt/models/lilicorr.py, dflash_worker_v2.py).
    # Neither stack's source names EAGLE 3.1 or P-EAGLE, so they are no method here.
    MethodInfo("dflash", "block", "DFlash block-diffusion drafter (DFlash2 and LiLiCorr checkpoints too)",
               formats=("dflash", "dflash2", "lilicorr"),
               format_stacks=(("dflash2", (("vllm", "0.32"),)), ("lilicorr", (("vllm", "0.32"), ("sglang", "0.5.23"))))),
    MethodInfo("dspark", "block", "DSpark block drafter", formats=("dspark",)),
    MethodInfo("medusa", "head", "Medusa heads", formats=("medusa",)),
    MethodInfo("mlp_speculator", "head", "MLP speculator heads", formats=("mlp_speculator",)),
    MethodInfo("lookahead", "copy", "lookahead decoding (Jacobi n-grams from the target itself)"),
)

BY_NAME: dict[str, MethodInfo] = {m.name: m for m in TABLE}


def names(pred=lambda m: True) -> tuple[str, ...]:
    """Method names whose row satisfies ``pred``, in the table's order."""
    return tuple(m.name for m in TABLE if pred(m))


# Config-file order (the schema's enum): plain first, then as the table lists them.
METHODS: tuple[str, ...] = names()
SPECULATING: tuple[str, ...] = names(lambda m: m.family != "none")
COPY_METHODS: tuple[str, ...] = names(lambda m: m.family == "copy")
LOOKUP_METHODS: tuple[str, ...] = names(lambda m: m.lookup_window)
DRAFTER_METHODS: tuple[str, ...] = names(lambda m: m.takes_drafter)
HEAD_METHODS: tuple[str, ...] = names(lambda m: m.trained_on_target)
BLOCK_METHODS: tuple[str, ...] = names(lambda m: m.family == "block")
# Methods that draft from a model (a drafter or the target's MTP layers): the config's DrafterSpeculation.
MODEL_METHODS: tuple[str, ...] = names(lambda m: m.family in ("draft_model", "head", "native", "block"))
FORMATS_BY_METHOD: dict[str, frozenset[str]] = {m.name: frozenset(m.formats) for m in TABLE if m.formats}
