"""vLLM's request dialect where it changes how token ids become text.

``include_stop_str_in_output`` keeps the matched stop string at the end of the text;
``skip_special_tokens`` / ``spaces_between_special_tokens`` go to the tokenizer's ``decode`` as in vLLM;
with ``min_tokens`` a stop string counts only where it ends in the text of the tokens after the first
``min_tokens`` (vLLM's detokenizer skips the stop check over those).
The plain :class:`~specplug.runtime.textstream.TextStream` stays the path for requests at the defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specplug.runtime.textstream import Pushed, TextStream


class DialectTextStream(TextStream):
    def __init__(
        self,
        tokenizer: Any,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        min_tokens: int = 0,
    ) -> None:
        super().__init__(tokenizer, stop)
        self.include_stop = include_stop_str_in_output
        self.min_tokens = min_tokens
        # Characters in the text of the first min_tokens ids (None until that many are out): stops end past it.
        self.guard: int | None = 0 if min_tokens <= 0 else None
        self.decode_kwargs: dict[str, bool] = {"skip_special_tokens": skip_special_tokens}
        if not spaces_between_special_tokens:
            # Only slow tokenizers take it; fast ones join special tokens without spaces already.
            self.decode_kwargs["spaces_between_special_tokens"] = False

    def push(self, new_ids: Sequence[int], final: bool) -> Pushed:
        before = len(self.ids)
        if self.guard is None and before + len(new_ids) >= self.min_tokens:
            self.ids.extend(new_ids[: self.min_tokens - before])
            self.guard = len(self._done + self._tail(len(self.ids)))
            del self.ids[before:]
        return super().push(new_ids, final)

    def _decode(self, a: int, b: int) -> str:
        if b <= a:
            return ""
        try:
            return self.tokenizer.decode(self.ids[a:b], **self.decode_kwargs)
        except TypeError:  # a tokenizer without the spacing option
            return self.tokenizer.decode(self.ids[a:b], skip_special_tokens=self.decode_kwargs["skip_special_tokens"])

    def _find(self, text: str, start: int) -> int | None:
        if self.guard is None:
            return None
        hits = [(i, len(s)) for s in self.stop if (i := text.find(s, max(start, self.guard - len(s) + 1))) >= 0]
        if not hits:
            return None
        i, n = min(hits)
        # The cut is where the text ends: after the stop string when the client asked to keep it.
        return i + n if self.include_stop else i
