"""Which exp the tiled kernel should take on this CPU: exp, exp2, or an exp built from vectorised ufuncs.

Usage: python benchmarks/exp_base.py

e^x = 2^(x·log2 e), and the factor log2 e costs nothing once folded into the queries' multiplier,
so the exp paths may take either ufunc. Prints, interleaved in one run, best times of:
  1. np.exp against np.exp2 on a 512 × 2048 tile of scores (a weights-path tile) in float32 and
     float64, their ratio, and which one attnx takes here (`attnx.engines.tiled.current_plan().exp2`);
  2. np.exp against 2^t composed of vectorised ufuncs on an output-path tile (1024 × 128, float32,
     512 KiB): t = n + f with n = floor(t), a degree-5 polynomial for 2^f on [0, 1) in Horner form,
     2^n made from n's bits; 17 passes over each chunk, in chunks of a few sizes; and that
     composition's largest error in float32 ulps over the whole argument range.
It names the CPU and the loop NumPy dispatches for float32 exp and exp2 (NumPy 2's
`numpy.lib.introspect.opt_func_info`): X86_V3 is an AVX2 loop, X86_V4 an AVX-512 (SVML) one,
baseline a scalar one. To see the other case on an AVX-512 CPU:
NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" (NumPy 2.4's names).
"""

from __future__ import annotations

import functools
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnx.engines.tiled import current_plan

SHAPE = (512, 2048)
OUTPUT_TILE = (1024, 128)
CHUNKS = (8192, 32768, 131072)
MAGIC = np.float32(1.5 * 2**23 + 127)  # n + MAGIC holds n + 127 in its low bits, for |n| < 2^22


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def dispatched(name: str) -> str:
    """The SIMD target of NumPy's float32 loop for ufunc ``name`` here ("unknown" before NumPy 2)."""
    try:
        from numpy.lib.introspect import opt_func_info
    except ImportError:
        return "unknown"
    info = opt_func_info(func_name=f"^{name}$", signature="float32").get(name, {})
    return str(info.get("ff", {}).get("current", "unknown"))


