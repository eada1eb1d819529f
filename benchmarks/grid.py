"""Time to draw one matrix table: attnx's FittedGrid against a Rich Table holding the same cells (one run).

Usage: python benchmarks/grid.py [--rows 40] [--cols 8] [--repeat 200]

Prints the median time of each to render at 80 columns into a string, and their ratio. FittedGrid
formats only the cells it shows and knows every column's width before it draws a line; a Rich
Table measures every cell. `attnx run` on the worked example draws about a dozen such grids.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console, RenderableType
from rich.text import Text

from attnx.render.fitted import FittedGrid
from attnx.render.layout import compact_table
from attnx.render.numbers import fmt


def render(renderable: RenderableType) -> str:
    """``renderable`` drawn at 80 columns, without colour, into a string."""
    buffer = io.StringIO()
    Console(file=buffer, width=80, color_system=None, highlight=False, emoji=False).print(renderable)
    return buffer.getvalue()


def median_ms(make: Callable[[], RenderableType], repeat: int) -> float:
    """Median milliseconds to make and render one table."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        render(make())
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    """Print both medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    matrix = np.random.default_rng(0).random((args.rows, args.cols))
    rows = [f"t{i}" for i in range(args.rows)]
    cols = [f"t{j}" for j in range(args.cols)]

    def fitted() -> RenderableType:
        return FittedGrid("weights (softmax)", rows, cols,
                          lambda j, shown: [Text(fmt(float(matrix[i, j]), 4)) for i in shown])  # fmt: skip

    def rich_table() -> RenderableType:
        table = compact_table("weights (softmax)")
        table.add_column("")
        for label in cols:
            table.add_column(label, justify="right")
        for i, label in enumerate(rows):
            table.add_row(label, *(Text(fmt(float(v), 4)) for v in matrix[i]))
        return table

    for make in (fitted, rich_table):  # warm both
        render(make())
    a, b = median_ms(fitted, args.repeat), median_ms(rich_table, args.repeat)
    print(f"{args.rows} rows × {args.cols} columns at 80 columns, median of {args.repeat}")
    print(f"FittedGrid  {a:7.2f} ms")
    print(f"Rich Table  {b:7.2f} ms   ({b / a:.2f}× FittedGrid's time)")


if __name__ == "__main__":
    main()
