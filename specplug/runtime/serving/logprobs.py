"""Token log-probabilities in OpenAI's two response shapes (chat's ``logprobs.content``, completions' parallel
lists), from the engine's :class:`~specplug.runtime.sampling.TokenLogprob` entries.

Tokens are shown as vLLM shows them: each id decoded on its own. A -inf logprob (a token the grammar forbids, or
one top-k alternative too many) is sent as -9999.0, as vLLM does, since JSON has no infinity.
"""

from __future__ import annotations

from typing import Any

FLOOR = -9999.0


class LogprobFormatter:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._text: dict[int, str] = {}

    def token(self, tid: int) -> str:
        text = self._text.get(tid)
        if text is None:
            text = self._text[tid] = self.tokenizer.decode([tid], skip_special_tokens=False)
        return text

    def _entry(self, tid: int, logprob: float) -> dict[str, Any]:
        text = self.token(tid)
        return {"token": text, "logprob": max(logprob, FLOOR), "bytes": list(text.encode("utf-8", "replace"))}

    def chat(self, entries: list[Any]) -> dict[str, Any]:
        """``choices[].logprobs`` of a chat completion (or of one streamed chunk)."""
        content = []
        for e in entries:
            item = self._entry(e.token, e.logprob)
            item["top_logprobs"] = [self._entry(t, lp) for t, lp in e.top]
            content.append(item)
        return {"content": content}

    def completion(self, entries: list[Any], offset: int = 0) -> dict[str, Any]:
        """``choices[].logprobs`` of a completion; ``offset`` is where the first token's text starts."""
        tokens, logprobs, tops, offsets = [], [], [], []
        for e in entries:
            text = self.token(e.token)
            tokens.append(text)
            logprobs.append(max(e.logprob, FLOOR))
            # The listed alternatives and the chosen token, as OpenAI and vLLM send (up to logprobs + 1 entries).
            top = {self.token(t): max(lp, FLOOR) for t, lp in e.top}
            top.setdefault(text, max(e.logprob, FLOOR))
            tops.append(top)
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}
