"""Generated token ids -> text for one request: stop strings, and how much of the text may be sent yet.

One path for every caller: the engine (``specplug generate``, the step API) and the server's scheduler.
Semantics are vLLM's: the text ends before the stop string, and the tokens (output and counted) end with the
one that completed it. A speculative step can accept tokens past that one; they are dropped, never sent.
While decoding, the last ``len(longest stop) - 1`` characters are held back (they may be the start of a stop
string), and so is half a multi-byte character.

Decoding is incremental, as vLLM's: each push decodes only the new tokens, with the tokens read by the push
before as context (a SentencePiece decoder drops the leading space of a text's first token, so a suffix decoded
alone could lose it). Decoding the whole output at every step would cost time that grows with its length
(``benchmarks/detokenize.py`` measures both).
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
        self.text = ""  # the output's text so far (ending before a stop string once one is found)
        self.sent = 0  # characters of ``text`` already sent
        self._done = ""  # the text of ids[:_read]; the next push decodes from _prefix on and keeps what follows it
        self._prefix = 0
        self._read = 0

    def push(self, new_ids: Sequence[int], final: bool) -> Pushed:
        """Add one step's tokens (``final``: the output ends with them); what to send, and whether it stopped."""
        before = len(self.ids)
        self.ids.extend(new_ids)
        tail = self._tail(len(self.ids))
        text = self._done + tail
        # A stop string found now ends at or after the first character not yet checked.
        start = max(0, self.sent - self.holdback)
        cut = self._find(text, start)
        if cut is not None:
            n = len(self.ids)
            # Drop the tokens past the one that completed it (the text before this push held no stop string).
            while n - 1 > before and self._find(self._done + self._tail(n - 1), start) is not None:
                n -= 1
            del self.ids[n:]
            text = text[:cut]
        elif not tail.endswith("\ufffd"):  # else half a character: decode these tokens again with the next
            self._done, self._prefix, self._read = text, self._read, len(self.ids)
        self.text = text
        end = len(text)
        if cut is None and not final:
            end -= self.holdback
            while end > self.sent and text[end - 1] == "\ufffd":  # half a UTF-8 character: wait for the rest
                end -= 1
        delta = text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return Pushed(delta, len(self.ids) - before, cut is not None)

    def _tail(self, n: int) -> str:
        """The text ids[_read:n] add, decoded after the context ids[_prefix:_read]."""
        head = self._decode(self._prefix, self._read)
        return self._decode(self._prefix, n)[len(head) :]

    def _decode(self, a: int, b: int) -> str:
        return self.tokenizer.decode(self.ids[a:b], skip_special_tokens=True) if b > a else ""

    def _find(self, text: str, start: int) -> int | None:
        hits = [i for i in (text.find(s, start) for s in self.stop) if i >= 0]
        return min(hits) if hits else None
