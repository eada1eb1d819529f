"""Fitted grids: columns fitted to the width, rows, drawing as segments, matrix tables and number widths."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pytest
from rich.columns import Columns
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text

from attnx.core.rows import Rows, after_gap
from attnx.render.colours import LABEL
from attnx.render.fitted import FittedGrid, _shares, row_lookup
from attnx.render.heatmap import heatmap, number_width, scale_of
from attnx.render.numbers import fmt
from attnx.render.tables import matrix_table


def render(renderable: object, width: int) -> list[str]:
    """The plain-text lines a console of ``width`` characters prints."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def grid(
    rows: int, cols: int, calls: list[int] | None = None, max_rows: int | None = None, made: list[int] | None = None
) -> FittedGrid:
    """A grid whose cell (i, j) reads ``i.j`` padded to 6 characters, counting the columns (and cells) it makes."""

    def column(j: int, shown: list[int]) -> list[Text]:
        if calls is not None:
            calls.append(j)
        if made is not None:
            made.extend(shown)
        return [Text(f"{i}.{j}".rjust(6)) for i in shown]

    labels = [f"r{i}" for i in range(rows)]
    return FittedGrid("title", labels, [f"c{j}" for j in range(cols)], column, max_rows=max_rows)


class TestFittedGrid:
    """A grid keeps to its width: all columns when they fit, else both ends around a … column."""

    def test_all_columns_when_they_fit(self) -> None:
        """Five columns of 6 characters (2 + 5 × 9 = 47 wide) print whole at width 47, with no note."""
        lines = render(grid(2, 5), 47)
        assert lines[1].split() == ["c0", "c1", "c2", "c3", "c4"]
        assert lines[-1].split() == ["r1", "1.0", "1.1", "1.2", "1.3", "1.4"]
        assert not any("left out" in line for line in lines)

    def test_both_ends_around_a_gap(self) -> None:
        """One character short, the middle column gives way to … and the note says how many are missing."""
        lines = render(grid(2, 5), 46)
        assert lines[1].split() == ["c0", "c1", "…", "c3", "c4"]
        assert lines[3].split() == ["r0", "0.0", "0.1", "…", "0.3", "0.4"]
        assert " ".join(line.strip() for line in lines[5:]).startswith(
            "1 of 5 columns left out (…) to fit the width; widen the terminal"
        )
        assert max(len(line.rstrip()) for line in lines[:4]) <= 46

    def test_left_gets_the_odd_column(self) -> None:
        """Columns are taken from each end in turn, the left first: at 35 characters, three left and two right."""
        lines = render(grid(1, 40), 2 + 3 + 1 + 5 * 9)
        assert lines[1].split() == ["c0", "c1", "c2", "…", "c38", "c39"]

    def test_only_shown_columns_are_made(self) -> None:
        """A 1000-column grid at width 80 makes 13 columns: the 9 that overflow 80 from the left, and the 4 right ones."""
        calls: list[int] = []
        lines = render(grid(3, 1000, calls), 80)
        assert lines[1].split() == ["c0", "c1", "c2", "c3", "…", "c996", "c997", "c998", "c999"]
        assert sorted(calls) == [*range(9), 996, 997, 998, 999]  # each made once

    def test_no_room_for_any_column(self) -> None:
        """Narrower than one column, the row labels and … still print."""
        lines = render(grid(2, 3), 8)
        assert lines[3].split() == ["r0", "…"]

    def test_measure_never_exceeds_the_width(self) -> None:
        """Side by side (rich Columns) a grid measures at most the width it is offered."""
        console = Console(file=io.StringIO(), width=60)
        assert Measurement.get(console, console.options, grid(2, 100)).maximum <= 60
        assert Measurement.get(console, console.options, grid(2, 2)).maximum == len("r1") + 2 * 9
        lines = render(Columns([grid(2, 3), grid(2, 3)], padding=(0, 2)), 80)
        assert lines[1].split() == ["c0", "c1", "c2"] * 2


