"""specplug.output.table at the width it is printed at: the whole table when it fits; narrowed columns with no
cell over two lines; optional columns left out (and named); else one borderless line per row."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rich.cells import cell_len
from rich.console import Console

from specplug.output import MAX_CELL_LINES, FitTable, table


def _render(t: FitTable, width: int = 80) -> tuple[list[str], object]:
    con = Console(width=width, record=True, highlight=False, soft_wrap=False, color_system=None)
    with con.capture() as cap:
        con.print(t)
    return cap.get().splitlines(), t.layout(con, width)


def _body(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("│")]


def test_a_table_that_fits_prints_whole_one_line_per_row():
    lines, lay = _render(table("t", ["a", "b"], [("1", "x"), ("2", "y")]))
    assert lay.kind == "table" and lay.max_lines == 1 and len(_body(lines)) == 2
    assert lines[0] == "t"  # the title above, not wrapped to the table's width


def test_narrowed_columns_keep_every_cell_within_two_lines_as_rendered():
    words = "alpha beta gamma delta epsilon zeta eta theta iota"  # 50 characters: two lines at 80 columns
    rows = [(f"row{i}", words, words, str(i)) for i in range(3)]
    lines, lay = _render(table(None, ["name", "first text", "second text", "n"], rows))
    assert lay.kind == "table" and lay.max_lines == MAX_CELL_LINES
    assert len(_body(lines)) == 3 * lay.max_lines  # the predicted height is what rich draws
    assert all(cell_len(ln) <= 80 for ln in lines)


def test_short_words_are_never_split_long_ids_are():
    rows = [("ibm-ai-platform/llama3-70b-accelerator-with-a-long-name", "drafters", "x " * 15)]
    lines, lay = _render(table(None, ["id", "kind", "notes"], rows), width=70)
    assert lay.kind == "table" and lay.max_lines == 2  # the id folds over two lines
    assert any("drafters" in ln for ln in lines)  # 8 letters: kept whole


def test_optional_columns_are_left_out_in_order_and_named():
    rows = [(f"model-{i}", "x" * 60, "y" * 60, "z" * 60, str(i)) for i in range(5)]
    t = table("m", ["alias", "hf id", "tokenizer", "notes", "n"], rows, optional=["tokenizer", "notes"])
    lines, lay = _render(t, width=60)
    assert lay.kind == "table" and [t.columns[i] for i in lay.columns] == ["alias", "hf id", "n"]
    assert any("Not shown at 60 columns: tokenizer, notes" in ln for ln in lines)


def test_too_wide_for_any_table_prints_one_line_per_row_with_named_values():
    verdict = "ruled out: " + "a long explanation of why " * 8
    rows = [("ngram", "", "8", "1.49x", "eligible"), ("eagle", "some/drafter", "4", "1.98x", verdict)]
    lines, lay = _render(table("candidates", ["method", "drafter", "k", "speedup", "verdict"], rows))
    assert lay.kind == "records" and lay.widths[1] >= 40
    assert lines[1].split() == ["ngram", "k:", "8", "·", "speedup:", "1.49x", "·", "verdict:", "eligible"]
    assert any(ln.startswith(" eagle ") and "drafter: some/drafter" in ln for ln in lines)
    assert not _body(lines) and all(cell_len(ln) <= 80 for ln in lines)


def test_a_key_value_table_with_prose_values_prints_borderless():
    rows = [("name", "H100"), ("source", "a source " * 30)]
    lines, lay = _render(table("H100", ["field", "value"], rows))
    assert lay.kind == "pairs" and lines[1].split() == ["name", "H100"]


def test_blank_headers_print_no_header_row_and_the_legend_follows():
    lines, _ = _render(table(None, ["", ""], [("speedup", "2.00x")], legend=["x: an abbreviation"]))
    assert lines[0].startswith("┌") and "speedup" in lines[1] and lines[-1] == "x: an abbreviation"


def test_output_is_presentation_only_and_the_option_lives_with_the_commands():
    # Importing the printing module pulls in neither click (options are commands/' business) nor rich (loaded when
    # a table prints, so JSON output does not pay for it).
    code = "import sys, specplug.output; print('click' in sys.modules, 'rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    import specplug.output

    assert not hasattr(specplug.output, "output_option")


def test_a_closed_pipe_ends_output_with_exit_0(monkeypatch):
    import specplug.output as output

    class Closed:
        def write(self, text):
            raise BrokenPipeError

        def flush(self):
            pass

    monkeypatch.setattr(output.sys, "stdout", Closed())
    monkeypatch.setattr(output, "silence_stdout", lambda: None)
    with pytest.raises(SystemExit) as exc:
        output.emit({"a": 1}, "json")
    assert exc.value.code == 0
