"""Ids -> text for one request (engine and server alike): stop strings end the text before them and the tokens
with the one that completed them; nothing past that is sent; what may still turn into a stop string, or is half
a character, is held back until it is decided."""

from __future__ import annotations

from specplug.runtime.textstream import TextStream


class Chars:
    """One token per character (ids = code points)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(map(chr, ids))


class Bytes:
    """One token per UTF-8 byte, as byte-level BPE splits a character it has no token for."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_tokens_end_with_the_one_that_completed_the_stop_string_and_later_ones_are_dropped():
    s = TextStream(Chars(), ["XY"])
    assert s.push(ids("ab"), final=False) == ("a", 2, False)  # len("XY") - 1 characters are held back
    out = s.push(ids("cXYdef"), final=False)  # a speculative step that accepted past the stop string
    assert out == ("bc", 3, True)
    assert s.text == "abc" and s.ids == ids("abcXY")


def test_a_stop_string_split_over_steps_is_never_sent_in_part():
    s = TextStream(Chars(), ["Kenobi", "xyz"])
    sent, kept = "", 0
    for chunk in ["Hello Ke", "n", "ob", "i! more"]:
        out = s.push(ids(chunk), final=False)
        sent += out.text
        kept += out.kept
        assert "Ke" not in sent
        if out.stopped:
            break
    assert out.stopped and sent == s.text == "Hello "
    assert kept == len("Hello Kenobi")


def test_without_a_stop_everything_is_sent_and_kept():
    s = TextStream(Chars())
    assert s.push(ids("abc"), final=False) == ("abc", 3, False)
    assert s.push(ids("d"), final=True) == ("d", 1, False)


def test_the_held_back_end_is_sent_when_the_output_ends_without_a_stop():
    s = TextStream(Chars(), ["never"])
    assert s.push(ids("one two"), final=False).text == "one"  # len("never") - 1 characters held back
    assert s.push(ids("x"), final=True).text == " twox"
    assert s.text == "one twox"


def test_half_a_character_waits_for_the_rest():
    s = TextStream(Bytes())
    e = list("é".encode())
    assert s.push([ord("a"), e[0]], final=False) == ("a", 2, False)
    assert s.push([e[1]], final=False) == ("é", 1, False)


class Metaspace:
    """SentencePiece's decoding: pieces joined, "▁" read as a space, and the text's first space dropped."""

    pieces = ["▁Hello", "▁world", ",", "▁how", "▁are", "▁you", "?"]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text = "".join(self.pieces[i] for i in ids).replace("▁", " ")
        return text[1:] if text.startswith(" ") else text


def streamed(tokenizer, ids: list[int], sizes: list[int]) -> tuple[str, str]:
    s, sent, i = TextStream(tokenizer), "", 0
    for j, n in enumerate(sizes):
        sent += s.push(ids[i : i + n], final=j == len(sizes) - 1).text
        i += n
    return sent, s.text


def test_a_token_decoded_after_others_keeps_its_leading_space():
    # Each token decoded alone would lose the space before it; the stream decodes it after the ones before.
    ids = list(range(7))
    assert streamed(Metaspace(), ids, [1] * 7) == ("Hello world, how are you?",) * 2
    assert streamed(Metaspace(), ids, [2, 1, 4]) == ("Hello world, how are you?",) * 2


def test_streamed_text_is_the_whole_output_decoded_at_once(smollm2_folder):
    import random

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_folder))
    text = "Grüße aus Köln 🚀🚀 — 東京は晴れ. def f(x):\n    return x ** 2  # ½ ≠ ⅓\n" * 3
    ids = tok(text, add_special_tokens=False).input_ids
    rng = random.Random(0)
    for _ in range(5):
        sizes, left = [], len(ids)
        while left:
            sizes.append(min(left, rng.randint(1, 5)))
            left -= sizes[-1]
        assert streamed(tok, ids, sizes) == (text, text)