class TestRows:
    """Past ``max_rows`` rows a grid shows the first and last rows around a ⋮ row, and says what it left out."""

    def test_rows_chosen_by_the_caller(self) -> None:
        """rows= shows exactly those rows, with ⋮ where rows between them are left out, and counts the rest."""
        lines = render(FittedGrid("t", [f"r{i}" for i in range(10)], ["c"], lambda j, rows: [Text(str(i)) for i in rows],
                                  rows=[0, 4, 5]), 80)  # fmt: skip
        labels = [line.split()[0] for line in lines if line.startswith(("r", "⋮"))]
        assert labels == ["r0", "⋮", "r4", "r5"]
        assert any("7 of 10 rows left out" in line for line in lines)

    def test_row_lookup(self) -> None:
        """A grid row's place in a matrix holding only some rows; without them, the row itself."""
        assert row_lookup([3, 7, 9])(7) == 1 and row_lookup(None)(7) == 7
        with pytest.raises(KeyError):
            row_lookup([3, 7, 9])(4)

    def test_after_gap(self) -> None:
        """Only a shown row whose predecessor is not the row just above it follows a gap."""
        rows = [0, 1, 2, 8, 9]
        assert [after_gap(rows, k) for k in range(len(rows))] == [False, False, False, True, False]

    def test_first_and_last_rows_around_a_gap(self) -> None:
        """Ten rows at most 5: rows 0-2, a ⋮ row, rows 8-9, then a note naming --rows all."""
        lines = render(grid(10, 2, max_rows=5), 80)
        assert [line.split()[0] for line in lines[3:9]] == ["r0", "r1", "r2", "⋮", "r8", "r9"]
        assert lines[6].split() == ["⋮", "⋮", "⋮"]
        assert lines[8].split() == ["r9", "9.0", "9.1"]
        assert lines[9] == "5 of 10 rows left out (⋮); use --rows all or --format csv to see them"

    def test_only_shown_rows_are_made(self) -> None:
        """A 10,000-row grid at 6 rows formats 6 cells per column."""
        made: list[int] = []
        render(grid(10_000, 2, max_rows=6, made=made), 80)
        assert made == [0, 1, 2, 9997, 9998, 9999] * 2

    def test_rows_and_columns_left_out(self) -> None:
        """With rows and columns both left out, one note names both and every way to see them.

        At width 200 the labels and the … column take 6 characters and each column 9: 21 of 40 fit.
        """
        lines = render(grid(10, 40, max_rows=4), 200)
        note = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if "left out" in x)) :])
        assert note == ("6 of 10 rows left out (⋮); 19 of 40 columns left out (…) to fit the width; "
                        "use --rows all, widen the terminal, or use --format csv to see them")  # fmt: skip

    def test_no_gap_at_the_limit(self) -> None:
        """As many rows as the limit: all shown, no ⋮ and no note."""
        lines = render(grid(5, 2, max_rows=5), 80)
        assert [line.split()[0] for line in lines[3:]] == ["r0", "r1", "r2", "r3", "r4"]

    @pytest.mark.parametrize(
        ("count", "max_rows", "expected"),
        [(5, None, [0, 1, 2, 3, 4]), (5, 5, [0, 1, 2, 3, 4]), (6, 4, [0, 1, 4, 5]), (6, 3, [0, 1, 5]), (6, 1, [0])],
    )
    def test_shown_rows(self, count: int, max_rows: int | None, expected: list[int]) -> None:
        """The first half (with the odd row) from the top, the rest from the bottom."""
        rows = Rows.ends(count, max_rows)
        assert list(rows.shown) == expected
        assert (rows.complete, rows.hidden) == (len(expected) == count, count - len(expected))

    def test_footer_stays_under_a_cut_grid(self) -> None:
        """A footer (the "all" row) still closes a grid whose rows were cut."""
        matrix = np.arange(20.0).reshape(10, 2)
        lines = render(matrix_table("t", matrix, [f"q{i}" for i in range(10)], ["x", "y"], 0,
                                    footer=("all", [90, 100]), max_rows=2), 40)  # fmt: skip
        assert [line.split() for line in lines[3:8]] == [["q0", "0", "1"], ["⋮", "⋮", "⋮"], ["q9", "18", "19"], [],
                                                         ["all", "90", "100"]]  # fmt: skip


def styled(renderable: object, width: int) -> list[list[tuple[str, Style]]]:
    """Each printed line as (character, style) pairs, on a colour console of ``width`` characters."""
    console = Console(file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True)
    return [
        [(char, segment.style or Style()) for segment in line for char in segment.text]
        for line in console.render_lines(renderable, console.options, pad=False)
    ]


