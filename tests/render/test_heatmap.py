"""Heatmaps: shades, contrast on dark and light backgrounds, rendering, labels over their columns, exports."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from attnx.engines import compute
from attnx.io import load_spec
from attnx.render.colours import BLACK, MIN_TEXT_CONTRAST, WHITE, contrast, rgb_of, style_problem
from attnx.render.heatmap import (
    LEVELS,
    HeatScale,
    cell_style,
    colour_at,
    heatmap,
    legend,
    level_rgb,
    scale_of,
    shade,
    weights_view,
)
from tests.runner import run_attnx

ANSI = "\x1b["
TOP = "#fde725"  # the palette's last stop, rgb(253, 231, 37): the largest weight shown
BOTTOM_RGB = "48;2;68;1;84"  # the first stop as an ANSI background


def render(renderable: object, *, colour: bool) -> str:
    """What a console prints: truecolor ANSI when ``colour``, plain text otherwise."""
    console = Console(
        file=io.StringIO(), width=140, force_terminal=colour, color_system="truecolor" if colour else None
    )
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


class TestShades:
    @pytest.mark.parametrize(
        ("fraction", "char"), [(0.0, " "), (0.12, " "), (0.13, "░"), (0.5, "▒"), (0.74, "▓"), (0.9, "█"), (1.0, "█")]
    )
    def test_nearest_quarter(self, fraction: float, char: str) -> None:
        """Fractions of the scale round to the nearest of five shades."""
        assert shade(fraction) == char

    def test_scale_clips_and_guards_zero(self) -> None:
        """Values beyond the top clip to 1; an all-zero scale maps everything to 0."""
        assert HeatScale(0.5).fraction(0.25) == 0.5 and HeatScale(0.5).fraction(2.0) == 1.0
        assert HeatScale(0.0).fraction(0.3) == 0.0 and HeatScale(1.0).fraction(float("nan")) == 0.0

    def test_scale_of_takes_the_largest_finite_value(self) -> None:
        """One scale for several matrices: 0 to their largest value, NaN ignored."""
        assert scale_of([np.array([[0.1, np.nan]]), np.array([[0.7]])]).top == 0.7

    def test_palette_ends(self) -> None:
        """Position 0 is viridis' dark purple, position 1 its yellow."""
        assert colour_at(0.0).triplet.hex == "#440154" and colour_at(1.0).triplet.hex == TOP


@pytest.fixture(scope="module")
def worked():
    return compute(load_spec())


def drawn_styles(renderable: object) -> list:
    """The style of every segment a truecolor terminal draws for ``renderable`` that shows: text, or a background."""
    console = Console(file=io.StringIO(), width=140, force_terminal=True, color_system="truecolor")
    lines = console.render_lines(renderable, console.options, pad=False)
    shown = [seg for line in lines for seg in line if seg.style is not None]
    return [seg.style for seg in shown if seg.text.strip() or seg.style.bgcolor is not None]


class TestContrast:
    def test_every_level_reads(self) -> None:
        """Each of the LEVELS cell styles (all the heatmap can draw) has text contrasting ≥ 4.5 with its background."""
        ratios = []
        for k in range(LEVELS):
            style = cell_style(k / (LEVELS - 1))
            assert style_problem(style) is None, style
            assert rgb_of(style.bgcolor) == level_rgb(k)
            ratios.append(contrast(rgb_of(style.color), rgb_of(style.bgcolor)))
        assert min(ratios) >= MIN_TEXT_CONTRAST and len(ratios) == LEVELS

    def test_every_position_is_one_of_the_levels(self) -> None:
        """Any position on the scale, in range or not, is drawn with one of the LEVELS styles checked above."""
        levels = {cell_style(k / (LEVELS - 1)) for k in range(LEVELS)}
        positions = [*np.linspace(0.0, 1.0, 4099), -0.5, 1.5, 1e-9, 1 - 1e-9]
        assert {cell_style(float(f)) for f in positions} <= levels

    def test_white_on_dark_black_on_light(self) -> None:
        """The bottom (dark purple) carries white numbers, the top (yellow) black ones."""
        assert rgb_of(cell_style(0.0).color) == WHITE and rgb_of(cell_style(1.0).color) == BLACK
        assert contrast(WHITE, level_rgb(0)) > 15 and contrast(BLACK, level_rgb(LEVELS - 1)) > 15

    def test_drawn_cells_and_legend_read(self, worked) -> None:
        """Every cell and legend swatch of a drawn heatmap passes the contrast rule (the grid's labels are
        render/fitted.py's)."""
        styles = drawn_styles(weights_view(worked, 4, colour=True))
        painted = [style for style in styles if style.bgcolor is not None]
        assert len(painted) >= 2 * 25  # two heads of 5 × 5 cells
        assert [style_problem(style) for style in painted] == [None] * len(painted)
        swatches = [style for style in drawn_styles(legend(HeatScale(1.0), 2, colour=True)) if style.bgcolor]
        assert [style_problem(style) for style in swatches] == [None] * 5


