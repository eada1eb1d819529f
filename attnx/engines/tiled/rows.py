"""Row-wise steps on score tiles: one value per row applied to a tile, and the in-place softmax."""

from __future__ import annotations

import numpy as np

# Rows at least this long are combined with one value per row with NumPy's buffer cut to a row (by_row).
LONG_ROW = 256


def by_row(op: np.ufunc, x: np.ndarray, column: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``op(x, column, out=out)`` for rows ``x`` (..., cols) and one value per row, ``column`` (..., 1).

    A ufunc loop takes up to NumPy's buffer size (8192 elements) at a time. When rows are shorter,
    NumPy first copies each row's value across a buffer, which made a 256 × 2048 float32 multiply
    take 1.5-2× as long. With the buffer no longer than a row, the loop reads each row's value as a
    scalar. Rows shorter than ``LONG_ROW`` lose more to the extra loop turns than they gain. The
    buffer size (NumPy's public ``setbufsize``, per thread and context in NumPy 2) is restored
    before this returns.
    """
    cols = x.shape[-1]
    if cols < LONG_ROW or cols >= np.getbufsize():
        return op(x, column, out=out)
    before = np.setbufsize(cols // 16 * 16)  # NumPy takes multiples of 16
    try:
        return op(x, column, out=out)
    finally:
        np.setbufsize(before)


def softmax_rows_(s: np.ndarray, allowed: np.ndarray | None, exp: np.ufunc = np.exp) -> np.ndarray:
    """Softmax over the last axis of ``s`` in place; ``allowed`` (``[rows, keys]``) broadcasts over heads.

    With ``exp=np.exp2``, ``s`` holds scores in base 2 (times log2 e).
    """
    if allowed is not None:
        np.copyto(s, -np.inf, where=~allowed)
    peak = s.max(axis=-1, keepdims=True)
    if allowed is not None:
        peak[~np.isfinite(peak)] = 0  # every key blocked: exp(-inf) = 0 everywhere
    by_row(np.subtract, s, peak, out=s)
    exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    if allowed is not None:
        total[total == 0] = 1  # ... and the row stays zeros
    by_row(np.divide, s, total, out=s)
    return s
