"""A labelled grid that keeps to the width it is given, and to a number of rows: both ends, with a gap between.

Rich shrinks the columns of a table too wide for the terminal until every cell reads ``…`` (24
tokens in 100 characters did), and formats every cell before it finds out. ``FittedGrid`` renders
itself through the console protocol instead: told its width, it makes columns from both ends
inward while they fit, marks the gap with a ``…`` column and says below the grid how many columns
it left out and how to see them. Past ``max_rows`` rows it shows the first and last rows around a
``⋮`` row. Only the cells it shows (and one more column) are ever formatted: a 512-token table
costs what a 40-token one does.

It draws its lines itself, in the look of attnx's Rich tables (``layout.compact_table``): a title,
a header, a rule, rows, a blank line before a footer. Every column's width is known before a line
is drawn, so nothing is measured and no cell is wrapped. Measured with ``benchmarks/grid.py`` (AMD
EPYC, 2 cores, Rich 15): a 40 × 8 grid takes 2.7 ms this way and 18.6 ms as a Rich ``Table`` of the
same cells (5 × 5: 0.4 against 2.1 ms). `attnx run` on 40 tokens with 8 heads draws 26 such grids:
about 0.07 s against 0.48 s, more than the whole start-up, which a user would notice.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from math import ceil
from typing import overload

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from attnx.core.rows import Rows, after_gap
from attnx.render.colours import LABEL
from attnx.text import LABEL_LIMIT, label, labels

GAP = "…"
ROW_GAP = "⋮"
RULE = "─"  # under the header, as rich.box.SIMPLE_HEAD draws it
LABEL_STYLE = LABEL  # row labels and column labels


class Labels(Sequence[str]):
    """Row or column labels as a grid shows them: each cut to ``limit`` cells (``attnx.text.label``) when it is
    read, so that a grid of 8192 rows reads only the rows it shows. Tokens take the default; a grid's own names
    (a sweep's ``scale=sqrt_dk → scale=none``) are passed as ``Labels(names, NAME_LIMIT)``."""

    def __init__(self, texts: Sequence[str], limit: int = LABEL_LIMIT) -> None:
        self.texts, self.limit = texts, limit

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return labels(self.texts[index], self.limit)
        return label(self.texts[index], self.limit)


def as_labels(texts: Sequence[str]) -> Labels:
    """``texts`` as a grid's labels: tokens, cut to ``LABEL_LIMIT`` cells, unless they are ``Labels`` already."""
    return texts if isinstance(texts, Labels) else Labels(texts)


def row_lookup(matrix_rows: Sequence[int] | None) -> Callable[[int], int]:
    """Where row ``i`` of a grid is in a matrix that holds only ``matrix_rows`` of it (None: every row, in place)."""
    if matrix_rows is None:
        return int
    return {row: k for k, row in enumerate(matrix_rows)}.__getitem__


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
    ``footer`` is an extra row after a blank line (a label and one cell per column). ``padding`` is
    the blank on each side of a cell but the outer sides (the heatmap's cells carry their own).
    Cells are justified as ``justify`` says, or as their own ``Text.justify``; column labels are
    made by ``header``. ``label_width`` is the least width of the row labels' column, and
    ``widen`` whether a title wider than the columns widens them (else the title runs past the last
    column): grids drawn one above another keep their columns in line with both. ``cell_width``, where the
    caller knows every cell's width (a heatmap's), lets the grid fit its columns without making their cells.
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
        label_width: int = 0,
        widen: bool = True,
        cell_width: int | None = None,
    ) -> None:
        self.title, self.row_labels, self.col_labels = title, as_labels(row_labels), as_labels(col_labels)
        self.title_width = Text(title).cell_len
        self.footer, self.padding, self.header, self.justify = footer, padding, header, justify
        self._column = column
        self._cells: dict[int, Sequence[Text]] = {}
        self._widths: dict[int, int] = {}
        self.rows = list(rows) if rows is not None else list(Rows.ends(len(row_labels), max_rows).shown)
        labels = [self.row_labels[i] for i in self.rows] + ([footer[0]] if footer is not None else [])
        self.label_width = max([label_width, *(Text(label).cell_len for label in labels)])
        self.widen = widen
        self.cell_width = cell_width

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
        """Characters column ``j`` takes, without separators (measured once: fitting a grid asks for it often)."""
        if j not in self._widths:
            label = self.header(self.col_labels[j]).cell_len
            if self.cell_width is not None and self.footer is None:  # known: the cells are made only if shown
                self._widths[j] = max(label, self.cell_width)
            else:
                self._widths[j] = max(label, *(cell.cell_len for cell in self.cells(j)))
        return self._widths[j]

    def span(self, columns: int) -> int:
        """Characters the grid takes with its first ``columns`` columns, all shown."""
        return self.label_width + sum(self.separator + self.width(j) for j in range(columns))

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

    def lines(self, left: Sequence[int], right: Sequence[int], console: Console, max_width: int) -> list[Text]:
        """The grid's lines with columns ``left``, then (when columns are left out) ``…``, then ``right``.

        Line by line: the title, the column labels, a rule, the rows (a ``⋮`` row where rows are
        left out), and a blank line and the footer. A title wider than the columns widens them (up
        to ``max_width``), each in proportion to its width, unless ``widen`` is off; a title wider
        still wraps.
        """
        row, lines = self._laid_out(left, right, console, max_width)
        return [line if isinstance(line, Text) else row.line(*line) for line in lines]

    def segments(self, left: Sequence[int], right: Sequence[int], console: Console, max_width: int) -> RenderResult:
        """The segments of ``lines``, each line ended by a line break: the same segments, drawn without making a
        ``Text`` of each line (a heatmap's rows, a cell a colour each, cost a third of the time)."""
        row, lines = self._laid_out(left, right, console, max_width)
        style_of = _Styles(console)
        for line in lines:
            yield from line.render(console) if isinstance(line, Text) else row.segments(*line, style_of)
            yield Segment.line()

    def _laid_out(
        self, left: Sequence[int], right: Sequence[int], console: Console, max_width: int
    ) -> tuple[_Row, list[Text | tuple[list[Text], list[str]]]]:
        """How ``lines`` draws its rows (a ``_Row``), and its lines: the title's as ``Text``, the others as the cells
        and the styles of their columns (the rule and the blank line as ``Text``)."""
        hidden = len(left) + len(right) < len(self.col_labels)
        columns: list[int | None] = [*left, None, *right] if hidden else [*left]
        last = len(columns)
        pads = [(0 if i == 0 else self.padding, 0 if i == last else self.padding) for i in range(last + 1)]
        widths = [self.label_width, *(len(GAP) if j is None else self.width(j) for j in columns)]
        slots = [width + before + after for width, (before, after) in zip(widths, pads, strict=True)]
        room = min(self.title_width, max_width) - sum(slots) - last  # `last` dividers of one blank
        if room > 0 and self.widen:
            widths = [width + extra for width, extra in zip(widths, _shares(room, slots), strict=True)]
        width = max(room, 0) + sum(slots) + last
        row = _Row(widths, pads, self.justify)
        body = [LABEL_STYLE, *[""] * last]

        # Labels and titles are Text, never read as Rich markup (a token such as "[b]" stays as it is).
        title = Text(self.title)
        titles = [line.copy() for line in title.wrap(console, width)] if self.title_width > width else [title]
        for line in titles:
            line.pad_right(width - line.cell_len)
        lines: list[Text | tuple[list[Text], list[str]]] = [*titles]
        header = [Text(""), *(self.header(GAP if j is None else self.col_labels[j]) for j in columns)]
        lines += [(header, ["bold", *[LABEL_STYLE] * last]), Text(RULE * width)]
        gap, row_gap = Text(GAP, style="dim"), Text(ROW_GAP, style="dim")
        for k, i in enumerate(self.rows):
            if after_gap(self.rows, k):
                lines.append(([row_gap] * (last + 1), body))
            lines.append(([Text(self.row_labels[i]), *(gap if j is None else self.cells(j)[k] for j in columns)], body))
        if self.footer is not None:
            cells = [gap if j is None else self.cells(j)[-1] for j in columns]
            lines += [Text(" " * width), ([Text(self.footer[0]), *cells], body)]
        return row, lines

    def note(self, shown: int) -> Text | None:
        """What a grid showing ``shown`` columns says about the rows and columns it left out, and how to see them."""
        rows, cols = len(self.row_labels), len(self.col_labels)
        return left_out((rows - len(self.rows), rows), (cols - shown, cols))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        left, right = self.shown(options.max_width)
        yield from self.segments(left, right, console, options.max_width)
        note = self.note(len(left) + len(right))
        if note is not None:
            yield note

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        left, right = self.shown(options.max_width)
        used = self.label_width + sum(self.separator + self.width(j) for j in (*left, *right))
        if len(left) + len(right) < len(self.col_labels):
            used += self.separator + len(GAP)
        narrowest = self.label_width + self.separator + len(GAP)
        return Measurement(min(narrowest, used), max(used, self.title_width))


