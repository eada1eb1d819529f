"""Heatmaps: one grid per head, each cell's number on a colour scaled by its value, or shade characters."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.color import Color
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from attnx.core.result import AttentionResult
from attnx.core.tensors import WEIGHTS
from attnx.render.colours import Rgb, hex_of, text_on
from attnx.render.fitted import FittedGrid, row_lookup
from attnx.render.numbers import fmt
from attnx.render.tables import head_title, shown_tokens, with_sink

SHADES = " ░▒▓█"  # level k of 0..4 stands for a value near k/4 of the scale's top
# Viridis at five stops: ordered in lightness, readable by the colour-blind, and in print.
PALETTE = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
# Positions on the scale are rounded to one of this many levels, so the colours (and the styles) a
# heatmap can draw are a finite set, each checked for contrast (tests/render/test_heatmap.py).
LEVELS = 256


@dataclass(frozen=True)
class HeatScale:
    """Values from 0 to ``top`` map onto the palette (or onto ``SHADES``); ``name`` says what they are."""

    top: float
    name: str = "weight"

    def fraction(self, value: float) -> float:
        """Where ``value`` sits on the scale, clipped to 0..1 (0 when the scale is empty or NaN)."""
        if not self.top > 0 or not np.isfinite(value):
            return 0.0
        return float(min(1.0, max(0.0, value / self.top)))


def scale_of(matrices: Sequence[np.ndarray], name: str = "weight") -> HeatScale:
    """A scale from 0 to the largest finite value of ``matrices`` (one scale for everything shown)."""
    tops = [float(np.nanmax(m)) for m in matrices if np.size(m) and not np.isnan(m).all()]
    return HeatScale(max(tops, default=0.0), name)


def shade(fraction: float) -> str:
    """The shade character of a position 0..1 on the scale, rounded to the nearest quarter."""
    return SHADES[int(fraction * 4 + 0.5)]


def level(fraction: float) -> int:
    """The palette level 0..LEVELS-1 nearest to position ``fraction`` (clipped to 0..1)."""
    return round(min(1.0, max(0.0, fraction)) * (LEVELS - 1))


@functools.cache
def level_rgb(k: int) -> Rgb:
    """The colour of level ``k``, interpolated between the palette's stops."""
    x = k / (LEVELS - 1) * (len(PALETTE) - 1)
    i = min(int(x), len(PALETTE) - 2)
    t = x - i
    low, high = PALETTE[i], PALETTE[i + 1]
    r, g, b = (round(lo + (hi - lo) * t) for lo, hi in zip(low, high, strict=True))
    return (r, g, b)


def colour_at(fraction: float) -> Color:
    """The palette colour at position 0..1 (at the nearest of its ``LEVELS`` levels)."""
    return Color.from_rgb(*level_rgb(level(fraction)))


@functools.cache
def _level_style(k: int) -> Style:
    background = level_rgb(k)
    return Style(bgcolor=hex_of(background), color=hex_of(text_on(background)))


def cell_style(fraction: float) -> Style:
    """Background from the palette; black or white numbers, whichever contrasts more with it (WCAG ≥ 4.5)."""
    return _level_style(level(fraction))


def heat_cell(value: float, scale: HeatScale, precision: int, colour: bool, width: int = 0) -> Text:
    """One cell: `` 0.2509`` on its colour, or ``▒▒ 0.2509`` with shade characters when colour is off.

    The number is right-aligned in ``width`` characters; the grid right-justifies the cell in its column, as
    it does the column's label, so that the label ends over the numbers however wide either is (the blanks
    that justify the cell carry its colour: the colour fills the column).
    """
    fraction = scale.fraction(value)
    number = fmt(value, precision).rjust(width)
    if colour:
        return Text(f" {number}", style=cell_style(fraction))
    return Text(f"{shade(fraction) * 2} {number}")


