from __future__ import annotations

import io

import numpy as np
import pytest
from rich.columns import Columns
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from attnx.render.fitted import FittedGrid
from attnx.render.heatmap import number_width
from attnx.render.numbers import fmt
from attnx.render.tables import matrix_table


def render(renderable: object, width: int) -> list[str]:
    """The plain-text lines a console of ``width`` characters prints."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def grid(rows: int, cols: int, calls: list[int] | None = None) -> FittedGrid:
    """A grid whose cell (i, j) reads ``i.j`` padded to 6 characters, counting the columns it makes."""

    def column(j: int) -> list[Text]:
        if calls is not None:
            calls.append(j)
        return [Text(f"{i}.{j}".rjust(6)) for i in range(rows)]

    return FittedGrid("title", [f"r{i}" for i in range(rows)], [f"c{j}" for j in range(cols)], column)


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
