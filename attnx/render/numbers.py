"""Formatting numbers for tables: fixed decimals, no negative zero, readable non-finite values."""

from __future__ import annotations

import math

# How every table shows a weight that a mask blocked (run, heatmap numbers, trace, diff): a dim
# middle dot. Raw and scaled scores of a blocked pair are computed before the mask and shown as
# numbers; only weights (and what follows from them) become the marker.
MASKED = "·"
MASKED_STYLE = "dim"
MASKED_NOTE = "· = masked (weight 0); scores are shown as computed before the mask"


def fmt(value: float, precision: int) -> str:
    """``0.70710678`` -> ``"0.7071"`` at precision 4; ``-0.00001`` -> ``"0.0000"``."""
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    text = f"{value:.{precision}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    return text


def fmt_row(values: list[float] | tuple[float, ...], precision: int) -> str:
    """``[0.25, 0.5]`` -> ``"[0.2500, 0.5000]"``."""
    return "[" + ", ".join(fmt(float(v), precision) for v in values) + "]"
