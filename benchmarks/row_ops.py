"""One value per row applied to a tile (the softmax's normalise step): NumPy's default buffer against by_row.

Usage: python benchmarks/row_ops.py

A ufunc combining a (rows, cols) tile with a (rows, 1) column walks up to NumPy's buffer size
(8192 elements) at a time; when a row is shorter it first copies each row's value across a buffer.
`attnx.engines.tiled.rows.by_row` cuts the buffer to one row for rows of 256 elements or more.
Prints, per tile shape (rows × the keys of a weights-path tile, float32, in cache), the best time of
each form, interleaved in one run, and the ratio; a plain copy of the tile is the floor.
"""

from __future__ import annotations

import timeit

import numpy as np

from attnx.engines.tiled.rows import by_row

SHAPES = [(256, 64), (256, 512), (256, 1024), (256, 2048), (256, 3000), (256, 4096)]


def best(fn: object, calls: int) -> float:
    """The best of 9 timings of ``calls`` calls, per call."""
    return min(timeit.repeat(fn, number=calls, repeat=9)) / calls  # type: ignore[arg-type]


def main() -> None:
    print(f"numpy {np.__version__}, buffer {np.getbufsize()} elements; out = tile × column, float32")
    print(f"{'tile':>12s} {'plain':>10s} {'by_row':>10s} {'copy':>10s}  plain / by_row")
    rng = np.random.default_rng(0)
    for rows, cols in SHAPES:
        tile = rng.random((rows, cols), dtype=np.float32)
        column = rng.random((rows, 1), dtype=np.float32)
        out = np.ones_like(tile)  # touched: first-touch page faults are not what is measured
        calls = max(5, 2_000_000 // tile.size)
        plain = best(lambda: np.multiply(tile, column, out=out), calls)  # noqa: B023
        cut = best(lambda: by_row(np.multiply, tile, column, out=out), calls)  # noqa: B023
        copy = best(lambda: np.copyto(out, tile), calls)  # noqa: B023
        times = "".join(f"{t * 1e6:8.1f}µs " for t in (plain, cut, copy))
        print(f"{rows:5d} × {cols:<5d} {times} {plain / cut:5.2f}×")


if __name__ == "__main__":
    main()
