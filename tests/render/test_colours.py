"""Colours: contrast on dark and light backgrounds, foregrounds, and the style check every renderer's styles pass."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from rich.color import Color, ColorSystem
from rich.style import Style

from attnx.render.colours import (
    ACCENT,
    BLACK,
    FOREGROUNDS,
    MIN_FOREGROUND_CONTRAST,
    MIN_TEXT_CONTRAST,
    STYLES,
    WHITE,
    contrast,
    hex_of,
    luminance,
    rgb_of,
    style_problem,
    text_on,
)


class TestContrast:
    def test_black_and_white(self) -> None:
        """Luminance runs from 0 (black) to 1 (white); their contrast is WCAG's maximum, 21."""
        assert (luminance(BLACK), luminance(WHITE)) == (0.0, 1.0)
        assert contrast(BLACK, WHITE) == contrast(WHITE, BLACK) == 21.0

    @pytest.mark.parametrize(
        ("colour", "ratio"),
        [((0x76, 0x76, 0x76), 4.54), ((0x77, 0x77, 0x77), 4.48), ((0xFF, 0x00, 0x00), 4.0), ((0x00, 0x00, 0xFF), 8.59)],
    )
    def test_known_ratios_on_white(self, colour: tuple[int, int, int], ratio: float) -> None:
        """Published WCAG ratios on white: #767676 is the lightest grey to pass 4.5, #777777 fails it."""
        assert round(contrast(colour, WHITE), 2) == ratio

    def test_text_on_any_background_reaches_the_minimum(self) -> None:
        """Black or white text, as text_on picks it, contrasts ≥ 4.5 with every background of an RGB grid (step 15)."""
        steps = range(0, 256, 15)
        worst = min(contrast(text_on(rgb), rgb) for rgb in itertools.product(steps, steps, steps))
        assert MIN_TEXT_CONTRAST <= worst < 4.7  # the theory's worst case is 4.58, at luminance 0.18


class TestForegrounds:
    @pytest.mark.parametrize("colour", FOREGROUNDS)
    def test_read_on_black_and_white_terminals(self, colour: tuple[int, int, int]) -> None:
        """Each colour for text on the terminal's background contrasts ≥ 3 with black and with white."""
        assert min(contrast(colour, BLACK), contrast(colour, WHITE)) >= MIN_FOREGROUND_CONTRAST
        assert style_problem(Style(color=hex_of(colour), bold=True)) is None

    @pytest.mark.parametrize("colour", FOREGROUNDS)
    def test_same_on_256_colour_terminals(self, colour: tuple[int, int, int]) -> None:
        """Each is one of the 256 xterm colours, so terminals without true colour show it unchanged."""
        downgraded = Color.parse(hex_of(colour)).downgrade(ColorSystem.EIGHT_BIT)
        assert rgb_of(downgraded) == colour


class TestStyleProblem:
    @pytest.mark.parametrize(
        "style",
        [Style(), Style(bold=True, dim=True), Style(color=hex_of(ACCENT), bold=True),
         Style(color="#000000", bgcolor="#fde725"), Style(color="color(231)", bgcolor="color(53)")],
    )  # fmt: skip
    def test_legible_styles_pass(self, style: Style) -> None:
        """The terminal's own colours, a mid-luminance label colour, and black on yellow are fine."""
        assert style_problem(style) is None

    @pytest.mark.parametrize(
        ("style", "why"),
        [
            (Style(color="#440154"), "contrast 1.38 against a black or white terminal"),
            (Style(color="#fde725"), "against a black or white terminal"),
            (Style(color="cyan"), "whatever the terminal's theme makes it"),
            (Style(bgcolor="#440154"), "needs both as RGB"),
            (Style(color="white", bgcolor="#440154"), "needs both as RGB"),
            (Style(color="#ffffff", bgcolor="#21918c"), "text contrast 3.82 < 4.5"),
            (Style(color="#000000", bgcolor="#fde725", dim=True), "dim text on a chosen colour"),
        ],
    )
    def test_illegible_styles_are_named(self, style: Style, why: str) -> None:
        """Dark purple or yellow on the terminal's background, theme colours, white on teal, dimmed colours are refused."""
        problem = style_problem(style)
        assert problem is not None and why in problem


class TestRendererStyles:
    @pytest.mark.parametrize("style", STYLES)
    def test_named_styles_read_on_any_terminal(self, style: str) -> None:
        """Every style the renderers draw text in on the terminal's background passes the contrast rules."""
        assert style_problem(Style.parse(style)) is None

    @pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "attnx" / "render").glob("*.py")))
    def test_no_renderer_names_a_theme_colour(self, path: Path) -> None:
        """No renderer styles text with one of the 16 ANSI colour names, which the terminal's theme decides."""
        names = "black|red|green|yellow|blue|magenta|cyan|white"
        pattern = re.compile(rf"""["'](?:[a-z ]* )?(?:bright_)?(?:{names})(?: on [a-z_]+)?["']""")
        assert pattern.findall(path.read_text("utf-8")) == []
