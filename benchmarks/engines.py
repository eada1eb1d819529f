"""attnx's engines against PyTorch's SDPA and the written-out torch form, measured in one run.

Usage: python benchmarks/engines.py [--quick] [--output-only]

To time an AVX2-only CPU on an AVX-512 one, run it under
  NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
(NumPy 2.4 names its AVX-512 level X86_V4: the older names AVX512F ... AVX512_SPR alone leave exp2 vectorised).

Prints, for H = 8 heads of d_k = 64 in float32 (the ratios of the performance targets):
  1. weights path  (NumPy engine asked for weights)     vs torch softmax(Q Kᵀ s) V written out
  2. output-only   (NumPy engine asked for output)      vs F.scaled_dot_product_attention
  3. output-only   (torch engine asked for output)      vs F.scaled_dot_product_attention
  4. peak RSS of `attnx run --format npy --tensor output` and of `attnx trace` at N = 16384,
     d_model = 512 (each in a fresh process).
SDPA is timed on two forms of the same Q, K and V: the (1, H, N, d_k) views of the [token, H·d_k]
arrays that attnx is given (what a model passes, nanoGPT's `view(B, T, nh, hs).transpose(1, 2)`,
and what the torch engine passes), and head-major copies made before the timing (its best layout).

The sides are timed in rounds, each side in turn, about 2 s of each in all and at least 5 rounds.
A side whose call is shorter than LONG runs a block of back-to-back calls per round and its first
call is not counted: it pays for the side before, whose threads are still busy (torch's OpenMP
workers spin for some milliseconds after each parallel region: attnx's N=1024 output path took
22.2 ms right after SDPA, 19.5 ms on its own) and whose data filled the caches. Longer calls
count from the first, that toll being under 1% of them. Each time is the best counted call; this
machine is shared and noisy, so each ratio is followed by the ratio of the medians, a second view
of the same runs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import torch

from attnx.analysis.bench import timed
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.engines.tiled import current_plan

H, D_K = 8, 64
F = torch.nn.functional
BLOCK = 0.2  # seconds of calls per block, at least 2 calls (the first is not counted)
LONG = 0.5  # seconds: a call this long is timed alone, and counted
ROUNDS = 5  # at least this many rounds


def best_times(fns: list[Callable[[], object]], budget: float = 2.0) -> list[tuple[float, float]]:
    """The best and the median wall time of each of ``fns``, timed in rounds in which each takes its turn.

    In a round a short call repeats back to back for about ``BLOCK`` seconds, its first call not
    counted; a call of ``LONG`` seconds or more runs once, counted. The rounds give about
    ``budget`` seconds of each side, and at least ``ROUNDS``.
    """
    once = [timed(fn) for fn in fns]  # warm-up, and the size of a call
    plans = [(1, 0) if t >= LONG else (max(2, min(50, math.ceil(BLOCK / max(t, 1e-6)))), 1) for t in once]
    longest = max(calls * t for (calls, _), t in zip(plans, once, strict=True))
    rounds = max(ROUNDS, min(40, math.ceil(budget / longest)))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, (calls, dropped), kept in zip(fns, plans, times, strict=True):
            kept += [timed(fn) for _ in range(calls)][dropped:]
    return [(min(kept), statistics.median(kept)) for kept in times]


def problem(n: int) -> tuple[AttentionSpec, dict[str, list[torch.Tensor]]]:
    """A random Q, K, V of N tokens: attnx's spec, and the (1, H, N, d_k) forms torch is timed on."""
    q, k, v = np.random.default_rng(n).standard_normal((3, n, H * D_K)).astype(np.float32)
    tokens = tuple(map(str, range(n)))
    spec = AttentionSpec.build(q=q, k=k, v=v, heads=H, tokens=tokens, key_tokens=tokens)
    # 4-D: SDPA's fused CPU kernel wants them; 3-D inputs take its slow path.
    views = [torch.from_numpy(x).view(n, H, D_K).transpose(0, 1)[None] for x in (q, k, v)]  # (1, H, N, d_k)
    return spec, {"views": views, "head-major": [t.contiguous() for t in views]}


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


Reference = tuple[str, Callable[..., object], str]  # (label, function of Q, K, V, "views" or "head-major")


def compare(
    title: str,
    sizes: tuple[int, ...],
    engine: str,
    needs: set[str],
    references: list[Reference],
    budget: float,
    faster: bool = False,
) -> None:
    """Print, per N in ``sizes``, attnx's ``engine`` asked for ``needs`` against each reference on the same Q, K, V."""
    print(f"\n{title}")
    for n in sizes:
        spec, forms = problem(n)
        calls = [lambda spec=spec: compute(spec, engine, dtype="float32", needs=needs)]
        calls += [lambda fn=fn, t=forms[form]: fn(*t) for _, fn, form in references]
        (ours, ours_median), *theirs = best_times(calls, budget)
        print(f"   N={n:5d}: attnx {engine:5s} {ours:8.4f} s ({gflops(n, ours):5.1f} GFLOP/s)")
        for (label, _, _), (best, median) in zip(references, theirs, strict=True):
            if faster:
                verdict = f"attnx {best / ours:4.2f}× faster (medians {median / ours_median:4.2f}×)"
            else:
                verdict = f"attnx {ours / best:4.2f}× its time (medians {ours_median / median:4.2f}×)"
            print(f"            {label:25s} {best:8.4f} s ({gflops(n, best):5.1f} GFLOP/s)  → {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter timing")
    parser.add_argument("--output-only", action="store_true", help="section 2 alone (NumPy output path vs SDPA)")
    args = parser.parse_args()
    budget = 0.5 if args.quick else 2.0
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}")
    plan = current_plan()
    print(f"H={H}, d_k={D_K}, float32; NumPy engine plan: {plan.cpus} CPUs, exp{'2' if plan.exp2 else ''}")

    sdpa = F.scaled_dot_product_attention
    references: list[Reference] = [
        ("SDPA on the same views", sdpa, "views"),
        ("SDPA on head-major copies", sdpa, "head-major"),
    ]
    small = args.quick
    sizes = (1024, 2048) if small else (1024, 4096, 8192)
    if args.output_only:
        compare("2. output only: NumPy engine vs torch SDPA", sizes, "numpy", {"output"}, references, budget)
        return
    compare(
        "1. weights path: NumPy engine (needs weights) vs torch written out",
        (1024, 2048) if small else (2048, 8192),
        "numpy",
        {"weights"},
        [("torch written out", written_out, "head-major")],
        budget,
        faster=True,
    )
    compare("2. output only: NumPy engine vs torch SDPA", sizes, "numpy", {"output"}, references, budget)
    compare("3. output only: torch engine vs torch SDPA", sizes, "torch", {"output"}, references, budget)

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