def heatmap(
    title: str,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    precision: int,
    *,
    scale: HeatScale,
    colour: bool,
    blocked: np.ndarray | None = None,
    max_rows: int | None = None,
    matrix_rows: Sequence[int] | None = None,
    numbers: int = 0,
    label_width: int = 0,
    widen: bool = True,
) -> FittedGrid:
    """One labelled grid, as many columns as the width holds; cells where ``blocked`` is True are a dim ``·``.

    Past ``max_rows`` rows (None: no limit) the first and last rows are shown; ``matrix_rows``, when
    ``matrix`` holds only those rows of ``row_labels``, computed alone (they are then the rows shown). Every
    column's label ends over the last digit of its numbers. ``numbers`` and ``label_width`` are the least
    widths of the numbers and of the row labels, and ``widen`` whether a wide title widens the columns (see
    ``FittedGrid``): grids drawn one above another with the same of each keep a key's column in one place.
    """
    width = max(number_width(matrix, precision), numbers)
    masked = Text("·".rjust(width + (1 if colour else 3)), style="dim")
    local = row_lookup(matrix_rows)

    def cell(k: int, j: int) -> Text:
        if blocked is not None and blocked[k, j]:
            return masked
        return heat_cell(float(matrix[k, j]), scale, precision, colour, width)

    def column(j: int, rows: Sequence[int]) -> list[Text]:
        return [cell(local(i), j) for i in rows]

    return FittedGrid(title, row_labels, col_labels, column, padding=0, max_rows=max_rows, rows=matrix_rows,
                      label_width=label_width, widen=widen, cell_width=masked.cell_len)  # fmt: skip


def number_width(matrix: np.ndarray, precision: int) -> int:
    """The longest ``fmt(value, precision)`` in ``matrix``, from its extremes and non-finite values only.

    At fixed decimals a number's text grows with its magnitude, so the longest is the smallest
    or the largest value's.
    """
    finite = matrix[np.isfinite(matrix)]
    values = [finite.min(), finite.max()] if finite.size else []
    values += list(np.unique(matrix[~np.isfinite(matrix)]))
    return max((len(fmt(float(value), precision)) for value in values), default=0)


def legend(scale: HeatScale, precision: int, colour: bool) -> Text:
    """What the colours (or shades) mean: five steps from 0 to the top of the scale."""
    text = Text()
    text.append(f"{scale.name}: ", style="dim")  # a span, not the line's style: the swatches are not dimmed
    for k in range(len(SHADES)):
        value = scale.top * k / (len(SHADES) - 1)
        if colour:
            text.append("  ", style=cell_style(k / (len(SHADES) - 1)))
        else:
            text.append(f"'{SHADES[k]}'" if k == 0 else SHADES[k])
        text.append(f" {fmt(value, precision)}  ")
    text.append(f"(0 to the largest shown, {fmt(scale.top, precision)})", style="dim")
    return text


def weight_heatmaps(
    result: AttentionResult,
    precision: int,
    *,
    colour: bool,
    scale: HeatScale | None = None,
    max_rows: int | None = None,
    matrices: np.ndarray | None = None,
    what: str = "",
    heads: Sequence[int] | None = None,
) -> RenderableType:
    """Every head's weights (or ``matrices`` ``[head, query, key]`` instead, ``what`` added to each title) as a
    grid titled as in the tables, side by side where they fit (the rows the result's matrices hold, when it holds
    some only); a learned sink's share is a column of its own after the keys. ``heads``: those heads only."""
    held, matrix_rows = result, result.matrix_rows
    weights = held.tensor(WEIGHTS) if matrices is None else matrices  # NotComputedError, not a drawing of nothing
    scale = scale or scale_of([weights])
    blocked = None if held.mask is None else ~held.mask
    grids = []
    rows, labels = shown_tokens(result)
    for h in range(result.heads) if heads is None else heads:
        shown, keys, hidden = (
            (weights[h], labels, blocked) if matrices is not None else with_sink(result, h, weights[h], labels, blocked)
        )
        grids.append(heatmap(head_title(result, h) + what, shown, rows, keys, precision, scale=scale,
                             colour=colour, blocked=hidden, max_rows=max_rows, matrix_rows=matrix_rows))  # fmt: skip
    return Columns(grids, padding=(1, 4))


def weights_view(
    result: AttentionResult,
    precision: int,
    *,
    colour: bool,
    max_rows: int | None = None,
    heads: Sequence[int] | None = None,
) -> RenderableType:
    """`attnx run --view heatmap`: every head's weights (and learned sinks' shares) as a heatmap, then the legend;
    ``heads``: those heads only (the shades' scale theirs)."""
    picked = slice(None) if heads is None else list(heads)
    sinks = [] if result.sink_weights is None else [result.sink_weights[picked]]
    scale = scale_of([result.tensor(WEIGHTS)[picked], *sinks])
    grids = weight_heatmaps(result, precision, colour=colour, scale=scale, max_rows=max_rows, heads=heads)
    return Group(grids, legend(scale, precision, colour))
