"""Printing data the three ways every command offers: a rich table, JSON or YAML.

The one presentation module outside ``specplug/commands``: rich is imported here (lazily), the serializers it
prints with are :mod:`specplug.serialize`, and the ``--output`` option that picks a form lives with the other
options, in :mod:`specplug.commands._output`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from specplug import serialize

# What '--output' may name, everywhere; '-o' is kept for the folder/file a command writes (render, bench).
FORMATS = ("table", "json", "yaml")


OUTPUT_HELP = "How to print the result."


def silence_stdout() -> None:
    """Point stdout at /dev/null, so output still buffered does not fail again in the interpreter's exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def reader_gone() -> NoReturn:
    """Whoever read our output closed the pipe early (``specplug recommend | head -1``): nothing failed, so end
    with exit 0 (click and rich would exit 1, which fails the pipeline under ``set -o pipefail``)."""
    silence_stdout()
    raise SystemExit(0)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


def console(stderr: bool = False):
    """A rich console; imported lazily so that plain JSON output does not pay for rich."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own exits 1
            reader_gone()

    return _Console(stderr=stderr, highlight=False, soft_wrap=False)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    optional: Sequence[str] = (),
    legend: Sequence[str] = (),
) -> FitTable:
    """A table that stays readable at the width it is printed at (see :class:`FitTable`).

    ``optional`` names columns that may be left out when the terminal is too narrow for all of them (the note
    under the table says which); ``legend`` lines are printed under it (abbreviations used in headers or cells).
    """
    return FitTable(title, columns, rows, optional=optional, legend=legend)


# A boxed cell may take this many lines before the table changes layout: narrow columns that fold a word over six
# lines are what made 80-column output unreadable.
MAX_CELL_LINES = 2
# Words at most this long are never split across lines ('drafters', '128256'); longer ones (model ids, paths) are.
FOLD_FLOOR = 12


@dataclass(frozen=True)
class Layout:
    """How a :class:`FitTable` prints at one width.

    ``kind``: "table" (boxed, ``widths`` per shown column), "pairs" (a two-column key/value table printed
    borderless, ``widths`` = key and value width) or "records" (one line per row: its first value, then the
    others as 'header: value', same ``widths``).
    ``max_lines``: the most lines any boxed cell takes (0 outside "table", where values wrap as prose).
    """

    kind: str
    columns: tuple[int, ...]
    widths: tuple[int, ...]
    max_lines: int = 0


@dataclass
class _Column:
    index: int
    cells: list[Any]  # rich Text, header first
    natural: int  # widest line: the width at which nothing wraps
    word_min: int = 0  # narrowest width keeping every cell within its line limit without splitting a word
    fold_min: int = 0  # the same, folding words longer than FOLD_FLOOR (ids, paths) into pieces that long


class FitTable:
    """A rich renderable that picks its layout from the width it gets when printed.

    In order: the whole table at its natural width; a boxed table whose columns are narrowed so that no cell
    takes more than MAX_CELL_LINES lines (splitting only words longer than FOLD_FLOOR, and only as far as
    needed), leaving out ``optional`` columns one by one if it still does not fit; else one borderless line per
    row, whose values wrap as prose.
    """

    def __init__(self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                 optional: Sequence[str] = (), legend: Sequence[str] = ()) -> None:
        self.title = title
        self.columns = [str(c) for c in columns]
        self.rows = [["" if v is None else str(v) for v in row] for row in rows]
        self.optional = [self.columns.index(c) for c in optional if c in self.columns]
        self.legend = list(legend)

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        width = options.max_width
        cols = self._measure(console, options)
        lay = self.layout(console, width, cols)
        if self.title:  # above the table, not rich's title, which wraps to the table's width however narrow
            yield Text(self.title, style="table.title")
        yield self._boxed(cols, lay) if lay.kind == "table" else self._listed(cols, lay)
        yield from self._notes(lay, width)

    # -- choosing ------------------------------------------------------------------------------------
    def layout(self, console: Any, width: int, cols: list[_Column] | None = None) -> Layout:
        cols = cols if cols is not None else self._measure(console, console.options)
        every = tuple(c.index for c in cols)
        if _boxed_width([c.natural for c in cols]) <= width:
            return Layout("table", every, tuple(c.natural for c in cols), self._lines(console, cols, every, None))
        for shown in self._column_sets(every):
            widths = _fit([cols[i] for i in shown], width)
            if widths is not None:
                return Layout("table", shown, widths, self._lines(console, cols, shown, widths))
        key = min(max((k.cell_len for k in cols[0].cells[1:]), default=1), max(8, width // 3))
        return Layout("pairs" if len(cols) == 2 else "records", every, (key, max(1, width - key - 3)))

    def _column_sets(self, every: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        """All columns, then with the optional ones left out one more at a time."""
        yield every
        dropped: set[int] = set()
        for i in self.optional:
            dropped.add(i)
            yield tuple(c for c in every if c not in dropped)

    def _measure(self, console: Any, options: Any) -> list[_Column]:
        from rich.measure import Measurement
        from rich.text import Text

        out = []
        for i, header in enumerate(self.columns):
            cells = [Text(header)] + [console.render_str(r[i]) if i < len(r) else Text("") for r in self.rows]
            sizes = [Measurement.get(console, options, c) for c in cells]
            col = _Column(i, cells, max(1, max(m.maximum for m in sizes)))
            col.word_min = _narrowest(console, cells, max(m.minimum for m in sizes), col.natural)
            col.fold_min = _narrowest(console, cells, min(col.word_min, FOLD_FLOOR), col.natural)
            out.append(col)
        return out

    @staticmethod
    def _lines(console: Any, cols: list[_Column], shown: tuple[int, ...], widths: tuple[int, ...] | None) -> int:
        ws = widths or tuple(cols[i].natural for i in shown)
        return max((_height(console, cell, w) for i, w in zip(shown, ws, strict=True) for cell in cols[i].cells),
                    default=1)

    # -- drawing -------------------------------------------------------------------------------------
    def _boxed(self, cols: list[_Column], lay: Layout) -> Any:
        from rich.table import Table

        # A key/value table with blank headers gets no empty header row.
        t = Table(show_lines=False, show_header=any(self.columns[i] for i in lay.columns))
        for i, w in zip(lay.columns, lay.widths, strict=True):
            t.add_column(cols[i].cells[0], width=w, overflow="fold")
        for r in range(len(self.rows)):
            t.add_row(*(cols[i].cells[r + 1] for i in lay.columns))
        return t

    def _listed(self, cols: list[_Column], lay: Layout) -> Any:
        """One line per row, aligned: its first value, then the rest as 'header: value' (or the value alone for a
        key/value table), wrapping as prose."""
        from rich.padding import Padding
        from rich.table import Table

        key_w, value_w = lay.widths
        grid = Table.grid(padding=(0, 2), pad_edge=False)
        grid.add_column(width=key_w, overflow="fold")
        grid.add_column(max_width=value_w, overflow="fold")  # no padding out to the full width
        for r in range(len(self.rows)):
            grid.add_row(cols[0].cells[r + 1], self._rest(cols, lay, r))
        return Padding(grid, (0, 0, 0, 1), expand=False)

    @staticmethod
    def _rest(cols: list[_Column], lay: Layout, r: int) -> Any:
        from rich.text import Text

        if lay.kind == "pairs":
            return cols[1].cells[r + 1]
        # Each value named by its column header; empty values are left out.
        parts = [Text.assemble(f"{c.cells[0].plain}: " if c.cells[0].plain else "", c.cells[r + 1])
                 for c in cols[1:] if c.cells[r + 1].plain]
        return Text(" · ").join(parts)

    def _notes(self, lay: Layout, width: int) -> Iterator[Any]:
        from rich.text import Text

        hidden = [self.columns[i] for i in range(len(self.columns)) if i not in lay.columns]
        if hidden:
            yield Text(f"Not shown at {width} columns: {', '.join(hidden)} (a wider terminal or --output yaml "
                       "shows them).", style="dim")
        for line in self.legend:
            yield Text(line, style="dim")


def _boxed_width(widths: Sequence[int]) -> int:
    # rich's default box: a border left of every column and one at the end, one space of padding on each side.
    return sum(widths) + 3 * len(widths) + 1


def _height(console: Any, cell: Any, width: int) -> int:
    return len(cell.wrap(console, width, overflow="fold"))


def _limit(cell: Any) -> int:
    # A cell that holds several lines of its own keeps them; only wrapping beyond those counts.
    return max(MAX_CELL_LINES, cell.plain.count("\n") + 1)


def _narrowest(console: Any, cells: list[Any], low: int, high: int) -> int:
    """The smallest width in [low, high] at which every cell keeps within its line limit (bisection: a greedy
    wrap never takes more lines at a greater width)."""
    low = min(max(1, low), high)
    while low < high:
        mid = (low + high) // 2
        if all(_height(console, c, mid) <= _limit(c) for c in cells):
            high = mid
        else:
            low = mid + 1
    return low


def _fit(cols: list[_Column], width: int) -> tuple[int, ...] | None:
    """Column widths within ``width``, or None if the columns cannot fit.

    Each column starts at its ``word_min``; if that is too wide, the columns that gain most by folding long words
    give up width first, down to their ``fold_min``. Space left over goes first to the columns that need the
    least of it to stop wrapping.
    """
    widths = [c.word_min for c in cols]
    excess = _boxed_width(widths) - width
    for n in sorted(range(len(cols)), key=lambda n: cols[n].fold_min - widths[n]):
        cut = min(max(excess, 0), widths[n] - cols[n].fold_min)
        widths[n] -= cut
        excess -= cut
    if excess > 0:
        return None
    spare = -excess
    for n in sorted(range(len(cols)), key=lambda n: cols[n].natural - widths[n]):
        extra = min(spare, cols[n].natural - widths[n])
        widths[n] += extra
        spare -= extra
    return tuple(widths)


def emit(data: Any, fmt: str, render_table: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as JSON/YAML, or call ``render_table(data)`` for the rich form.

    ``render_table`` returns a rich renderable (or a list of them); without one, tables fall back to YAML.
    """
    if fmt == "json":
        _write(serialize.dump_json(data))
    elif fmt == "yaml" or render_table is None:
        _write(serialize.dump_yaml(data))
    else:
        out = render_table(data)
        con = console()
        for item in out if isinstance(out, list) else [out]:
            con.print(item)
