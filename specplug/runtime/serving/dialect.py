"""vLLM's request dialect where it changes how token ids become text.

``include_stop_str_in_output`` keeps the matched stop string at the end of the text;
``skip_special_tokens`` / ``spaces_between_special_tokens`` go to the tokenizer's ``decode`` as in vLLM.
The plain :class:`~specplug.runtime.textstream.TextStream` stays the path for requests at the defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specplug.runtime.textstream import TextStream


class DialectTextStream(TextStream):
    def __init__(
        self,
        tokenizer: Any,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        super().__init__(tokenizer, stop)
        self.include_stop = include_stop_str_in_output
        self.decode_kwargs: dict[str, bool] = {"skip_special_tokens": skip_special_tokens}
        if not spaces_between_special_tokens:
            # Only slow tokenizers take it; fast ones join special tokens without spaces already.
            self.decode_kwargs["spaces_between_special_tokens"] = False

    def _decode(self, a: int, b: int) -> str:
        if b <= a:
            return ""
        try:
            return self.tokenizer.decode(self.ids[a:b], **self.decode_kwargs)
        except TypeError:  # a tokenizer without the spacing option
            return self.tokenizer.decode(self.ids[a:b], skip_special_tokens=self.decode_kwargs["skip_special_tokens"])

    def _find(self, text: str, start: int) -> int | None:
        hits = [(i, len(s)) for s in self.stop if (i := text.find(s, start)) >= 0]
        if not hits:
            return None
        i, n = min(hits)
        # The cut is where the text ends: after the stop string when the client asked to keep it.
        return i + n if self.include_stop else i