class TestHeatmapRendering:
    def test_with_colour(self, worked) -> None:
        """With colour every cell keeps its number on a background; the largest weight is yellow, no shades."""
        text = render(weights_view(worked, 4, colour=True), colour=True)
        assert ANSI in text and "48;2;253;231;37m 0.3673" in text  # head 0, sat → sat: the top of the scale
        assert not set("░▒▓█") & set(text)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        assert "Head 0 · columns 0-1 · d_k = 2" in plain and "Head 1 · columns 2-3 · d_k = 2" in plain
        assert re.search(r"cat\s+0\.3664\s+0\.0891\s+0\.3664\s+0\.0891\s+0\.0891", plain)

    def test_without_colour_shades_keep_the_pattern(self, worked) -> None:
        """Without colour each cell carries a shade next to its number; no ANSI at all."""
        text = render(weights_view(worked, 4, colour=False), colour=False)
        assert ANSI not in text
        # head 0, scale 0 to 0.3673: 0.3664 → █, 0.0891 → ░ (0.24 of the top), 0.2000 → ▒ (0.54)
        assert "cat ██ 0.3664 ░░ 0.0891 ██ 0.3664 ░░ 0.0891 ░░ 0.0891" in text
        assert "on  ▒▒ 0.2000 ▒▒ 0.2000 ▒▒ 0.2000 ▒▒ 0.2000 ▒▒ 0.2000" in text
        assert "weight: ' ' 0.0000  ░ 0.0918  ▒ 0.1837  ▓ 0.2755  █ 0.3673" in text

    def test_blocked_cells(self) -> None:
        """Masked cells show a dim dot and no shade."""
        grid = heatmap("t", np.array([[1.0, 0.0]]), ["a"], ["a", "b"], 2, scale=HeatScale(1.0), colour=False,
                       blocked=np.array([[False, True]]))  # fmt: skip
        assert re.search(r"a ██ 1\.00\s+·", render(grid, colour=False))

    def test_legend_with_colour(self) -> None:
        """The colour legend shows five swatches from the bottom to the top of the palette."""
        text = render(legend(HeatScale(1.0), 2, colour=True), colour=True)
        assert BOTTOM_RGB in text and "48;2;253;231;37" in text and " 0.50 " in text


def ends(line: str, pattern: str) -> list[int]:
    """Where each match of ``pattern`` in ``line`` ends (the column after its last character)."""
    return [match.end() for match in re.finditer(pattern, line)]


class TestAlignment:
    """A column's label ends over the last digit of its numbers, whichever is wider, as in the tables."""

    @pytest.mark.parametrize("colour", [True, False], ids=["colour", "shades"])
    @pytest.mark.parametrize("title", ["t", "a title much wider than the grid it names"], ids=["narrow", "wide"])
    def test_labels_over_their_numbers(self, colour: bool, title: str) -> None:
        """Byte-level tokens (" cat") and a long one, under a title that widens the columns or not."""
        grid = heatmap(title, np.array([[0.25, 0.5, 1.0], [0.1, 0.2, 0.7]]), ["the", " cat"],
                       ["the", " cat", " a-long-token"], 2, scale=HeatScale(1.0), colour=colour,
                       blocked=np.array([[False, False, True], [False, False, False]]))  # fmt: skip
        lines = render(grid, colour=False).splitlines()
        labels = ends(lines[1], r"\S+")
        assert len(labels) == 3 and labels[-1] == len(lines[2])  # the last label at the grid's edge
        assert ends(lines[3], r"\d\.\d\d|·") == labels and ends(lines[4], r"\d\.\d\d") == labels

    def test_a_colour_fills_its_column(self) -> None:
        """The blanks that push a number under a wider label carry the number's colour."""
        grid = heatmap("t", np.array([[1.0]]), ["a"], ["a-long-token"], 2, scale=HeatScale(1.0), colour=True)
        console = Console(file=io.StringIO(), width=40, force_terminal=True, color_system="truecolor")
        row = console.render_lines(grid, console.options, pad=False)[3]
        cell = [(segment.text, segment.style.bgcolor) for segment in row if segment.style and segment.style.bgcolor]
        assert "".join(text for text, _ in cell) == " " * 7 + " 1.00" and {bg.triplet.hex for _, bg in cell} == {TOP}

    def test_shared_widths(self) -> None:
        """``numbers`` and ``label_width`` widen the numbers and the row labels (grids drawn one above another)."""
        grid = heatmap("t", np.array([[0.25, -0.5]]), ["a"], ["x", "y"], 2, scale=HeatScale(1.0), colour=True,
                       numbers=6, label_width=5)  # fmt: skip
        assert render(grid, colour=False).splitlines()[1:4] == [
            "            x       y",
            "─────────────────────",
            "a        0.25   -0.50",
        ]

    @pytest.mark.parametrize("colour", [True, False], ids=["colour", "shades"])
    def test_columns_measured_without_their_cells(self, colour: bool) -> None:
        """A heatmap knows its cells' width: each column measures as its cells do (NaN, -inf, blocked and wide
        labels among them), and fitting a width makes no cell."""
        matrix = np.array([[0.25, np.nan, -np.inf, 12.5], [0.1, 0.2, 0.7, -3.0]])
        blocked = np.array([[False, False, True, False], [False, True, False, False]])
        grid = heatmap("t", matrix, ["a", "b"], ["x", " a-long-token", "y", "z"], 2, scale=HeatScale(1.0),
                       colour=colour, blocked=blocked, numbers=3)  # fmt: skip
        grid.shown(30)
        assert grid._cells == {}
        assert [grid.width(j) for j in range(4)] == [
            max(len(grid.col_labels[j]), *(cell.cell_len for cell in grid.cells(j))) for j in range(4)
        ]


