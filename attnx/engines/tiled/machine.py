"""What the tiled kernel needs to know about this CPU, found once per process from public sources."""

from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# NumPy's names for the SIMD level at which it links Intel's SVML, where exp2 is vectorised:
# AVX512_SKX up to NumPy 2.3, X86_V4 from NumPy 2.4.
SVML_LEVELS = frozenset({"AVX512_SKX", "X86_V4"})
DEFAULT_L2 = 1 << 20  # bytes, when the OS does not say


@dataclass(frozen=True)
class Machine:
    """The facts the kernel's choices follow: CPUs this process may use, L2 cache per core, and
    whether NumPy's exp2 is vectorised here (then it takes half of exp's time)."""

    cpus: int
    l2_bytes: int
    exp2_is_fast: bool


@functools.cache
def this_machine() -> Machine:
    """This process's machine, found once (a few file reads; no timing, so every run decides alike)."""
    return Machine(cpus=workers(), l2_bytes=l2_bytes(), exp2_is_fast=exp2_is_fast(simd_found()))


def workers() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def l2_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The L2 cache of one core in bytes, from Linux's sysfs (``DEFAULT_L2`` where it says nothing)."""
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip().upper()
                scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
                return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2


def simd_found() -> frozenset[str]:
    """The SIMD levels NumPy dispatches on in this process (``np.show_config``'s public record; it
    follows ``NPY_DISABLE_CPU_FEATURES``). Empty where this NumPy does not say."""
    try:
        config = np.show_config(mode="dicts")
    except (TypeError, ValueError):  # pragma: no cover - NumPy before 1.26 has no dicts mode
        return frozenset()
    simd = config.get("SIMD Extensions", {}) if isinstance(config, dict) else {}
    return frozenset(simd.get("found", ())) | frozenset(simd.get("baseline", ()))


def exp2_is_fast(found: frozenset[str], system: str = sys.platform, arch: str = platform.machine()) -> bool:
    """Whether NumPy's exp2 runs vectorised here, where it takes about half of exp's time.

    NumPy builds exp2 with Intel's SVML for CPUs with AVX-512 (Skylake-X level), on Linux x86-64
    only. On a Zen 4 core exp takes 2.1× exp2's time in float32; with that level switched off
    (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``) exp2 is a scalar loop and exp
    takes 0.48× its time (``benchmarks/exp_base.py``). The choice follows the machine alone,
    never a timing, so a machine gives the same bits every run.

    Without AVX-512 the exp paths keep NumPy's exp, which is vectorised on AVX2 (NumPy's X86_V3
    loop). On an AMD EPYC Zen 3 (AVX2 only, NumPy 2.4.6) it took 1.3-2.4 ns per float32 element
    (that loop loads and stores every vector masked, which Zen executes slowly) and exp2 1.5-1.7×
    as long; 2^x composed of 17 vectorised ufunc passes (a degree-5 polynomial, the exponent put in
    through the bits; within 2.6 ulp) took 1.4-2.7× as long as exp, for every chunk size tried
    (``benchmarks/exp_base.py``): a NumPy ufunc call costs about 1 µs there and each pass 0.1-0.2
    ns per element, so no composition beats the one loop.
    """
    on_linux_x86 = system == "linux" and arch.lower() in {"x86_64", "amd64"}
    return on_linux_x86 and bool(SVML_LEVELS & found)
