"""exp against exp2 on a weights-path tile: why the exp paths work in base 2 where exp2 is fast.

Usage: python benchmarks/exp_base.py

e^x = 2^(x·log2 e), and the factor log2 e costs nothing once folded into the queries' multiplier,
so the exp paths may take either ufunc. Prints, for a 512 × 2048 tile of scores (a weights-path
tile) in float32 and float64, the best time of each, interleaved in one run, their ratio, and
which one attnx takes on this machine (`attnx.engines.tiled.current_plan().exp2`). To see the
other case on an AVX-512 CPU: NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" (NumPy 2.4's names).
"""

from __future__ import annotations

import timeit

import numpy as np

from attnx.engines.tiled import current_plan

SHAPE = (512, 2048)


def main() -> None:
    print(
        f"numpy {np.__version__}; tile {SHAPE[0]} × {SHAPE[1]}; attnx takes {'exp2' if current_plan().exp2 else 'exp'}"
    )
    print(f"{'dtype':>8s} {'exp':>10s} {'exp2':>10s}  exp / exp2")
    for dtype in (np.float32, np.float64):
        scores = np.random.default_rng(0).uniform(-10, 10, SHAPE).astype(dtype)
        out = np.empty_like(scores)
        times: dict[str, list[float]] = {"exp": [], "exp2": []}
        for _ in range(9):  # interleaved: both see the same machine
            for name, fn in (("exp", np.exp), ("exp2", np.exp2)):
                times[name] += timeit.repeat(lambda fn=fn, x=scores, y=out: fn(x, out=y), number=5, repeat=1)
        exp, exp2 = (min(times[name]) / 5 for name in ("exp", "exp2"))
        print(f"{np.dtype(dtype).name:>8s} {exp * 1e6:8.1f}µs {exp2 * 1e6:8.1f}µs  {exp / exp2:5.2f}×")


if __name__ == "__main__":
    main()
