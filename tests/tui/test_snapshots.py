"""Screens of `attnx explore` at 80×24 and 120×40, in colour and under NO_COLOR, against stored SVG snapshots; and
the same screens with a byte-level tokenizer's tokens, every column label over its numbers.

A changed screen fails with the new SVG written beside the test's temporary files. After a deliberate change,
``ATTNX_UPDATE_SNAPSHOTS=1 python -m pytest tests/tui/test_snapshots.py -n 0`` rewrites the snapshots (and the
README's picture, docs/explore.svg); look at them before committing.
"""

from __future__ import annotations

import asyncio
import os
import re
from html import unescape
from pathlib import Path

import pytest

from attnx.analysis.explore import Explorer
from attnx.cli.explore import explorer
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags
from attnx.render import explore as panels
from tests.tui.screens import BYTE_LEVEL, byte_level, grids, screen_lines
from tests.tui.test_explore import long_input

pytest.importorskip("textual")
from attnx.tui.app import ExploreApp

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).parent / "snapshots"
README_PICTURE = ROOT / "docs" / "explore.svg"
UPDATE = os.environ.get("ATTNX_UPDATE_SNAPSHOTS") == "1"
# The learner's screen: at "sat", head 0 pinned beside head 1, the causal mask switched on (the change panel shows).
SESSION = ("right", "right", "p", "right_square_bracket", "c")


def screen(size: tuple[int, int], colour: bool, keys: tuple[str, ...] = SESSION, state: Explorer | None = None) -> str:
    """The SVG of the screen at ``size`` after ``keys``, on ``state`` (default: the worked example)."""

    async def play() -> str:
        app = ExploreApp(state or explorer(None, InputFlags(), ModelFlags(), EngineFlags(), CapFlags()), colour=colour)
        async with app.run_test(size=size) as pilot:
            await pilot.press(*keys)
            await pilot.pause(3 * app.trace_delay)
            return app.export_screenshot()

    return asyncio.run(play())


def text_of(svg: str) -> str:
    """The characters of an SVG screen, its lines joined (enough to read what a failing snapshot shows)."""
    return unescape("".join(re.findall(r"<text [^>]*>([^<]*)</text>", svg))).replace("\xa0", " ")


def grey(hex_colour: str) -> bool:
    """Whether ``rrggbb`` is a grey (red, green and blue alike)."""
    return hex_colour[0:2].lower() == hex_colour[2:4].lower() == hex_colour[4:6].lower()


def check(svg: str, snapshot: Path, tmp_path: Path) -> None:
    """``svg`` equals the stored ``snapshot`` (or replaces it under ATTNX_UPDATE_SNAPSHOTS=1)."""
    if UPDATE:
        snapshot.write_text(svg, encoding="utf-8")
    if not snapshot.exists():
        pytest.fail(f"no snapshot {snapshot.name}: run with ATTNX_UPDATE_SNAPSHOTS=1 to write it")
    stored = snapshot.read_text(encoding="utf-8")
    if svg != stored:
        new = tmp_path / snapshot.name
        new.write_text(svg, encoding="utf-8")
        assert text_of(svg) == text_of(stored), f"the screen changed: compare {new} with {snapshot}"
        pytest.fail(f"the screen's colours or layout changed: compare {new} with {snapshot}")


class TestScreens:
    """The learner's screen, whole, at two sizes, with and without colour."""

    @pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
    @pytest.mark.parametrize("colour", [True, False], ids=["colour", "no-color"])
    def test_screen(self, size: tuple[int, int], colour: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        if not colour:
            monkeypatch.setenv("NO_COLOR", "1")  # Textual draws in monochrome; the heatmaps in shades
        svg = screen(size, colour)
        text = text_of(svg)
        assert "query 2 'sat'" in text and "(pinned 0)" in text and "· causal" in text
        greys = [grey(fill) for fill in re.findall(r'<rect [^>]*fill="#([0-9a-fA-F]{6})"', svg)]  # backgrounds
        if colour:
            assert not all(greys)  # the heatmaps' cells
        else:
            assert all(greys) and "█" in text  # monochrome; the heatmaps' shades stand in for the colours
        check(svg, SNAPSHOTS / f"explore-{size[0]}x{size[1]}-{'colour' if colour else 'no-color'}.svg", tmp_path)

    def test_readme_picture(self, tmp_path: Path) -> None:
        """The README's picture is the screen the code draws today."""
        check(screen((100, 34), True), README_PICTURE, tmp_path)


class TestByteLevel:
    """Tokens as byte-level tokenizers make them (`" cat"`): each column's label ends over its numbers, and a key's
    column stands at one place in every heatmap drawn across the width (the pinned head's, the change's, the
    query's row in every head)."""

    @pytest.mark.parametrize(("size", "panels"), [((80, 24), 2), ((120, 40), 3)], ids=["80x24", "120x40"])
    def test_every_label_over_its_column(self, size: tuple[int, int], panels: int, tmp_path: Path) -> None:
        svg = screen(size, True, state=byte_level())
        lines = screen_lines(svg)
        assert "query 2 ' sat'" in lines[0] and "(pinned 0)" in lines[0]
        found = grids(lines, BYTE_LEVEL)  # the head's two heatmaps side by side, the change's, every head's
        assert len(found) == panels and [len(rows) for _, rows in found] == [5, 2, 2][:panels]
        for header, rows in found:
            assert all(row == header for row in rows), (header, rows)
        assert {tuple(header[: len(BYTE_LEVEL)]) for header, _ in found} == {(13, 19, 25, 31, 37)}
        assert lines[-1].split()[-2:] == ["q", "quit"]
        check(svg, SNAPSHOTS / f"explore-byte-level-{size[0]}x{size[1]}.svg", tmp_path)


class TestNarrow:
    """At 80 columns a long input's heatmaps show fewer keys, never a cut number."""

    def test_every_number_whole(self) -> None:
        import io

        from rich.console import Console

        state = long_input(heads=4)
        state.go_to(500)
        console = Console(width=76, file=io.StringIO(), color_system=None)
        console.print(panels.head_panel(state, colour=False, width=76, rows=8))
        console.print(panels.heads_panel(state, colour=False, width=76))
        lines = console.file.getvalue().splitlines()
        rows = [line for line in lines if re.match(r"^(▶ |  )(t\d+|H\d)", line)]
        assert len(rows) == 8 + 4
        for row in rows:
            assert len(row) <= 76
            cells = [word for word in row.split()[1 if row.startswith("  ") else 2 :] if word.strip("█▓▒░")]
            assert cells and all(re.fullmatch(r"\d\.\d\d|·", cell) for cell in cells), row  # shades aside
