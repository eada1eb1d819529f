"""`attnx bench`: timing engines over sequence lengths (random Q/K/V), with FLOP rates and ratios."""

from __future__ import annotations

import functools
import math
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attnx.core.spec import AttentionSpec
from attnx.core.tensors import OUTPUT, WEIGHTS, TensorName
from attnx.engines import check_caps, compute, load_engine
from attnx.engines.arrays import host_dtype
from attnx.errors import EngineUnavailableError
from attnx.io.schema import random_qkv
from attnx.limits import Limits

# A side whose run takes less (in seconds) runs once untimed before each timed run (see best_times).
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}  # bytes per number, for the weights' memory
SETTLE = 0.5
# Each path is named after the largest tensor it builds.
PATHS: dict[str, frozenset[TensorName]] = {OUTPUT: frozenset({OUTPUT}), WEIGHTS: frozenset({WEIGHTS, OUTPUT})}


@dataclass(frozen=True)
class BenchRow:
    """One engine at one length: best time, memory, throughput and ratios.

    ``matrix_mib`` is what the full H × N × N weights would take (as the textbook's table counts
    memory); ``peak_mib`` the peak of what the engine allocated where it can be traced (NumPy), else
    None. ``vs_previous`` is the time ratio to the previous length; ``vs_sdpa`` the time ratio to bare
    torch SDPA on the same input (None without torch).
    """

    engine: str
    length: int
    seconds: float
    matrix_mib: float
    peak_mib: float | None
    gflops: float
    vs_previous: float | None
    vs_sdpa: float | None


@dataclass(frozen=True)
class BenchSettings:
    """What is timed: sizes, engines, dtype, which path, and how many repeats (the best counts)."""

    lengths: Sequence[int]
    heads: int = 8
    d_model: int = 512
    engines: Sequence[str] = ("numpy",)
    dtype: str = "float32"
    path: str = OUTPUT
    repeat: int = 3


def problem(length: int, heads: int, d_model: int, dtype: str = "float64") -> AttentionSpec:
    """Random Q/K/V of ``length`` tokens in ``dtype`` (seed = length, so runs are comparable).

    In the timed dtype from the start, as SDPA's inputs are: a conversion would be timed on one side only.
    """
    # A half type has no NumPy dtype: float32 values then, which the torch engine rounds as it reads them (timed).
    q, k, v = (x.astype(host_dtype(dtype)) for x in random_qkv(length, length, d_model))
    tokens = tuple(f"t{i}" for i in range(length))
    return AttentionSpec.build(
        q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=tokens, source=f"random N={length}"
    )


def best_times(runs: Sequence[Callable[[], object]], repeat: int, settle: Sequence[bool] | None = None) -> list[float]:
    """Best wall time of each of ``runs``, timed in ``repeat`` rounds in which each runs in turn.

    Taking turns spreads a busy spell of a shared machine over every side, so ratios between them
    hold better than with each side's runs back to back. But a run right after another side pays
    for it: that side's worker threads still spin for a while (torch's OpenMP pool, OpenBLAS's),
    and its data fills the caches. A side marked in ``settle`` runs once untimed before each timed
    run; ``run_bench`` marks those shorter than ``SETTLE``, beside which the toll is large.
    """
    settle = settle or [False] * len(runs)
    best = [math.inf] * len(runs)
    for _ in range(max(1, repeat)):
        for i, (run, untimed) in enumerate(zip(runs, settle, strict=True)):
            if untimed:
                run()
            best[i] = min(best[i], timed(run))
    return best


def timed(run: Callable[[], object]) -> float:
    """Wall time of one call of ``run``, in seconds."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def traced_peak_mib(run: Callable[[], object]) -> float:
    """Peak of the memory allocations tracemalloc can see (NumPy's) during one run, in MiB."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run_bench(
    settings: BenchSettings, progress: Callable[[str], None] | None = None, *, limits: Limits | None = None
) -> list[BenchRow]:
    """Time every engine at every length; ``progress`` is told what is about to run.

    Each engine's run goes through ``compute``, checked against ``limits`` (None: the defaults replaced by
    ``ATTNX_MAX_*``): the weights path at H = 8, N = 2048 holds 32 Mi elements, over the default cap.
    """
    needs = PATHS[settings.path]
    limits = Limits.from_env() if limits is None else limits
    for length in settings.lengths:  # every size before any is timed
        check_caps(problem(length, settings.heads, settings.d_model, settings.dtype), needs=needs, limits=limits)
    sdpa = _sdpa_factory()
    rows: list[BenchRow] = []
    for length in settings.lengths:
        spec = problem(length, settings.heads, settings.d_model, settings.dtype)
        sides = {"torch SDPA": sdpa(spec, settings.dtype)} if sdpa is not None else {}
        sides |= {
            engine: functools.partial(compute, spec, engine, dtype=settings.dtype, needs=needs, limits=limits)
            for engine in settings.engines
        }
        warm_up = []
        for label, run in sides.items():
            if progress:
                progress(f"{label}, N={length}")
            warm_up.append(timed(run))  # and how long one run takes
        settle = [seconds < SETTLE for seconds in warm_up]
        times = dict(zip(sides, best_times(list(sides.values()), settings.repeat, settle), strict=True))
        reference = times.get("torch SDPA")
        for engine in settings.engines:
            seconds, run = times[engine], sides[engine]
            previous = next((r for r in reversed(rows) if r.engine == engine), None)
            itemsize = ITEMSIZE[settings.dtype]
            rows.append(
                BenchRow(
                    engine=engine,
                    length=length,
                    seconds=seconds,
                    matrix_mib=settings.heads * length * length * itemsize / 2**20,
                    peak_mib=traced_peak_mib(run) if load_engine(engine).traced else None,
                    gflops=4 * length * length * settings.d_model / seconds / 1e9,
                    vs_previous=seconds / previous.seconds if previous else None,
                    vs_sdpa=seconds / reference if reference else None,
                )
            )
    return rows


def _sdpa_factory() -> Callable[[AttentionSpec, str], Callable[[], object]] | None:
    """torch's bare-SDPA reference, where torch is installed."""
    try:
        return load_engine("torch").sdpa_reference
    except EngineUnavailableError:
        return None
