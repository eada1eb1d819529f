"""How heads own columns: the layout rule, mean-pooling K/V heads, and small facts about head counts."""

from __future__ import annotations

import numpy as np


def divisors(n: int) -> list[int]:
    """Return the head counts that split ``n`` columns evenly, in increasing order."""
    return [h for h in range(1, n + 1) if n % h == 0]


def largest_abs(array: np.ndarray) -> float:
    """max |value| of ``array``, as max and min: two reductions, no temporary |array| as large as it."""
    return max(float(array.max()), -float(array.min()))


def columns_of(head: int, heads: int, d_k: int, layout: str) -> range:
    """Columns of a ``heads × d_k`` wide array that head ``head`` (0-based) owns under ``layout``."""
    if layout == "interleaved":  # column j belongs to head j mod H
        return range(head, heads * d_k, heads)
    return range(head * d_k, (head + 1) * d_k)


def pool_heads(array: np.ndarray, heads: int, into: int, layout: str = "contiguous") -> np.ndarray:
    """``array`` (``[..., heads·d_k]``) with its ``heads`` column heads mean-pooled into ``into`` heads.

    New head ``g`` is the mean of old heads ``g·r … g·r + r − 1`` (``r = heads / into``); a head's
    columns are a block (contiguous) or every ``heads``-th column (interleaved), before and after.
    """
    *lead, width = array.shape
    d_k, r = width // heads, heads // into
    if layout == "interleaved":  # column j belongs to head j mod heads
        split = np.swapaxes(array.reshape(*lead, d_k, heads), -1, -2)  # (..., heads, d_k)
    else:
        split = array.reshape(*lead, heads, d_k)  # (..., heads, d_k)
    means = split.reshape(*lead, into, r, d_k).mean(axis=-2)  # (..., into, d_k)
    if layout == "interleaved":
        means = np.swapaxes(means, -1, -2)  # (..., d_k, into)
    return means.reshape(*lead, into * d_k)
