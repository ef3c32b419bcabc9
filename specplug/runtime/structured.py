"""Structured output: a grammar (JSON schema, regex, choice, Lark/GBNF) that masks the target's logits, through
llguidance (the grammar library vLLM and SGLang use).

llguidance is imported here only, and only when a request asks for structure: a server that never sees one
neither imports it nor masks anything.

Speculation stays lossless. A :class:`GrammarState` walks a row's draft tokens before the verify pass, so that
verified position j is masked by the grammar's state after drafts 0..j-1 (the distribution plain decoding would
sample from there); a draft the grammar forbids gets target probability 0 and is rejected. After verification the
matcher keeps exactly the accepted drafts plus the target's extra token (:meth:`GrammarState.settle`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import torch

# The grammar formats llguidance.grammar_from reads, by the name requests use for them.
FORMATS = ("json_schema", "regex", "choice", "grammar")


class GrammarError(ValueError):
    """A grammar the request sent that llguidance cannot compile (a 400, not a server error)."""


class StructuredOutputUnavailable(RuntimeError):
    """This server cannot do structured output (llguidance missing, or a tokenizer it cannot read)."""


@dataclass(frozen=True)
class Grammar:
    """A compiled grammar and the tokenizer it matches; each request makes its own :class:`GrammarState`."""

    tokenizer: Any  # llguidance.LLTokenizer
    grammar: str
    eos_token_ids: tuple[int, ...] = ()

    def start(self) -> GrammarState:
        return GrammarState(self)


class GrammarCompiler:
    """Compiles requests' grammars against one HF tokenizer; the llguidance tokenizer is built once, on first use."""

    def __init__(self, hf_tokenizer: Any, eos_token_ids: list[int] | None = None) -> None:
        self.hf_tokenizer = hf_tokenizer
        self.eos_token_ids = sorted(eos_token_ids or [])
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _ll_tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                try:
                    import llguidance.hf
                except ImportError:
                    raise StructuredOutputUnavailable(
                        "Structured output needs llguidance, which is not installed; pip install 'specplug[runtime]'."
                    ) from None
                try:
                    # The engine's end-of-sequence ids, so the grammar lets the model end exactly where it may stop.
                    eos = self.eos_token_ids or None
                    self._tokenizer = llguidance.hf.from_tokenizer(self.hf_tokenizer, eos_token=eos)
                except (ValueError, TypeError) as exc:
                    raise StructuredOutputUnavailable(
                        f"Structured output needs a fast Hugging Face tokenizer; this model's cannot be read ({exc})."
                    ) from None
            return self._tokenizer

    def compile(self, fmt: str, spec: Any) -> Grammar:
        """``fmt`` one of :data:`FORMATS`; ``spec`` a JSON schema (dict or text), a regex, a list of choices or a
        Lark/GBNF grammar. Raises :class:`GrammarError` for a grammar llguidance refuses."""
        import llguidance

        tokenizer = self._ll_tokenizer()
        try:
            if fmt == "json_schema":
                grammar = llguidance.LLMatcher.grammar_from_json_schema(spec if isinstance(spec, str | dict) else json.dumps(spec))
            elif fmt == "choice":
                if not isinstance(spec, list) or not spec or not all(isinstance(c, str) for c in spec):
                    raise GrammarError("choice must be a non-empty list of strings")
                grammar = llguidance.grammar_from("choice", json.dumps(spec))
            else:
                grammar = llguidance.grammar_from("regex" if fmt == "regex" else "grammar", str(spec))
        except GrammarError:
            raise
        except (ValueError, TypeError) as exc:
            raise GrammarError(str(exc)) from None
        error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if error and not error.startswith("WARNING"):
            raise GrammarError(error)
        return Grammar(tokenizer, grammar, tuple(self.eos_token_ids))


def _unpack(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """llguidance's packed int32 mask (one bit per token) -> ``(vocab,)`` bool, False past the tokenizer's words."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = ((bitmask.view(-1, 1) >> shifts) & 1).flatten().bool()
    if bits.numel() >= vocab:
        return bits[:vocab]
    return torch.cat([bits, bits.new_zeros(vocab - bits.numel())])


class GrammarState:
    """One request's matcher, walked through a step's drafts and settled on what verification kept.

    Per step: :meth:`allowed` gives the mask at the current position (the state after the drafts walked so far),
    :meth:`advance` walks one draft token; :meth:`settle` then rolls the walked drafts back to the accepted ones
    and consumes the target's extra token. A draft the grammar forbids stops the walk: it will be rejected, so
    the positions after it are never sampled from and repeat its mask.
    """

    def __init__(self, grammar: Grammar) -> None:
        import llguidance

        self.matcher = llguidance.LLMatcher(grammar.tokenizer, grammar.grammar)
        self.eos = grammar.eos_token_ids
        self.walked = 0  # drafts consumed this step
        self.broken = False  # a draft the grammar forbids was met this step
        self._masks: list[torch.Tensor] = []  # the mask at each position walked this step

    @property
    def stopped(self) -> bool:
        """The grammar is complete: nothing but end-of-sequence may follow."""
        return self.matcher.is_stopped()

    def allowed(self, vocab: int) -> torch.Tensor:
        """``(vocab,)`` bool: the tokens the grammar allows after the drafts walked so far."""
        return self._mask_at(self.walked, vocab)

    def _mask_at(self, position: int, vocab: int) -> torch.Tensor:
        if position < len(self._masks):
            return self._masks[position]
        if self.broken or position != self.walked:
            # Past a forbidden draft: that draft is rejected, so what is sampled here never counts.
            return self._masks[-1]
        # The packed mask llguidance.torch.fill_next_token_bitmask would write, without importing llguidance.torch
        # (it pulls in torch.compile for a kernel the CPU path does not need: seconds on a request's first mask).
        packed = torch.frombuffer(bytearray(self.matcher.compute_bitmask()), dtype=torch.int32)
        mask = _unpack(packed, vocab)
        if not bool(mask.any()):
            # Only a matcher in error allows nothing; end the output rather than sample from all -inf (NaN).
            for t in self.eos:
                if t < vocab:
                    mask[t] = True
        self._masks.append(mask)
        return mask

    def advance(self, token: int) -> bool:
        """Walk one draft token; False (and the walk stops) where the grammar forbids it."""
        if self.broken:
            return False
        if self.matcher.try_consume_tokens([token]) != 1:
            self.broken = True
            return False
        self.walked += 1
        return True

    def masks(self, drafts: list[int], vocab: int) -> torch.Tensor:
        """``(len(drafts) + 1, vocab)`` bool: position j's mask is the state's after drafts 0..j-1 (walked here
        where a drafter did not walk them already)."""
        out = []
        for j in range(len(drafts) + 1):
            while self.walked < j and not self.broken:
                self.advance(drafts[self.walked])
            out.append(self._mask_at(j, vocab))
        return torch.stack(out)

    def settle(self, accepted: int, extra: int | None) -> None:
        """Keep ``accepted`` of the drafts walked this step, then consume the target's ``extra`` token."""
        back = self.walked - accepted
        if back > 0:
            self.matcher.rollback(back)
        if extra is not None and not self.matcher.is_stopped():
            self.matcher.consume_token(extra)
        self.walked, self.broken, self._masks = 0, False, []


def mask_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``logits`` ``(..., V)`` with -inf where ``allowed`` (bool, broadcastable) is False; in place."""
    return logits.masked_fill_(~allowed.to(logits.device), float("-inf"))