def best(fns: dict[str, Callable[[], object]], calls: int = 5, rounds: int = 9) -> dict[str, float]:
    """The best time per call of each of ``fns``, timed in interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name] += timeit.repeat(fn, number=calls, repeat=1)
    return {name: min(kept) / calls for name, kept in times.items()}


def exp_or_exp2() -> None:
    """Section 1: np.exp against np.exp2 on a weights-path tile."""
    print(f"\n1. tile {SHAPE[0]} × {SHAPE[1]}; attnx takes {'exp2' if current_plan().exp2 else 'exp'}")
    print(f"{'dtype':>8s} {'exp':>10s} {'exp2':>10s}  exp / exp2")
    for dtype in (np.float32, np.float64):
        scores = np.random.default_rng(0).uniform(-10, 10, SHAPE).astype(dtype)
        out = np.empty_like(scores)
        ufuncs = {"exp": np.exp, "exp2": np.exp2}
        times = best({name: functools.partial(fn, scores, out=out) for name, fn in ufuncs.items()})
        exp, exp2 = times["exp"], times["exp2"]
        print(f"{np.dtype(dtype).name:>8s} {exp * 1e6:8.1f}µs {exp2 * 1e6:8.1f}µs  {exp / exp2:5.2f}×")


def coefficients(degree: int = 5) -> list[np.float32]:
    """A polynomial for 2^f on [0, 1), lowest power first: least relative error at Chebyshev nodes."""
    f = (1 + np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)) / 2
    powers = np.vander(f, degree + 1, increasing=True) / np.exp2(f)[:, None]
    c, *_ = np.linalg.lstsq(powers, np.ones_like(f), rcond=None)
    return [np.float32(value) for value in c]


def composed_exp2(t: np.ndarray, chunk: int, c: list[np.float32]) -> np.ndarray:
    """2^t in place for float32 ``t`` (rows, cols), a chunk of rows at a time: 17 ufunc passes per chunk.

    Exact to the polynomial for results of 2^-126 or more; 0 below; inf from t = 128 on; NaN stays NaN.
    """
    rows, cols = t.shape
    step = max(1, chunk // cols)
    a, p, low, high = np.empty((4, step, cols), np.float32)
    low[:], high[:] = -127, 128  # a scalar bound takes NumPy's slow path: 0.6-0.9 ns an element here, an array 0.2
    for start in range(0, rows, step):
        x = t[start : start + step]
        n, poly, bits = a[: len(x)], p[: len(x)], a[: len(x)].view(np.int32)
        np.maximum(x, low[: len(x)], out=x)  # 2^-127 and below: 0
        np.minimum(x, high[: len(x)], out=x)  # 2^128 and above: inf
        np.floor(x, out=n)
        np.subtract(x, n, out=x)  # f in [0, 1)
        np.add(n, MAGIC, out=n)
        np.left_shift(bits, 23, out=bits)  # (n + 127) << 23: 2^n, 0 for n = -127, inf for n = 128
        np.multiply(x, c[5], out=poly)
        np.add(poly, c[4], out=poly)
        for k in (3, 2, 1, 0):
            np.multiply(poly, x, out=poly)
            np.add(poly, c[k], out=poly)
        np.multiply(poly, n, out=x)
    return t


def composed_error(c: list[np.float32]) -> tuple[float, float]:
    """The composition's largest error over t in [-130, 130]: in float32 ulps of 2^t where 2^t is a
    normal float32, and in absolute value where it is below 2^-126."""
    t = np.linspace(-130, 130, 4_000_001, dtype=np.float32)
    ours = composed_exp2(t[None, :].copy(), 1 << 15, c)[0].astype(np.float64)
    exact = np.exp2(t.astype(np.float64))
    normal = (exact >= 2.0**-126) & (exact < np.finfo(np.float32).max)
    ulp = np.spacing(exact[normal].astype(np.float32)).astype(np.float64)
    tiny = ~normal & (exact < 1)
    return float(np.max(np.abs(ours[normal] - exact[normal]) / ulp)), float(np.max(np.abs(ours - exact)[tiny]))


def exp_or_composed() -> None:
    """Section 2: np.exp against 2^t made of vectorised ufuncs, on an output-path tile."""
    c = coefficients()
    scores = np.random.default_rng(0).normal(0, 1.5, OUTPUT_TILE).astype(np.float32)
    tile = np.empty_like(scores)

    def fresh() -> np.ndarray:
        np.copyto(tile, scores)  # each call starts from the same scores
        return tile

    fns: dict[str, Callable[[], object]] = {"copy": fresh, "np.exp": lambda: np.exp(fresh(), out=tile)}
    for chunk in CHUNKS:
        fns[f"chunk {chunk}"] = functools.partial(lambda size: composed_exp2(fresh(), size, c), chunk)
    times = best(fns)
    copy, size = times.pop("copy"), scores.size
    print(f"\n2. tile {OUTPUT_TILE[0]} × {OUTPUT_TILE[1]} float32, ns an element (the copy before each call taken off)")
    reference = times["np.exp"] - copy
    for name, seconds in times.items():
        print(f"   {name:12s} {(seconds - copy) / size * 1e9:6.2f} ns  ({(seconds - copy) / reference:4.2f}× np.exp)")
    ulps, below = composed_error(c)
    print(f"   composed 2^t: at most {ulps:.2f} ulp where 2^t ≥ 2^-126; below, off by at most {below:.1e}")


def main() -> None:
    print(f"numpy {np.__version__}; CPU {cpu_name()}")
    print(f"float32 loops NumPy dispatches here: exp {dispatched('exp')}, exp2 {dispatched('exp2')}")
    exp_or_exp2()
    exp_or_composed()


if __name__ == "__main__":
    main()