class TestDrawing:
    """A grid draws its own lines, as a compact Rich table would: title, header, rule, rows, footer."""

    def test_every_line_of_a_small_grid(self) -> None:
        """A title wider than the columns widens them in proportion (11 blanks over slots 5, 5, 4: 4, 4, 3);
        a ⋮ row marks left-out rows and a blank line comes before the footer."""
        grid = FittedGrid("a title wider than the grid", ["r0", "row1", "r2", "r3", "r4"], ["c0", "c1"],
                          lambda j, rows: [Text(f"{i}.{j}") for i in rows], max_rows=4,
                          footer=("all", [Text("x"), Text("yy")]))  # fmt: skip
        assert render(grid, 80) == [
            "a title wider than the grid",
            "                c0       c1",
            "───────────────────────────",
            "r0             0.0      0.1",
            "row1           1.0      1.1",
            "⋮                ⋮        ⋮",
            "r3             3.0      3.1",
            "r4             4.0      4.1",
            "                           ",
            "all              x       yy",
            "1 of 5 rows left out (⋮); use --rows all or --format csv to see them",
        ]

    def test_a_title_wider_than_the_console_wraps(self) -> None:
        """Past the console's width the title wraps and pads to the grid's width; the grid keeps to the width."""
        grid = FittedGrid(
            "a title wider than the grid", ["r0"], ["c0", "c1"], lambda j, rows: [Text("1.0") for _ in rows]
        )
        assert render(grid, 14)[:5] == [
            "a title wider ",
            "than the grid ",
            "      c0    c1",
            "──────────────",
            "r0   1.0   1.0",
        ]

    def test_a_title_that_widens_nothing(self) -> None:
        """``widen`` off, a wide title runs past the columns (the rule under it) and moves none of them; the row
        labels take at least ``label_width``: grids drawn one above another keep their columns in line."""
        grid = FittedGrid("a title wider than the grid", ["r0", "r1"], ["c0", "c1"],
                          lambda j, rows: [Text(f"{i}.{j}") for i in rows], label_width=4, widen=False)  # fmt: skip
        assert render(grid, 80) == [
            "a title wider than the grid",
            "        c0    c1",
            "───────────────────────────",
            "r0     0.0   0.1",
            "r1     1.0   1.1",
        ]

    def test_styles(self) -> None:
        """Labels are in the LABEL style (the row label's padding too); a cell's style covers the blanks that justify it."""
        grid = FittedGrid("t", ["row"], ["col"], lambda j, rows: [Text("7", style="bold yellow") for _ in rows])
        header, rule, row = styled(grid, 40)[1:4]
        assert "".join(char for char, _ in row) == "row     7"
        assert all(style == Style.parse(LABEL) for _, style in row[:4])  # "row" and its padding
        assert [style for _, style in row[4:]] == [Style()] * 2 + [Style.parse("bold yellow")] * 3
        assert header[-1] == ("l", Style.parse(LABEL)) and all(style == Style() for _, style in rule)

    def test_justifying_spreads_a_cell_style_but_padding_does_not(self) -> None:
        """A heatmap cell's background covers the blanks that justify it in a wide column, not the padding."""
        on_red = Style.parse("on red")
        grid = FittedGrid("t", ["r"], ["a long label"], lambda j, rows: [Text("0.5", style=on_red) for _ in rows])
        row = styled(grid, 40)[3]
        assert "".join(char for char, _ in row) == "r" + " " * 12 + "0.5"
        assert [style == on_red for _, style in row] == [False] * 4 + [True] * 12  # r, padding, divider, padding

    def test_shares(self) -> None:
        """A widening is split in proportion to the columns, each share rounded up in turn, and adds up."""
        assert _shares(11, [5, 5, 4]) == [4, 4, 3]
        assert _shares(1, [3, 3]) == [1, 0]
        assert sum(_shares(97, [1, 7, 13, 2])) == 97


