"""Generated token ids -> text for one request: stop strings, and how much of the text may be sent yet.

One path for every caller: the engine (``specplug generate``, the step API) and the server's scheduler.
Semantics are vLLM's: the text ends before the stop string, and the tokens (output and counted) end with the
one that completed it. A speculative step can accept tokens past that one; they are dropped, never sent.
While decoding, the last ``len(longest stop) - 1`` characters are held back (they may be the start of a stop
string), and so is half a multi-byte character.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


class Pushed(NamedTuple):
    text: str  # text to send now
    kept: int  # how many of the pushed ids count: all but those past the one that completed a stop string
    stopped: bool  # a stop string ended the output


class TextStream:
    """Feed each step's new ids to :meth:`push`; ``text`` and ``ids`` are the output so far."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.holdback = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0  # characters of ``text`` already sent

    def push(self, new_ids: Sequence[int], final: bool) -> Pushed:
        """Add one step's tokens (``final``: the output ends with them); what to send, and whether it stopped."""
        before = len(self.ids)
        self.ids.extend(new_ids)
        text = self._decode(len(self.ids))
        # A stop string found now ends at or after the first character not yet checked.
        start = max(0, self.sent - self.holdback)
        cut = self._find(text, start)
        if cut is not None:
            n = len(self.ids)
            # Drop the tokens past the one that completed it (the text before this push held no stop string).
            while n - 1 > before and self._find(self._decode(n - 1), start) is not None:
                n -= 1
            del self.ids[n:]
            text = text[:cut]
        self.text = text
        end = len(text)
        if cut is None and not final:
            end -= self.holdback
            while end > self.sent and text[end - 1] == "\ufffd":  # half a UTF-8 character: wait for the rest
                end -= 1
        delta = text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return Pushed(delta, len(self.ids) - before, cut is not None)

    def _decode(self, n: int) -> str:
        # The whole output each time keeps the text identical to decoding it at once (merges across token
        # boundaries, multi-byte characters split over tokens); it costs microseconds at these lengths.
        return self.tokenizer.decode(self.ids[:n], skip_special_tokens=True)

    def _find(self, text: str, start: int) -> int | None:
        hits = [i for i in (text.find(s, start) for s in self.stop) if i >= 0]
        return min(hits) if hits else None
