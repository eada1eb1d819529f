"""A labelled grid that keeps to the width it is given, and to a number of rows: both ends, with a gap between.

Rich shrinks the columns of a table too wide for the terminal until every cell reads ``…`` (24
tokens in 100 characters did), and formats every cell before it finds out. ``FittedGrid`` renders
itself through the console protocol instead: told its width, it makes columns from both ends
inward while they fit, marks the gap with a ``…`` column and says below the grid how many columns
it left out and how to see them. Past ``max_rows`` rows it shows the first and last rows around a
``⋮`` row. Only the cells it shows (and one more column) are ever formatted: a 512-token table
costs what a 40-token one does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from attnx.render.layout import compact_table

GAP = "…"
ROW_GAP = "⋮"


def shown_rows(count: int, max_rows: int | None) -> list[int]:
    """Which of ``count`` rows to show: all of them, or the first and last halves of ``max_rows`` (the first
    half takes the odd row)."""
    if max_rows is None or count <= max_rows:
        return list(range(count))
    first = max_rows - max_rows // 2
    return [*range(first), *range(count - max_rows // 2, count)]


def row_lookup(matrix_rows: Sequence[int] | None) -> Callable[[int], int]:
    """Where row ``i`` of a grid is in a matrix that holds only ``matrix_rows`` of it (None: every row, in place)."""
    if matrix_rows is None:
        return int
    return {row: k for k, row in enumerate(matrix_rows)}.__getitem__


def after_gap(rows: Sequence[int], k: int) -> bool:
    """True when rows were left out between the shown rows ``rows[k - 1]`` and ``rows[k]``."""
    return k > 0 and rows[k] != rows[k - 1] + 1


HOW_TO_SEE = {
    (True, False): "use --rows all or --format csv",
    (False, True): "widen the terminal or use --format csv",
    (True, True): "use --rows all, widen the terminal, or use --format csv",
}


def left_out(rows: tuple[int, int], columns: tuple[int, int] = (0, 0)) -> Text | None:
    """The note under a table that left out ``(hidden, total)`` rows and columns, and how to see them; None
    when nothing was left out."""
    (rows_hidden, rows_total), (cols_hidden, cols_total) = rows, columns
    parts = [f"{rows_hidden} of {rows_total} rows left out ({ROW_GAP})"] if rows_hidden else []
    parts += [f"{cols_hidden} of {cols_total} columns left out ({GAP}) to fit the width"] if cols_hidden else []
    if not parts:
        return None
    return Text(f"{'; '.join(parts)}; {HOW_TO_SEE[bool(rows_hidden), bool(cols_hidden)]} to see them", style="dim")


class FittedGrid:
    """Rows of labelled cells under column labels, as many columns as fit, the rest elided in the middle.

    ``column(j, rows)`` gives column ``j``'s cells in ``rows`` (row indices), one ``Text`` each, and
    is called at most once per column. ``max_rows`` (None: every row) is how many rows are shown at
    most: the first and last; ``rows`` names them instead, when the caller has chosen them.
    ``footer`` is an extra row under a rule (a label and one cell per column). ``padding`` is the
    blank on each side of a cell (the heatmap's cells carry their own). ``table`` are more
    ``rich.table.Table`` options.
    """

    def __init__(
        self,
        title: str,
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        column: Callable[[int, Sequence[int]], Sequence[Text]],
        *,
        max_rows: int | None = None,
        rows: Sequence[int] | None = None,
        footer: tuple[str, Sequence[Text]] | None = None,
        padding: int = 1,
        header: Callable[[str], Text] = Text,
        justify: str = "right",
        **table: Any,
    ) -> None:
        self.title, self.row_labels, self.col_labels = title, row_labels, col_labels
        self.footer, self.padding, self.header, self.justify, self.options = footer, padding, header, justify, table
        self._column = column
        self._cells: dict[int, Sequence[Text]] = {}
        self.rows = list(rows) if rows is not None else shown_rows(len(row_labels), max_rows)
        labels = [row_labels[i] for i in self.rows] + ([footer[0]] if footer is not None else [])
        self.label_width = max((Text(label).cell_len for label in labels), default=0)

    @property
    def separator(self) -> int:
        """Characters between two columns: the padding of each, and the box's blank divider."""
        return 2 * self.padding + 1

    def cells(self, j: int) -> Sequence[Text]:
        """Column ``j``'s cells in the rows shown (the footer's last), made once."""
        if j not in self._cells:
            cells = list(self._column(j, self.rows))
            self._cells[j] = [*cells, self.footer[1][j]] if self.footer is not None else cells
        return self._cells[j]

    def width(self, j: int) -> int:
        """Characters column ``j`` takes, without separators."""
        return max(self.header(self.col_labels[j]).cell_len, *(cell.cell_len for cell in self.cells(j)))

    def shown(self, room: int) -> tuple[list[int], list[int]]:
        """The columns to show in ``room`` characters: all of them as ``(all, [])``; else ``(left, right)``.

        Columns are taken from both ends in turn, the left first, until the next one would not fit
        beside the ``…`` column.
        """
        count, used = len(self.col_labels), self.label_width
        for j in range(count):
            used += self.separator + self.width(j)
            if used > room:
                break
        else:
            return list(range(count)), []
        left: list[int] = []
        right: list[int] = []
        used = self.label_width + self.separator + len(GAP)
        while len(left) + len(right) < count:
            side, j = (left, len(left)) if len(left) <= len(right) else (right, count - 1 - len(right))
            used += self.separator + self.width(j)
            if used > room:
                break
            side.append(j)
        return left, right[::-1]

    def table(self, left: Sequence[int], right: Sequence[int]) -> Table:
        """The grid with columns ``left``, then (when columns are left out) ``…``, then ``right``."""
        hidden = len(self.col_labels) - len(left) - len(right)
        table = compact_table(self.title, collapse_padding=False, min_width=len(self.title),
                              padding=(0, self.padding), **self.options)  # fmt: skip
        table.add_column("", style="bold cyan", no_wrap=True)
        columns = [*left, None, *right] if hidden else [*left]
        for j in columns:
            label = self.header(GAP if j is None else self.col_labels[j])
            table.add_column(label, justify=self.justify, no_wrap=True, header_style="bold cyan")  # type: ignore[arg-type]
        gap, row_gap = Text(GAP, style="dim"), Text(ROW_GAP, style="dim")
        shown = len(self.rows)
        for k in range(shown + (self.footer is not None)):
            if k == shown:
                table.add_section()
            elif after_gap(self.rows, k):
                table.add_row(row_gap, *(row_gap for _ in columns))
            label = self.row_labels[self.rows[k]] if k < shown else self.footer[0]  # type: ignore[index]
            table.add_row(Text(label), *(gap if j is None else self.cells(j)[k] for j in columns))
        return table

    def note(self, shown: int) -> Text | None:
        """What a grid showing ``shown`` columns says about the rows and columns it left out, and how to see them."""
        rows, cols = len(self.row_labels), len(self.col_labels)
        return left_out((rows - len(self.rows), rows), (cols - shown, cols))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        left, right = self.shown(options.max_width)
        yield self.table(left, right)
        note = self.note(len(left) + len(right))
        if note is not None:
            yield note

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        left, right = self.shown(options.max_width)
        used = self.label_width + sum(self.separator + self.width(j) for j in (*left, *right))
        if len(left) + len(right) < len(self.col_labels):
            used += self.separator + len(GAP)
        narrowest = self.label_width + self.separator + len(GAP)
        return Measurement(min(narrowest, used), max(used, len(self.title)))