class TestSegments:
    """A grid draws its rows as segments without a ``Text`` per line: the very segments ``Text.render`` gives."""

    @staticmethod
    def both(grid: FittedGrid, width: int) -> tuple[list[Segment], list[Segment]]:
        console = Console(file=io.StringIO(), width=width, color_system="truecolor")
        left, right = grid.shown(width)
        texts = [s for line in grid.lines(left, right, console, width) for s in [*line.render(console), Segment.line()]]
        return list(grid.segments(left, right, console, width)), texts

    def test_heatmaps_in_colour_and_in_shades(self) -> None:
        """Heatmaps with blocked cells, a gap column and a gap row, wide and control-character labels, coloured
        and shaded: each segment's text and style, and where segments are cut, as ``Text.render`` has them."""
        rng = np.random.default_rng(0)
        matrix = rng.random((12, 30))
        blocked = np.triu(np.ones((12, 30), dtype=bool), 1)
        names = [f"t{j}" for j in range(28)] + ["猫猫", "a\x1b[31mb"]
        for colour in (True, False):
            grid = heatmap("a title", matrix, [f"q{i}" for i in range(12)], names, 2, scale=scale_of([matrix]),
                           colour=colour, blocked=blocked, max_rows=6, label_width=5)  # fmt: skip
            for width in (30, 80, 200):
                fast, slow = self.both(grid, width)
                assert fast == slow

    def test_spans_inside_cells_and_a_footer(self) -> None:
        """Cells with spans of their own (an empty one too), centred and left cells, padding, a wide title and a
        footer: the same segments."""

        def column(j: int, rows: Sequence[int]) -> list[Text]:
            cells = [Text.assemble("c", ("ab", "bold"), "c", ("d", "red")) if i % 2 else Text("xy", style="italic")
                     for i in rows]  # fmt: skip
            cells[-1].spans.append(Span(1, 1, "underline"))  # an empty span cuts a segment too
            cells[0].justify = "center" if j % 2 else "left"
            return cells

        footer = ("sum", [Text("9" * (j % 2), style="green") for j in range(6)])  # an empty cell cuts one
        grid = FittedGrid("a title much wider than its two columns", ["r0", "r1", "", "r3"], [f"c{j}" for j in range(6)],
                          column, footer=footer, padding=1)  # fmt: skip
        for width in (20, 60):
            fast, slow = self.both(grid, width)
            assert fast == slow


class TestMatrixTable:
    """`matrix_table` (run, diff): numbers, masks and footers in a fitted grid."""

    def test_wide_weights_stay_numbers(self) -> None:
        """The defect fixed: 24 keys at width 100 printed every cell as … ; now each shown cell is a number."""
        weights = np.random.default_rng(0).dirichlet(np.ones(24), size=24)
        tokens = [f"tok{j}" for j in range(24)]
        lines = render(matrix_table("weights", weights, tokens, tokens, 4, emphasise_row_max=True), 100)
        row = lines[3].split()
        assert row[0] == "tok0" and row.count("…") == 1
        shown = [cell for cell in row[1:] if cell != "…"]
        assert shown[0] == fmt(weights[0, 0], 4) and shown[-1] == fmt(weights[0, -1], 4)

    def test_footer_and_blocked_cells(self) -> None:
        """A footer prints under a rule; blocked cells are ·."""
        matrix = np.array([[1.0, 2.0], [3.0, 4.0]])
        blocked = np.array([[False, True], [False, False]])
        lines = render(
            matrix_table("t", matrix, ["a", "b"], ["x", "y"], 1, blocked=blocked, footer=("all", [4, 6])), 40
        )
        assert [line.split() for line in lines[3:]] == [
            ["a", "1.0", "·"],
            ["b", "3.0", "4.0"],
            [],
            ["all", "4.0", "6.0"],
        ]


class TestNumberWidth:
    @pytest.mark.parametrize("precision", [0, 2, 4])
    def test_equals_formatting_every_value(self, precision: int) -> None:
        """The heatmap's cell width from the extremes equals the longest of every value formatted."""
        rng = np.random.default_rng(precision)
        matrix = rng.standard_normal((30, 30)) * 10.0 ** rng.integers(-3, 6, (30, 30))
        matrix[0, :3] = [np.nan, np.inf, -np.inf]
        matrix[1, 0] = -0.00001  # prints as 0.0000: its sign goes
        expected = max(len(fmt(float(value), precision)) for value in matrix.ravel())
        assert number_width(matrix, precision) == expected
