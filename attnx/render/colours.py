"""Colours that read on dark and light terminals alike: WCAG contrast, the text for a cell colour, checked styles.

WCAG 2 defines the contrast of two colours as (L1 + 0.05) / (L2 + 0.05), L1 the lighter one's
relative luminance. attnx holds its colours to two rules:

- text on a background it sets (a heatmap cell) has a contrast of at least ``MIN_TEXT_CONTRAST``
  (4.5, WCAG AA) with that background: black or white text, whichever contrasts more, always
  reaches 4.58 (the worst case is a background of luminance 0.18);
- a colour used on the terminal's own background, which may be black or white, has a contrast
  of at least ``MIN_FOREGROUND_CONTRAST`` (3, WCAG AA for large or bold text) with both: its
  luminance must lie between 0.10 and 0.30.

Colours are given as RGB, never as the 16 named ANSI colours: those are whatever the terminal's
theme makes them (ANSI yellow on a light theme is often near-invisible).
"""

from __future__ import annotations

from rich.color import Color, ColorType
from rich.style import Style

Rgb = tuple[int, int, int]

BLACK: Rgb = (0, 0, 0)
WHITE: Rgb = (255, 255, 255)
MIN_TEXT_CONTRAST = 4.5
MIN_FOREGROUND_CONTRAST = 3.0

# Labels and headers drawn on the terminal's background: a teal of luminance 0.20 (5.1 on black, 4.1 on
# white), one of the 256 xterm colours, so it is the same on terminals without true colour.
ACCENT: Rgb = (0, 135, 175)
# Emphasis on the terminal's background (a row's largest weight, a head's label score): an orange of
# luminance 0.23 (5.5 on black, 3.8 on white), xterm colour 166. ANSI yellow, the usual choice, has a
# contrast of 1.1 to 1.6 on a white terminal.
HIGHLIGHT: Rgb = (215, 95, 0)
# Verdicts: a green (xterm 28, luminance 0.17) and a red (xterm 160, luminance 0.14).
GOOD: Rgb = (0, 135, 0)
BAD: Rgb = (215, 0, 0)
FOREGROUNDS = (ACCENT, HIGHLIGHT, GOOD, BAD)


def hex_of(rgb: Rgb) -> str:
    """``(0, 135, 175)`` -> ``"#0087af"``, as Rich's styles take it."""
    return "#{:02x}{:02x}{:02x}".format(*rgb)


# The styles every renderer draws text in on the terminal's own background: one name for one purpose.
LABEL = f"bold {hex_of(ACCENT)}"  # row and column labels, table headers
EMPHASIS = f"bold {hex_of(HIGHLIGHT)}"  # a row's largest value, a head's label score
WARNING = hex_of(HIGHLIGHT)  # something left out or not computed
PASS = hex_of(GOOD)
FAIL = f"bold {hex_of(BAD)}"
ERROR = hex_of(BAD)
STYLES = (LABEL, EMPHASIS, WARNING, PASS, FAIL, ERROR)


def _linear(channel: int) -> float:
    """An sRGB channel 0..255 as linear light 0..1."""
    c = channel / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def luminance(rgb: Rgb) -> float:
    """WCAG relative luminance: 0 for black, 1 for white."""
    r, g, b = (_linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: Rgb, b: Rgb) -> float:
    """WCAG contrast ratio of two colours, 1 (the same) to 21 (black and white)."""
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_on(background: Rgb) -> Rgb:
    """Black or white, whichever contrasts more with ``background`` (at least 4.58 for any background)."""
    return BLACK if contrast(BLACK, background) >= contrast(WHITE, background) else WHITE


def rgb_of(color: Color) -> Rgb | None:
    """The RGB of a colour given as RGB or as one of the 240 fixed xterm colours; None for a colour the
    terminal's theme decides (the default colour and the 16 named ANSI colours)."""
    if color.type is ColorType.DEFAULT or (color.type is not ColorType.TRUECOLOR and (color.number or 0) < 16):
        return None
    triplet = color.get_truecolor()
    return (triplet.red, triplet.green, triplet.blue)


def style_problem(style: Style) -> str | None:
    """Why text in ``style`` may be hard to read on a dark or a light terminal, or None.

    A background needs a text colour (not the terminal's, which may be either) contrasting with it
    by ``MIN_TEXT_CONTRAST``; a text colour on the terminal's background needs ``MIN_FOREGROUND_CONTRAST``
    against black and white. Colours the theme decides cannot be checked and are refused, and so is
    dim text in a chosen colour (each terminal fades it its own way). Dim text in the terminal's own
    colours is left to the terminal.
    """
    fg = rgb_of(style.color) if style.color is not None else None
    if style.dim and (style.color is not None or style.bgcolor is not None):
        return f"{style}: dim text on a chosen colour is as faint as the terminal makes it"
    if style.bgcolor is not None:
        bg = rgb_of(style.bgcolor)
        if bg is None or fg is None:
            return f"{style}: text on a background needs both as RGB"
        ratio = contrast(fg, bg)
        return None if ratio >= MIN_TEXT_CONTRAST else f"{style}: text contrast {ratio:.2f} < {MIN_TEXT_CONTRAST}"
    if style.color is None:
        return None  # the terminal's own text colour on its own background
    if fg is None:
        return f"{style}: a named colour is whatever the terminal's theme makes it"
    worst = min(contrast(fg, BLACK), contrast(fg, WHITE))
    if worst < MIN_FOREGROUND_CONTRAST:
        return f"{style}: contrast {worst:.2f} against a black or white terminal < {MIN_FOREGROUND_CONTRAST}"
    return None
