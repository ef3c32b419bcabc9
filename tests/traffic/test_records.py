"""Reading traffic logs: every documented format, malformed lines, and files with nothing usable."""

from __future__ import annotations

import hashlib
import json

import pytest

from specplug.catalog import Model
from specplug.errors import SpecplugError
from specplug.traffic import load_traffic
from specplug.traffic.records import ReadStats, extract, parse_field_map, read_records
from tests.traffic import logs

NO_TOKENIZER = Model(hf_id="test/no-tokenizer-here")


def _one(obj, fmap=None):
    rec = extract(obj, parse_field_map(fmap))
    return rec.prompt, rec.completion


@pytest.mark.parametrize(
    ("obj", "fmap", "expected"),
    [
        ({"prompt": "P", "completion": "C"}, None, ("P", "C")),
        ({"prompt": "P", "response": "C"}, None, ("P", "C")),
        ({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "completion": "C"}, None, ("S\n\nU", "C")),
        ({"messages": [{"role": "user", "content": "U"}], "response": "C"}, None, ("U", "C")),
        ({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "C"}]}, None, ("U", "C")),
        ({"request": {"prompt": "P", "max_tokens": 8}, "response": {"choices": [{"text": "C"}]}}, None, ("P", "C")),
        ({"request": {"messages": [{"role": "user", "content": [{"type": "text", "text": "U"}]}]},
          "response": {"choices": [{"message": {"role": "assistant", "content": "C"}}]}}, None, ("U", "C")),
        # OpenAI batch files wrap both in "body".
        ({"request": {"body": {"messages": [{"role": "user", "content": "U"}]}},
          "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "C"}}]}}}, None, ("U", "C")),
        ({"input": {"text": "P"}, "output": "C"}, "prompt=input.text,completion=output", ("P", "C")),
        ({"in": {"msgs": [{"role": "user", "content": "U"}]}, "out": {"choices": [{"text": "C"}]}},
         "messages=in.msgs,completion=out.choices.0.text", ("U", "C")),
    ],
)
def test_each_format_parses(obj, fmap, expected) -> None:
    assert _one(obj, fmap) == expected


@pytest.mark.parametrize("shape", ["plain", "chat-pair", "completions-pair", "messages"])
def test_whole_files_in_each_shape_read_alike(tmp_path, shape) -> None:
    recs = logs.build("chat", 5)
    prof = load_traffic(logs.write(tmp_path / f"{shape}.jsonl", recs, shape), NO_TOKENIZER)
    assert prof.requests == 5 and prof.malformed == 0
    base = load_traffic(logs.write(tmp_path / "base.jsonl", recs), NO_TOKENIZER)
    assert prof.output_len == base.output_len


def test_field_map_reads_other_shapes(tmp_path) -> None:
    path = logs.write(tmp_path / "custom.jsonl", logs.build("chat", 3), "custom")
    with pytest.raises(SpecplugError) as exc:
        load_traffic(path, NO_TOKENIZER)
    assert "--traffic-map" in str(exc.value)
    prof = load_traffic(path, NO_TOKENIZER, field_map="prompt=input.text,completion=output.body")
    assert prof.requests == 3


def test_malformed_lines_are_counted_with_line_numbers(tmp_path) -> None:
    good = json.dumps({"prompt": "a b c", "completion": "d e f"})
    lines = [good, "{not json", good, json.dumps({"prompt": "x"}), "", json.dumps([1, 2]), good,
             json.dumps({"prompt": "x", "completion": ""})]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prof = load_traffic(path, NO_TOKENIZER)
    assert prof.requests == 3
    assert prof.malformed == 4
    assert prof.malformed_lines == [2, 4, 6, 8]
    assert prof.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_malformed_lines_listed_are_capped_at_twenty(tmp_path) -> None:
    path = tmp_path / "noisy.jsonl"
    path.write_text("\n".join(["oops"] * 30 + [json.dumps({"prompt": "p", "completion": "c c"})]) + "\n", encoding="utf-8")
    prof = load_traffic(path, NO_TOKENIZER)
    assert prof.malformed == 30 and prof.malformed_lines == list(range(1, 21))


def test_nothing_usable_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"foo": 1}\nnot json\n{"prompt": "only a prompt"}\n', encoding="utf-8")
    with pytest.raises(SpecplugError) as exc:
        load_traffic(path, NO_TOKENIZER)
    msg = str(exc.value)
    assert "no usable request in 3 lines" in msg
    assert "not valid JSON" in msg and "lines 1, 2, 3" in msg
    assert '"request"' in msg and '"prompt"' in msg  # says which formats work


def test_empty_and_missing_files(tmp_path) -> None:
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(SpecplugError, match="empty"):
        load_traffic(tmp_path / "empty.jsonl", NO_TOKENIZER)
    with pytest.raises(SpecplugError, match="does not exist"):
        load_traffic(tmp_path / "nope.jsonl", NO_TOKENIZER)


@pytest.mark.parametrize("bad", ["prompt", "prompt=a", "completion=b", "prompt=a,completion=b,extra=c", "prompt=,completion=b"])
def test_bad_field_maps_are_refused(bad) -> None:
    with pytest.raises(SpecplugError):
        parse_field_map(bad)


def test_reading_streams_line_by_line(tmp_path) -> None:
    # read_records takes any iterable of lines: nothing needs the whole file in memory.
    lines = (json.dumps({"prompt": str(i), "completion": "c"}).encode() + b"\n" for i in range(1000))
    stats = ReadStats()
    first = next(iter(read_records(lines, stats)))
    assert first.prompt == "0" and stats.lines == 1


def test_a_field_map_can_name_where_the_arrival_time_is() -> None:
    from specplug.traffic.records import arrival, parse_field_map

    fmap = parse_field_map("prompt=in,completion=out,time=meta.ts")
    from datetime import UTC, datetime

    ten = datetime(2026, 12, 5, 10, tzinfo=UTC).timestamp()
    assert arrival({"in": "a", "out": "b", "meta": {"ts": "2026-12-05T10:00:00+00:00"}}, fmap) == ten
    assert arrival({"in": "a", "out": "b"}, fmap) is None  # a line without it is untimed, not malformed
    assert arrival({"prompt": "a", "completion": "b", "created": True}) is None  # a flag, not a time
