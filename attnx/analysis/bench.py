"""`attnx bench`: timing engines over sequence lengths (random Q/K/V), with FLOP rates and ratios."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attnx.engines import compute, load_engine
from attnx.errors import EngineUnavailableError
from attnx.io.schema import random_qkv
from attnx.spec import AttentionSpec

PATHS = {"output": frozenset({"output"}), "weights": frozenset({"weights", "output"})}


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
    path: str = "output"
    repeat: int = 3


def problem(length: int, heads: int, d_model: int) -> AttentionSpec:
    """Random Q/K/V of ``length`` tokens (seed = length, so runs are comparable)."""
    q, k, v = random_qkv(length, length, d_model)
    tokens = tuple(f"t{i}" for i in range(length))
    return AttentionSpec(q, k, v, heads, tokens, tokens, source=f"random N={length}")


def best_time(run: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` runs after one warm-up run."""
    run()
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def traced_peak_mib(run: Callable[[], object]) -> float:
    """Peak of the memory allocations tracemalloc can see (NumPy's) during one run, in MiB."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run_bench(settings: BenchSettings, progress: Callable[[str], None] | None = None) -> list[BenchRow]:
    """Time every engine at every length; ``progress`` is told what is about to run."""
    needs = PATHS[settings.path]
    sdpa = _sdpa_factory()
    rows: list[BenchRow] = []
    for length in settings.lengths:
        spec = problem(length, settings.heads, settings.d_model)
        reference = None
        if sdpa is not None:
            if progress:
                progress(f"torch SDPA, N={length}")
            reference = best_time(sdpa(spec, settings.dtype), settings.repeat)
        for engine in settings.engines:
            if progress:
                progress(f"{engine}, N={length}")

            def run(engine: str = engine, spec: AttentionSpec = spec) -> object:
                return compute(spec, engine, dtype=settings.dtype, needs=needs)

            seconds = best_time(run, settings.repeat)
            previous = next((r for r in reversed(rows) if r.engine == engine), None)
            itemsize = 4 if settings.dtype == "float32" else 8
            rows.append(
                BenchRow(
                    engine=engine,
                    length=length,
                    seconds=seconds,
                    matrix_mib=settings.heads * length * length * itemsize / 2**20,
                    peak_mib=traced_peak_mib(run) if engine == "numpy" else None,
                    gflops=4 * length * length * settings.d_model / seconds / 1e9,
                    vs_previous=seconds / previous.seconds if previous else None,
                    vs_sdpa=seconds / reference if reference else None,
                )
            )
    return rows


def _sdpa_factory() -> Callable[[AttentionSpec, str], Callable[[], object]] | None:
    """torch's bare-SDPA reference, where torch is installed."""
    try:
        return load_engine("torch").sdpa_reference  # type: ignore[no-any-return]
    except EngineUnavailableError:
        return None