class TestViewsAndExports:
    def test_run_heatmap_view_without_colour(self) -> None:
        """`attnx run --view heatmap` on a pipe falls back to shades; --show does not combine with it."""
        result = run_attnx("run", "--view", "heatmap", env={"COLUMNS": "140"})
        assert result.code == 0, result.stderr
        assert "cat ██ 0.3664 ░░ 0.0891" in result.stdout and ANSI not in result.stdout
        refused = run_attnx("run", "--view", "heatmap", "--show", "weights")
        assert refused.code == 2 and "leave out --show" in refused.stderr

    def test_run_heatmap_view_forced_colour(self) -> None:
        """FORCE_COLOR on a pipe: coloured cells, no shades."""
        result = run_attnx("run", "--view", "heatmap", env={"FORCE_COLOR": "1", "COLUMNS": "140"})
        assert result.code == 0, result.stderr
        assert "48;2;253;231;37" in result.stdout and "█" not in result.stdout

    def test_svg_export(self, tmp_path: Path) -> None:
        """--export x.svg saves what was printed as an SVG, coloured: the top colour and the numbers are in it."""
        target = tmp_path / "heatmap.svg"
        result = run_attnx("run", "--view", "heatmap", "--export", str(target), env={"COLUMNS": "120"})
        assert result.code == 0, result.stderr
        svg = target.read_text("utf-8")
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert f'fill="{TOP}"' in svg
        assert "0.3664" in svg and "cat" in svg and "Head&#160;1" in svg
        assert not list(tmp_path.glob(".*.tmp"))  # written atomically

    def test_piped_stdout_keeps_its_shades_beside_a_coloured_export(self, tmp_path: Path) -> None:
        """Piped stdout shows shade characters while the SVG export shows colours: each gets its own drawing."""
        target = tmp_path / "heatmap.svg"
        result = run_attnx("run", "--view", "heatmap", "--export", str(target), env={"COLUMNS": "80"})
        assert result.code == 0, result.stderr
        assert "cat ██ 0.3664 ░░ 0.0891 ██ 0.3664" in result.stdout
        svg = target.read_text("utf-8")
        assert f'fill="{TOP}"' in svg and "█" not in svg

    def test_svg_export_without_colour_uses_shades(self, tmp_path: Path) -> None:
        """--no-color: the SVG carries shade characters and no palette colour."""
        target = tmp_path / "plain.svg"
        result = run_attnx("run", "--view", "heatmap", "--no-color", "--export", str(target))
        assert result.code == 0, result.stderr
        svg = target.read_text("utf-8")
        assert "██" in svg and TOP not in svg

    def test_text_and_html_exports(self, tmp_path: Path) -> None:
        """A .txt export is the plain text with shades; .html keeps the colours."""
        txt, html = tmp_path / "h.txt", tmp_path / "h.html"
        assert run_attnx("run", "--view", "heatmap", "--export", str(txt)).code == 0
        assert "cat ██ 0.3664 ░░ 0.0891" in txt.read_text("utf-8")
        assert run_attnx("run", "--view", "heatmap", "--export", str(html)).code == 0
        page = html.read_text("utf-8")
        assert "<html" in page.lower() and TOP in page and "0.3664" in page

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--export", "x.png"], "--export writes .svg, .html or .txt files, not 'x.png'"),
            (["--export", "x.svg", "-f", "json"], "--export saves the table view"),
        ],
    )
    def test_export_refusals(self, args: list[str], message: str) -> None:
        """An unknown extension, or an export of a machine format, is exit 2."""
        result = run_attnx("run", *args)
        assert result.code == 2 and message in result.stderr
