"""A labelled grid that keeps to the width it is given: the first and last columns, with ``…`` between them.

Rich shrinks the columns of a table too wide for the terminal until every cell reads ``…`` (24
tokens in 100 characters did), and formats every cell before it finds out. ``FittedGrid`` renders
itself through the console protocol instead: told its width, it makes columns from both ends
inward while they fit, marks the gap with a ``…`` column and says below the grid how many columns
it left out and how to see them. Only the columns it shows (and one more) are ever formatted.
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


class FittedGrid:
    """Rows of labelled cells under column labels, as many columns as fit, the rest elided in the middle.

    ``column(j)`` gives column ``j``'s cells, one per row (``Text``), and is called at most once per
    column. ``footer`` is an extra row under a rule (a label and one cell per column). ``padding``
    is the blank on each side of a cell (the heatmap's cells carry their own). ``table`` are more
    ``rich.table.Table`` options.
    """

    def __init__(
        self,
        title: str,
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        column: Callable[[int], Sequence[Text]],
        *,
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
        labels = [*row_labels, footer[0]] if footer is not None else row_labels
        self.label_width = max((Text(label).cell_len for label in labels), default=0)

    @property
    def separator(self) -> int:
        """Characters between two columns: the padding of each, and the box's blank divider."""
        return 2 * self.padding + 1

    def cells(self, j: int) -> Sequence[Text]:
        """Column ``j``'s cells (the footer's last), made once."""
        if j not in self._cells:
            cells = list(self._column(j))
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
        gap = Text(GAP, style="dim")
        rows = len(self.row_labels)
        for i in range(rows + (self.footer is not None)):
            if i == rows:
                table.add_section()
            label = self.row_labels[i] if i < rows else self.footer[0]  # type: ignore[index]
            table.add_row(Text(label), *(gap if j is None else self.cells(j)[i] for j in columns))
        return table

    def note(self, shown: int) -> Text | None:
        """What a grid showing ``shown`` columns says about the others: how many, and how to see them."""
        hidden = len(self.col_labels) - shown
        if not hidden:
            return None
        return Text(f"{hidden} of {len(self.col_labels)} columns left out ({GAP}) to fit the width; "
                    "widen the terminal or use --format csv to see them", style="dim")  # fmt: skip

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