class _Row:
    """Draws one line of a grid: each cell justified in its column's width, padded, columns one blank apart."""

    def __init__(self, widths: Sequence[int], pads: Sequence[tuple[int, int]], justify: str) -> None:
        self.widths, self.pads, self.justify = widths, pads, justify

    def line(self, cells: Sequence[Text], styles: Sequence[str]) -> Text:
        """``cells``, one per column (the row label first, justified left), over each column's ``styles``."""
        line = Text()
        for i, (cell, width, (before, after), style) in enumerate(
            zip(cells, self.widths, self.pads, styles, strict=True)
        ):
            if i:
                line.append(" ")  # the divider between two columns
            excess = width - cell.cell_len
            justify = "left" if i == 0 else cell.justify or self.justify
            lead = {"left": 0, "center": excess // 2}.get(justify, excess)
            start = len(line)
            line.append(" " * before)
            line.append(" " * lead, cell.style)  # justifying widens the cell: its style goes along
            line.append_text(cell)
            line.append(" " * (excess - lead), cell.style)
            line.append(" " * after)
            if style:
                line.stylize_before(style, start, len(line))
        return line

    def segments(self, cells: Sequence[Text], styles: Sequence[str], style_of: _Styles) -> list[Segment]:
        """The segments ``line(cells, styles).render(console)`` yields (``style_of``: the console's styles), drawn
        without the ``Text``."""
        out = _Segments(style_of)
        base = (style_of.base,)
        for i, (cell, width, (before, after), style) in enumerate(
            zip(cells, self.widths, self.pads, styles, strict=True)
        ):
            if i:
                out.add(" ", base)  # the divider between two columns
            excess = width - cell.cell_len
            justify = "left" if i == 0 else cell.justify or self.justify
            lead = {"left": 0, "center": excess // 2}.get(justify, excess)
            chars = before + max(lead, 0) + len(cell) + max(excess - lead, 0) + after
            spanned = bool(style) and chars > 0  # the column's style, under its cell's
            if spanned:
                out.cut()
            column = (*base, style_of(style)) if spanned else base
            out.add(" " * before, column)
            self._blank(out, lead, cell, column)
            out.cell(cell, column)
            self._blank(out, excess - lead, cell, column)
            out.add(" " * after, column)
            if spanned:
                out.cut()
        return out.line()

    @staticmethod
    def _blank(out: _Segments, count: int, cell: Text, column: tuple[Style, ...]) -> None:
        """``count`` blanks that justify ``cell``, in its style (a span of their own)."""
        if count > 0 and cell.style:
            out.cut()
            out.add(" " * count, (*column, out.styles(cell.style)))
            out.cut()
        else:
            out.add(" " * count, column)


class _Styles:
    """A console's styles by name (``console.get_style``), and the combinations of them a line draws, each looked
    up once per drawing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.named: dict[str | Style, Style] = {}
        self.combined: dict[tuple[Style, ...], Style] = {}
        self.base = self("")

    def __call__(self, name: str | Style) -> Style:
        style = self.named.get(name)
        if style is None:
            style = self.named[name] = self.console.get_style(name, default=Style.null())
        return style

    def combine(self, styles: tuple[Style, ...]) -> Style:
        """``Style.combine(styles)``, once per combination."""
        style = self.combined.get(styles)
        if style is None:
            style = self.combined[styles] = Style.combine(styles)
        return style


class _Segments:
    """The segments of one line as ``Text.render`` cuts them: a cut wherever a style's span starts or ends (an
    empty one too), each piece in the combination of the styles over it; a line without any span, one segment
    without a style."""

    def __init__(self, styles: _Styles) -> None:
        self.styles = styles
        self.done: list[Segment] = []
        self.piece: list[str] = []
        self.stack: tuple[Style, ...] = (styles.base,)
        self.spans = False

    def add(self, text: str, stack: tuple[Style, ...]) -> None:
        """``text`` under the styles ``stack`` (those of the piece it continues: a new stack follows a cut)."""
        if text:
            self.piece.append(text)
            self.stack = stack

    def cut(self) -> None:
        """A span starts or ends here."""
        self.spans = True
        if self.piece:
            self.done.append(Segment("".join(self.piece), self.styles.combine(self.stack)))
            self.piece = []

    def cell(self, cell: Text, stack: tuple[Style, ...]) -> None:
        """A cell's text (``Text.append_text``): its style over it, then its own spans."""
        if cell.style:
            self.cut()
            stack = (*stack, self.styles(cell.style))
        text = cell.plain
        if not cell.spans:
            self.add(text, stack)
        else:
            spans = cell.spans
            edges = {s.start for s in spans} | {s.end for s in spans}
            for start, end in itertools.pairwise(sorted(edges | {0, len(text)})):
                if start in edges:
                    self.cut()
                over = tuple(self.styles(s.style) for s in spans if s.start <= start and s.end >= end)
                self.add(text[start:end], (*stack, *over))
            if len(text) in edges:
                self.cut()
        if cell.style:
            self.cut()

    def line(self) -> list[Segment]:
        """The line's segments."""
        if not self.spans:
            return [Segment("".join(self.piece))]
        self.cut()
        return self.done


def _shares(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, each share rounded up in turn (as Rich widens a table)."""
    shares, left = [], sum(weights)
    for weight in weights:
        share = ceil(weight * total / left) if left else total
        shares.append(share)
        total, left = total - share, left - weight
    return shares
