"""Counting from 0, with -1 the last, as Python and TransformerLens do: one rule for layers, heads and queries."""

from __future__ import annotations


def from_end(index: int, count: int) -> int | None:
    """``index`` (0 the first of ``count``, -1 the last, -``count`` the first again) counted from 0; None when
    it names none of them."""
    resolved = index + count if index < 0 else index
    return resolved if 0 <= resolved < count else None


def span(count: int) -> str:
    """How indices into ``count`` things are written, both ways: ``"0..29 (or -30..-1)"``."""
    return f"0..{count - 1} (or -{count}..-1)"


def counted(index: int, count: int) -> int:
    """``index`` counted from 0 (-1 the last of ``count``); one beyond either end as given, for its check to name."""
    resolved = from_end(index, count)
    return index if resolved is None else resolved
