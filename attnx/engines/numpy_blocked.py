"""NumPy attention in cache-sized tiles spread over threads, for inputs too large to compute in one piece.

Each head's scores are made one tile of query rows at a time, and a tile stays in the CPU's cache
from the matmul that writes it, through the softmax passes, to the matmul that reads it. Two
paths, both exact up to rounding:

- ``weights``: when any H × N × M matrix is asked for. A task takes a block of query rows and
  walks the heads; each head's ``rows × M`` tile is made in scratch and written, once, where it
  is kept (the task owns its rows of the head average too).
- ``output``: when only head outputs are needed. A task takes one block of rows of one head and
  walks the keys in tiles: no H × N × M array, nor one query row's full scores, ever exists.

Neither takes a max pass before exp. The score scale s is folded into Q, and c_i = ‖q_i·s‖·max_j ‖k_j‖
bounds every scaled score of row i (Cauchy–Schwarz). While c_i leaves the dtype room (e^c_i times
M times max |v| stays finite, e^−c_i above the smallest trusted denominator), exp is taken as it
is. Otherwise each score of row i is shifted by c_i first, so exp never overflows; c_i does not
depend on the key, so the tiles of one row share it and their sums add up without rescaling.
Each row's denominator is the exp tile times a vector of ones. Rows whose denominator underflows
(c_i far above the true maximum, or every key masked) are recomputed exactly, with the true row
maximum. When raw or scaled scores are asked for, the tiles are scaled and softmaxed with the
textbook max shift.

Where NumPy's exp2 is vectorized (``exp2_is_fast``) the exp paths work in base 2: Q is scaled by
s·log2(e) and the tiles take exp2, which costs half as much as exp, since 2^(x·log2 e) = e^x.

Tasks run on the calling thread and on helper threads kept for the process, with BLAS limited to
one thread each (threadpoolctl): NumPy releases the GIL in matmul and in ufuncs, so the softmax
passes run in parallel too.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import platform
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from attnx.spec import AttentionSpec, largest_abs

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

Task = TypeVar("Task")
Buffers = TypeVar("Buffers")

# Query rows per task. On the output path one tile is rows × (KEY_TILE_BYTES / (rows · itemsize))
# keys: OUTPUT_ROWS × 256 in float32, or CAUSAL_ROWS × 512 under a causal mask, where a block of r
# rows also scores the r²/2 keys past the diagonal that the mask then blocks. On the weights path a
# head's tile is rows × M, made in scratch and written once: WEIGHT_ROWS rows, or fewer to keep the
# tile within WEIGHT_TILE_BYTES (512 rows at M = 2048, 256 at M = 8192 in float32). These were the
# fastest sizes measured on a 2-core machine with 1 MiB of L2 per core and 32 MiB of L3.
OUTPUT_ROWS = 1024
CAUSAL_ROWS = 512
WEIGHT_ROWS = 512
WEIGHT_TILE_BYTES = 8 << 20
KEY_TILE_BYTES = 1 << 20
ROW_STEP = 8  # task sizes are multiples of this
# Rows at least this long are combined with one value per row with NumPy's buffer cut to a row (by_row).
LONG_ROW = 256
# A denominator below this means the shift c_i overshot the row's true maximum by too much to trust.
TINY = {np.dtype(np.float32): 1e-30, np.dtype(np.float64): 1e-280}


def block_rows(rows: int, queries: int) -> int:
    """``rows`` query rows per task, or fewer, so that every CPU has a task (a multiple of ``ROW_STEP``)."""
    share = -(-queries // workers())
    return max(ROW_STEP, min(rows, -(-share // ROW_STEP) * ROW_STEP))


def output_rows(queries: int, heads: int, largest: int) -> int:
    """Query rows per task on the output path (a multiple of ``ROW_STEP``): ``queries`` cut into the
    fewest blocks of equal size, at most ``largest`` rows, whose tasks (one per block and head) keep
    the CPUs busy to the end.

    The CPUs take the tasks in rounds; the last round may leave some of them idle. Blocks are cut
    finer until that idle time is at most 1/8 of all the CPU time (8 heads on 2 CPUs: whole heads;
    3 heads: halves).
    """
    cpus, blocks = workers(), -(-queries // largest)
    while True:
        share = -(-queries // blocks)  # rows per block, rounded up to a multiple of ROW_STEP
        rows = max(ROW_STEP, -(-share // ROW_STEP) * ROW_STEP)
        tasks = -(-queries // rows) * heads
        rounds = -(-tasks // cpus)
        if rows == ROW_STEP or 8 * tasks >= 7 * cpus * rounds:
            return rows
        blocks += 1


def weight_rows(keys: int, itemsize: int) -> int:
    """Query rows per task on the weights path: ``WEIGHT_ROWS``, or fewer so that a ``rows × keys`` tile
    takes at most ``WEIGHT_TILE_BYTES`` (a multiple of ``ROW_STEP``)."""
    return max(ROW_STEP, min(WEIGHT_ROWS, WEIGHT_TILE_BYTES // (keys * itemsize) // ROW_STEP * ROW_STEP))


def key_tile(rows: int, itemsize: int) -> int:
    """Keys per tile on the output path: one ``rows × keys`` tile takes about ``KEY_TILE_BYTES``."""
    return max(ROW_STEP, KEY_TILE_BYTES // (rows * itemsize) // ROW_STEP * ROW_STEP)


def workers() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@functools.cache
def exp2_is_fast() -> bool:
    """Whether NumPy's exp2 runs vectorized here, where it takes about half of exp's time.

    NumPy builds exp2 with Intel's SVML for CPUs with AVX-512 (Skylake-X level: AVX512_SKX, which
    NumPy 2.4 calls X86_V4), on Linux x86-64 only. On a Zen 4 core exp takes 1.8-2.2× exp2's time
    in float32 and 1.15-1.2× in float64; with X86_V4 switched off (``NPY_DISABLE_CPU_FEATURES``)
    exp2 is a scalar loop and exp takes 0.63× its time (``benchmarks/exp_base.py``). The choice
    depends on the machine alone, never on a timing, so a machine gives the same bits every run.
    """
    on_linux_x86 = sys.platform == "linux" and platform.machine().lower() in {"x86_64", "amd64"}
    return on_linux_x86 and bool(cpu_features().get("AVX512_SKX", False))


def cpu_features() -> dict[str, bool]:
    """The CPU features NumPy found and dispatches on (empty if this NumPy does not say)."""
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):  # NumPy 2, then NumPy 1.x
        try:
            features = importlib.import_module(name).__cpu_features__
        except (ImportError, AttributeError):  # pragma: no cover - another NumPy
            continue
        return dict(features)
    return {}


@functools.cache
def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, built once (building it takes about 1 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def row_blocks(n: int, rows: int) -> list[slice]:
    """``range(n)`` in slices of ``rows``."""
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


def run_tasks(work: Callable[[Task], None], tasks: Sequence[Task]) -> None:
    """Call ``work`` on every task, in order, on as many threads as there are CPUs.

    The calling thread works too, beside helper threads that live as long as the process: starting
    threads for every call costs milliseconds on a machine whose cores are busy. A helper that wakes
    late finds fewer tasks left, so many small tasks absorb its delay. After an exception (or
    Ctrl-C) no new task starts; the first exception is raised once every thread has stopped.
    """
    threads = min(workers(), len(tasks))
    if threads <= 1:
        for task in tasks:
            work(task)
        return
    pending = iter(tasks)
    lock, failed = threading.Lock(), threading.Event()
    errstate = np.geterr()  # np.errstate is per thread: the helpers take the caller's

    def drain() -> None:
        with np.errstate(**errstate):
            while not failed.is_set():
                with lock:
                    task = next(pending, None)
                if task is None:
                    return
                try:
                    work(task)
                except BaseException:
                    failed.set()
                    raise

    with _blas_controller().limit(limits=1, user_api="blas"):
        helpers = [_helpers().submit(drain) for _ in range(threads - 1)]
        try:
            drain()
        finally:
            for helper in helpers:
                helper.exception()  # wait for it: no helper outlives the BLAS limit
        for helper in helpers:
            helper.result()  # re-raises a helper's exception


@functools.cache
def _helpers() -> ThreadPoolExecutor:
    """The helper threads, started on first use and kept: one fewer than the CPUs."""
    from concurrent.futures import ThreadPoolExecutor  # imported here: small inputs never need threads

    return ThreadPoolExecutor(max(1, workers() - 1), thread_name_prefix="attnx")


def by_row(op: np.ufunc, x: np.ndarray, column: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``op(x, column, out=out)`` for rows ``x`` (..., cols) and one value per row, ``column`` (..., 1).

    A ufunc loop takes up to NumPy's buffer size (8192 elements) at a time. When rows are shorter,
    NumPy first copies each row's value across a buffer, which made a 256 × 2048 float32 multiply
    take 1.5-2× as long. With the buffer no longer than a row, the loop reads each row's value as a
    scalar. Rows shorter than ``LONG_ROW`` lose more to the extra loop turns than they gain.
    """
    cols = x.shape[-1]
    if cols < LONG_ROW or cols >= np.getbufsize():
        return op(x, column, out=out)
    with np.errstate():  # np.setbufsize holds until this scope ends
        np.setbufsize(cols // 16 * 16)  # NumPy takes multiples of 16
        return op(x, column, out=out)


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


def attend_blocked(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, keep: frozenset[str]
) -> dict[str, np.ndarray]:
    """Head outputs, plus the matrices in ``keep``, from split heads ``q`` (H,N,d_k), ``k``/``v`` (H_kv,M,d_k)."""
    wanted = keep & {"scores", "scaled", "weights", "average_weights"}
    operands = _Operands(q, k, v, spec, exp_paths=not {"scores", "scaled"} & wanted)
    if wanted:
        return _weights_path(operands, wanted)
    return {"head_outputs": _output_path(operands)}


def _unit_stride(x: np.ndarray) -> np.ndarray:
    """``x``, or a copy of it whose last axis is contiguous: BLAS reads only such matrices."""
    return x if x.strides[-1] == x.itemsize else np.ascontiguousarray(x)


class _Operands:
    """Q, K and V as the tiles read them, and the bounds the exp paths need; shared read-only by every task.

    The tiles read Q, K and V where they are (BLAS takes K transposed), copying one only when its
    last axis is strided, as with the interleaved layout. Query head h reads K/V head ``h // group``.
    On the exp paths (``exp_paths``), max_j ‖k_j‖ per K/V head and max |v| are measured first: with
    each query's norm, they bound every score and every sum (see ``queries``). There, scores are
    taken in the base of ``exp``: e, or 2 where exp2 is fast (``exp2_is_fast``).
    """

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, *, exp_paths: bool) -> None:
        h, (h_kv, m, _), dtype = q.shape[0], k.shape, q.dtype
        self.q, self.k, self.v, self.spec = _unit_stride(q), _unit_stride(k), _unit_stride(v), spec
        self.group, self.dtype, self.tiny = h // h_kv, dtype, TINY[dtype]
        self.multiplier, self.exp_paths = dtype.type(spec.multiplier), exp_paths
        self.exp: np.ufunc = np.exp
        if not exp_paths:
            return
        # Scores in base 2 are the natural ones times log2 e: folded into the queries' multiplier.
        self.exp, unit = (np.exp2, 1 / math.log(2)) if exp2_is_fast() else (np.exp, 1.0)
        self.exp_multiplier = dtype.type(spec.multiplier * unit)
        with np.errstate(over="ignore"):  # an overflow to inf only sends rows to the shifted path
            k_norm = np.sqrt(np.einsum("hmd,hmd->hm", self.k, self.k).max(axis=-1))  # (H_kv,): max_j ‖k_j‖
        self.k_norm = k_norm.repeat(self.group)  # (H,), per query head
        # Unshifted, exp(q·k·s) ≤ e^c: sums of M such terms times |v| stay finite, and a row's
        # denominator (≥ e^-c, its largest term) above `tiny`, while c is at most this.
        v_peak = largest_abs(self.v)
        headroom = math.log(np.finfo(dtype).max) - math.log(m) - math.log(max(v_peak, 1.0))
        self.unshifted_up_to = (min(-math.log(self.tiny), headroom) - 1) * unit if math.isfinite(v_peak) else -math.inf

    def queries(self, head: int, rows: slice, scratch: _Scratch) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows of query ``head`` scaled by s, in the base of ``exp`` (b, d_k, in scratch), and the
        shift to take from their scores before ``exp``: None, or c (b, 1).

        c_i = ‖q_i·s‖·max_j ‖k_j‖ bounds |q_i·k_j·s| (Cauchy–Schwarz). While every c_i of the rows is
        within ``unshifted_up_to``, exp(q_i·k_j·s) can be taken as it is. Otherwise the scores are
        shifted by c_i: q_i·k_j·s − c_i ≤ 0, so exp never overflows; c_i does not depend on the key,
        so the key tiles of a row share it and their sums add up without rescaling.
        """
        scaled = np.multiply(self.q[head, rows], self.exp_multiplier, out=scratch.queries[: rows.stop - rows.start])
        with np.errstate(over="ignore"):
            c = np.sqrt(np.einsum("bd,bd->b", scaled, scaled)) * self.k_norm[head]  # (b,)
        return scaled, None if c.max() <= self.unshifted_up_to else c[:, None]  # `<=` is False for inf and NaN

    def blocked(self, rows: slice) -> _Blocked | None:
        """The keys ``rows`` may not attend, tile by tile (None: every key is open)."""
        spec = self.spec
        if spec.mask is not None or spec.padding is not None:
            allowed = spec.allowed(rows)
            assert allowed is not None  # a mask or padding: allowed() builds the rows
            return _Blocked(full=~allowed)
        if spec.causal:
            return _Blocked(positions=spec.positions[rows, None])
        return None

    def head_outputs(self) -> np.ndarray:
        """An empty (H, N, d_k) array for the head outputs, stored token by token as the concatenated
        output is (contiguous layout): concatenating the heads is then a view, not a copy."""
        h, n, d_k = self.q.shape
        if self.spec.layout == "interleaved":
            return np.empty((h, n, d_k), self.dtype)
        return np.empty((n, h, d_k), self.dtype).transpose(1, 0, 2)  # (H, N, d_k) view of (N, H, d_k)

    def keys(self, head: int) -> np.ndarray:
        """K (M, d_k) of the K/V head that query ``head`` reads (a view)."""
        return self.k[head // self.group]

    def values(self, head: int) -> np.ndarray:
        """V (M, d_k) of the K/V head that query ``head`` reads (a view)."""
        return self.v[head // self.group]

    def normalize(
        self,
        sums: tuple[np.ndarray, np.ndarray],
        out: np.ndarray,
        head: int,
        queries: np.ndarray,
        rows: slice,
        limit: int,
        s: np.ndarray | None = None,
        weights: np.ndarray | None = None,
    ) -> None:
        """Head output rows into ``out`` from ``sums = (exp(scores) @ V, exp(scores) @ 1)``: the first over the second.

        ``queries`` are the scaled queries of ``rows`` behind the sums. With ``s``, the tile of exp(scores)
        behind them (rows × limit), the weights are written into ``weights`` (the same shape; may
        be ``s`` itself). Rows whose denominator underflowed (a shift far above the row's true
        maximum, or every key blocked) are recomputed exactly.
        """
        total, den = sums  # (b, d_k), (b,)
        trusted = den.min() > self.tiny  # the usual case: every denominator can be trusted (NaN cannot)
        inverse = (1 / (den if trusted else np.where(den > self.tiny, den, 1)))[:, None]  # (b, 1)
        np.multiply(total, inverse, out=out)
        if s is not None:
            by_row(np.multiply, s, inverse, out=weights)
        if trusted:
            return
        bad = np.flatnonzero(~(den > self.tiny))  # redo those rows with the true maximum
        exact = queries[bad] @ self.keys(head)[:limit].T  # (bad, limit)
        allowed = self.spec.allowed(rows)  # (b, M) or None
        softmax_rows_(exact, None if allowed is None else allowed[bad, :limit], self.exp)
        out[bad] = exact @ self.values(head)[:limit]
        if weights is not None:
            weights[bad] = exact


class _Blocked:
    """The keys that the rows of one task may not attend, handed out tile by tile.

    With a mask or padding, they come from ``spec.allowed`` for the task's rows (``full``: True
    where blocked). A causal mask alone blocks the keys after each query's position: every key up
    to the rows' first position is open to them all, so a tile before it needs no mask, and a tile
    across the diagonal needs one only from there on, made as it is asked for (and kept for the
    next head, which on the weights path asks for the same tile).
    """

    def __init__(self, *, full: np.ndarray | None = None, positions: np.ndarray | None = None) -> None:
        self.full, self.positions = full, positions  # (b, M) and (b, 1)
        self.open_to = 0 if positions is None else int(positions.min()) + 1  # keys before this: open to every row
        self.last: tuple[tuple[int, int], tuple[int, np.ndarray] | None] = ((0, 0), None)

    def tile(self, start: int, stop: int) -> tuple[int, np.ndarray] | None:
        """For keys ``[start, stop)``: None if none is blocked, else (first, blocked): the keys from
        ``first`` on, with ``blocked`` (b, stop − first) True where a row may not attend one."""
        if self.full is not None:
            return start, self.full[:, start:stop]
        first = max(start, self.open_to)
        if first >= stop:
            return None
        assert self.positions is not None  # without ``full``, a causal mask gave the positions
        if self.last[0] != (start, stop):
            self.last = (start, stop), (first, np.arange(first, stop) > self.positions)  # after the query's position
        return self.last[1]


def per_thread(make: Callable[[], Buffers]) -> Callable[[], Buffers]:
    """A getter of each thread's own ``make()``, made on that thread's first call (scratch reused across tasks)."""
    local = threading.local()

    def get() -> Buffers:
        try:
            return local.value
        except AttributeError:
            local.value = make()
            return local.value

    return get


class _Scratch:
    """A thread's working arrays, reused by its tasks: a ``rows × keys`` tile, the running sums
    ``exp(scores) @ V`` and ``exp(scores) @ 1`` with the matmul results added to them, a row of
    ones, and the scaled queries."""

    def __init__(self, rows: int, keys: int, d_k: int, dtype: np.dtype) -> None:
        self.tile = np.empty((rows, keys), dtype)
        self.total, self.part, self.queries = np.empty((3, rows, d_k), dtype)
        self.den, self.den_part = np.empty((2, rows), dtype)
        self.ones = np.ones(keys, dtype)


def _tiled_exp(
    ops: _Operands,
    head: int,
    queries: tuple[np.ndarray, np.ndarray | None],
    limit: int,
    blocked: _Blocked | None,
    scratch: _Scratch,
) -> tuple[np.ndarray, np.ndarray]:
    """``exp(q Kᵀ − c) @ V`` (b, d_k) and its row sums ``exp(q Kᵀ − c) @ 1`` (b,), over keys ``[0, limit)``.

    K and V are those query ``head`` reads; ``queries`` are (q, c) from ``_Operands.queries`` (c None: no shift);
    ``blocked`` gives the keys that count as −∞. Each tile's exp is made in the scratch tile,
    which stays in cache; a tile as wide as ``limit`` keeps them all (``scratch.tile[:b, :limit]``).
    """
    (q, shift), tile = queries, scratch.tile.shape[1]
    b = q.shape[0]
    keys, values = ops.keys(head), ops.values(head)  # (M, d_k) each
    total, part, den, den_part = scratch.total[:b], scratch.part[:b], scratch.den[:b], scratch.den_part[:b]
    for start in range(0, limit, tile):
        stop = min(start + tile, limit)
        s = np.matmul(q, keys[start:stop].T, out=scratch.tile[:b, : stop - start])  # (b, keys)
        if shift is not None:
            by_row(np.subtract, s, shift, out=s)
        band = None if blocked is None else blocked.tile(start, stop)
        if band is not None:
            first, mask = band
            np.copyto(s[:, first - start :], -np.inf, where=mask)
        ops.exp(s, out=s)
        ones = scratch.ones[: stop - start]
        if start == 0:
            np.matmul(s, values[start:stop], out=total)
            np.matmul(s, ones, out=den)
        else:
            total += np.matmul(s, values[start:stop], out=part)
            den += np.matmul(s, ones, out=den_part)
    return total, den


def _output_path(ops: _Operands) -> np.ndarray:
    """Head outputs (H, N, d_k), in ``rows × keys`` tiles: no H × N × M array is ever held."""
    spec, (h, n, d_k) = ops.spec, ops.q.shape
    head_outputs = ops.head_outputs()
    rows_per_task = output_rows(n, h, CAUSAL_ROWS if spec.causal else OUTPUT_ROWS)
    width = min(key_tile(rows_per_task, ops.dtype.itemsize), ops.k.shape[1])
    scratch = per_thread(lambda: _Scratch(rows_per_task, width, d_k, ops.dtype))

    def work(task: tuple[slice, int]) -> None:
        rows, head = task
        limit = spec.key_limit(rows)  # keys past it are blocked for every row
        buffers = scratch()
        queries = ops.queries(head, rows, buffers)
        sums = _tiled_exp(ops, head, queries, limit, ops.blocked(rows), buffers)
        ops.normalize(sums, head_outputs[head, rows], head, queries[0], rows, limit)

    # One task per block of rows and head. Under a causal mask later rows see more keys: the blocks
    # that cost most go first, so that the last tasks, which CPUs finish at different times, are short.
    blocks = sorted(row_blocks(n, rows_per_task), key=spec.key_limit, reverse=True)
    run_tasks(work, [(rows, head) for rows in blocks for head in range(h)])
    return head_outputs


def _weights_path(ops: _Operands, wanted: frozenset[str]) -> dict[str, np.ndarray]:
    """Head outputs and the matrices in ``wanted``, one ``rows × M`` tile per head at a time.

    The tile stays in cache; only the final weights go to memory, written once.
    """
    spec, (h, n, d_k), m = ops.spec, ops.q.shape, ops.k.shape[1]
    out: dict[str, np.ndarray] = {
        name: np.empty((h, n, m), ops.dtype) for name in ("scores", "scaled", "weights") if name in wanted
    }
    average = np.empty((n, m), ops.dtype) if "average_weights" in wanted else None
    head_outputs, exp_paths = ops.head_outputs(), ops.exp_paths  # not when raw or scaled scores are kept
    rows_per_task = block_rows(weight_rows(m, ops.dtype.itemsize), n)
    scratch = per_thread(lambda: _Scratch(rows_per_task, m, d_k, ops.dtype))  # a tile as wide as the keys

    def work(rows: slice) -> None:
        b, limit = rows.stop - rows.start, spec.key_limit(rows)
        allowed = None if exp_paths else spec.allowed(rows)  # (b, M) or None, for the exact rows
        blocked = ops.blocked(rows) if exp_paths else None
        buffers = scratch()
        if average is not None:
            average[rows] = 0
        for head in range(h):
            w = out["weights"][head, rows] if "weights" in out else buffers.tile[:b]  # (b, M): this head's weights
            if not exp_paths:
                head_outputs[head, rows] = _exact_rows(ops, out, w, head, rows, allowed)
            else:
                queries = ops.queries(head, rows, buffers)
                sums = _tiled_exp(ops, head, queries, limit, blocked, buffers)
                exp = buffers.tile[:b, :limit]
                ops.normalize(sums, head_outputs[head, rows], head, queries[0], rows, limit, exp, w[:, :limit])
                w[:, limit:] = 0  # causally blocked
            if average is not None:
                average[rows] += w
        if average is not None:
            average[rows] *= ops.dtype.type(1 / h)

    run_tasks(work, row_blocks(n, rows_per_task))  # a task walks every head: it owns its rows of the average
    if average is not None:
        out["average_weights"] = average
    return {**out, "head_outputs": head_outputs}


def _exact_rows(
    ops: _Operands, out: dict[str, np.ndarray], w: np.ndarray, head: int, rows: slice, allowed: np.ndarray | None
) -> np.ndarray:
    """Raw and scaled scores of ``head`` for ``rows`` (kept where asked for) and their softmax in ``w``.

    Returns the head's output rows.
    """
    raw = out["scores"][head, rows] if "scores" in out else w
    scaled = out["scaled"][head, rows] if "scaled" in out else w
    np.matmul(ops.q[head, rows], ops.keys(head).T, out=raw)  # (b, M)
    np.multiply(raw, ops.multiplier, out=scaled)
    if scaled is not w:
        np.copyto(w, scaled)
    softmax_rows_(w, allowed)
    return w @ ops.values(head)
