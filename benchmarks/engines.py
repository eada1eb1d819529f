"""attnx's engines against PyTorch's SDPA and the written-out torch form, measured in one run.

Usage: python benchmarks/engines.py [--quick]

Prints, for H = 8 heads of d_k = 64 in float32 (the ratios of the performance targets):
  1. weights path  (NumPy engine asked for weights)     vs torch softmax(Q Kᵀ s) V written out
  2. output-only   (NumPy engine asked for output)      vs F.scaled_dot_product_attention
  3. output-only   (torch engine asked for output)      vs F.scaled_dot_product_attention
  4. peak RSS of `attnx run --format npy --tensor output` and of `attnx trace` at N = 16384,
     d_model = 512 (each in a fresh process).
Each side is timed in blocks of back-to-back calls, the blocks of the two sides taken in turn, about
2 s of each side in all (at least 3 blocks). The first call of a block is not counted: it pays for
the other side, whose threads are still busy (torch's OpenMP workers spin for some milliseconds after
each parallel region: attnx's N=1024 output path took 22.2 ms right after SDPA, 19.5 ms on its own)
and whose data filled the caches. Each time is the best counted call; this machine is shared and
noisy, so each ratio is followed by the ratio of the medians, a second view of the same runs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from attnx.engines import compute
from attnx.spec import AttentionSpec

H, D_K = 8, 64
F = torch.nn.functional
BLOCK = 0.2  # seconds of calls per block, at least 2 calls (the first is not counted)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_pair(a: Callable[[], object], b: Callable[[], object], budget: float = 2.0) -> tuple[float, float, float]:
    """Best wall times of ``a`` and of ``b``, and the ratio of their medians, from blocks taken in turn.

    A block repeats one side back to back (about ``BLOCK`` seconds) and drops its first call; the
    number of blocks gives about ``budget`` seconds of each side, at least 3.
    """
    once = {fn: timed(fn) for fn in (a, b)}  # warm-up, and the size of a call
    calls = {fn: max(2, min(50, math.ceil(BLOCK / max(t, 1e-6)))) for fn, t in once.items()}
    blocks = max(3, min(40, math.ceil(budget / max(calls[fn] * t for fn, t in once.items()))))
    times: dict[Callable[[], object], list[float]] = {a: [], b: []}
    for _ in range(blocks):
        for fn in (a, b):
            times[fn] += [timed(fn) for _ in range(calls[fn])][1:]
    ta, tb = times[a], times[b]
    return min(ta), min(tb), statistics.median(ta) / statistics.median(tb)


def problem(n: int) -> tuple[AttentionSpec, list[torch.Tensor]]:
    q, k, v = np.random.default_rng(n).standard_normal((3, n, H * D_K)).astype(np.float32)
    tokens = tuple(map(str, range(n)))
    spec = AttentionSpec(q, k, v, H, tokens, tokens)
    # (1, H, N, d_k): SDPA's fused CPU kernel wants 4-D inputs; 3-D ones take its slow path.
    heads = [torch.from_numpy(x).view(n, H, D_K).transpose(0, 1).contiguous()[None] for x in (q, k, v)]
    return spec, heads


def written_out(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) * (1 / math.sqrt(D_K)), dim=-1) @ v


def gflops(n: int, seconds: float) -> float:
    return 4 * H * n * n * D_K / seconds / 1e9


def peak_rss_mib(args: list[str]) -> float:
    """Peak resident memory (VmHWM) of a fresh `python -m attnx ARGS` process, in MiB.

    VmHWM starts afresh at exec; ru_maxrss would carry over this (large) benchmark process's peak.
    """
    code = (
        "import sys, runpy; sys.argv = ['attnx', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('attnx', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0]\n"
        "sys.stderr.write(hwm.split()[1])"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return int(proc.stderr.strip().splitlines()[-1]) / 1024


def compare(
    title: str,
    sizes: tuple[int, ...],
    engine: str,
    needs: set[str],
    reference: Callable[..., object],
    name: str,
    budget: float,
    faster: bool = False,
) -> None:
    """Print, per N in ``sizes``, attnx's ``engine`` asked for ``needs`` against ``reference`` on the same Q, K, V."""
    print(f"\n{title}")
    for n in sizes:
        spec, tensors = problem(n)
        ours, theirs, ratio = best_pair(
            lambda spec=spec: compute(spec, engine, dtype="float32", needs=needs),
            lambda t=tensors: reference(*t), budget,
        )  # fmt: skip
        if faster:
            verdict = f"{theirs / ours:4.2f}× faster (medians {1 / ratio:4.2f}×)"
        else:
            verdict = f"{ours / theirs:4.2f}× {name}'s time (medians {ratio:4.2f}×)"
        print(
            f"   N={n:5d}: attnx {engine} {ours:7.3f} s ({gflops(n, ours):5.1f} GFLOP/s)  "
            f"{name} {theirs:7.3f} s ({gflops(n, theirs):5.1f} GFLOP/s)  → {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter timing")
    args = parser.parse_args()
    budget = 0.5 if args.quick else 2.0
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}")
    print(f"H={H}, d_k={D_K}, float32")

    sdpa = F.scaled_dot_product_attention
    small = args.quick
    compare(
        "1. weights path: NumPy engine (needs weights) vs torch written out",
        (1024, 2048) if small else (2048, 8192),
        "numpy",
        {"weights"},
        written_out,
        "torch written out",
        budget,
        faster=True,
    )
    compare(
        "2. output only: NumPy engine vs torch SDPA",
        (1024, 2048) if small else (1024, 4096, 8192),
        "numpy",
        {"output"},
        sdpa,
        "SDPA",
        budget,
    )
    compare("3. output only: torch engine vs torch SDPA", (1024, 2048) if small else (1024, 4096, 8192),
            "torch", {"output"}, sdpa, "SDPA", budget)  # fmt: skip

    n = 4096 if args.quick else 16384
    tokens = " ".join(f"w{i}" for i in range(n))
    common = ["--seed", "0", "--tokens", tokens, "--d-model", "512", "-H", "8", "--dtype", "float32"]
    full = H * n * n * 4 / 2**30
    print(f"\n4. peak RSS at N={n}, H=8, d_model=512, float32 (the full weights alone: {full:.1f} GiB)")
    rss = peak_rss_mib(["run", *common, "--format", "npy", "--tensor", "output", "--output", "/dev/null"])
    print(f"   attnx run --format npy --tensor output: {rss:7.0f} MiB")
    rss = peak_rss_mib(["trace", *common, "--query", str(n // 2), "--format", "json"])
    print(f"   attnx trace --query {n // 2}:              {rss:7.0f} MiB")


if __name__ == "__main__":
    main()
