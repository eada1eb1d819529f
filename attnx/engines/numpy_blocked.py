"""NumPy attention in cache-sized tiles spread over threads, for inputs too large to compute in one piece.

Each head's scores are made one tile of query rows at a time, and a tile stays in the CPU's cache
from the matmul that writes it, through the softmax passes, to the matmul that reads it. Two
paths, both exact up to rounding:

- ``weights``: when any H × N × M matrix is asked for. A task takes a block of query rows and
  walks the heads; each head's ``rows × M`` tile is made in scratch and written, once, where it
  is kept (the task owns its rows of the head average too).
- ``output``: when only head outputs are needed. A task takes one block of rows of one head and
  walks the keys in tiles: no H × N × M array, nor one query row's full scores, ever exists.

Both fold the softmax shift into the first matmul: with c_i = ‖q_i‖·max_j ‖k_j‖ ≥ max_j q_i·k_j
(Cauchy–Schwarz), [q_i, −c_i]·[k_j, 1] = q_i·k_j − c_i ≤ 0, so exp never overflows and needs no
separate max pass; and since c_i does not depend on the key, the tiles of one row share it, and
their sums add up without any rescaling. A column of ones appended to V makes the second matmul
return each row's softmax denominator. Rows whose denominator underflows (c_i far above the true
maximum, or every key masked) are recomputed exactly, with the true row maximum. When raw or
scaled scores are asked for, the tiles are scaled and softmaxed with the textbook max shift.

Tasks run on the calling thread and on helper threads kept for the process, with BLAS limited to
one thread each (threadpoolctl): NumPy releases the GIL in matmul and in ufuncs, so the softmax
passes run in parallel too.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from attnx.spec import AttentionSpec

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

Task = TypeVar("Task")
Buffers = TypeVar("Buffers")

# Query rows per task. On the output path one tile is OUTPUT_ROWS × (KEY_TILE_BYTES / (rows ·
# itemsize)) keys (512 × 512 in float32); on the weights path a head's tile is WEIGHT_ROWS × M,
# made in scratch and written once. Both were the fastest sizes measured on a 2-core machine with
# 1 MiB of L2 per core (benchmarks/engines.py).
OUTPUT_ROWS = 512
WEIGHT_ROWS = 128
KEY_TILE_BYTES = 1 << 20
PREPARE_ROWS = 256  # positions per task when laying out Q, K and V for the tiles
ROW_STEP = 8  # task sizes are multiples of this
# A denominator below this means the shift c_i overshot the row's true maximum by too much to trust.
TINY = {np.dtype(np.float32): 1e-30, np.dtype(np.float64): 1e-280}


def block_rows(rows: int, queries: int) -> int:
    """``rows`` query rows per task, or fewer, so that every CPU has a task (a multiple of ``ROW_STEP``)."""
    share = -(-queries // workers())
    return max(ROW_STEP, min(rows, -(-share // ROW_STEP) * ROW_STEP))


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


def softmax_rows_(s: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis of ``s`` in place; ``allowed`` (``[rows, keys]``) broadcasts over heads."""
    if allowed is not None:
        np.copyto(s, -np.inf, where=~allowed)
    peak = s.max(axis=-1, keepdims=True)
    if allowed is not None:
        peak[~np.isfinite(peak)] = 0  # every key blocked: exp(-inf) = 0 everywhere
    s -= peak
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    if allowed is not None:
        total[total == 0] = 1  # ... and the row stays zeros
    s /= total
    return s


def attend_blocked(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, keep: frozenset[str]
) -> dict[str, np.ndarray]:
    """Head outputs, plus the matrices in ``keep``, from split heads ``q`` (H,N,d_k), ``k``/``v`` (H_kv,M,d_k)."""
    wanted = keep & {"scores", "scaled", "weights", "average_weights"}
    operands = _Operands(q, k, v, spec, shift=not {"scores", "scaled"} & wanted)
    if wanted:
        return _weights_path(operands, wanted)
    return {"head_outputs": _output_path(operands)}


class _Operands:
    """Q, K and V laid out for tiles, shared read-only by every task.

    ``k_ones`` is ``[Kᵀ ; 1]`` (H_kv, d_k+1, M) and ``v_ones`` is ``[V | 1]`` (H_kv, M, d_k+1).
    With ``shift``, ``shifted`` holds ``[Q·scale | −c]`` (H, N, d_k+1), the queries of the shifted
    paths. Query head h reads K/V head ``h // group``. They are written in blocks of positions on
    every CPU: in one thread, writing them took a tenth of a whole output-only run.
    """

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, *, shift: bool) -> None:
        (h, n, d_k), (h_kv, m, _), dtype = q.shape, k.shape, q.dtype
        self.q, self.k, self.v, self.spec = q, k, v, spec
        self.group, self.d_k, self.dtype = h // h_kv, d_k, dtype
        self.scale, self.tiny = dtype.type(spec.multiplier), TINY[dtype]
        self.k_ones = np.empty((h_kv, d_k + 1, m), dtype)  # (H_kv, d_k+1, M)
        self.v_ones = np.empty((h_kv, m, d_k + 1), dtype)  # (H_kv, M, d_k+1)
        self.shifted = np.empty((h, n, d_k + 1), dtype) if shift else None  # (H, N, d_k+1)
        # max_j ‖k_j‖ per query head; an overflow to inf only sends rows to the exact fallback.
        with np.errstate(over="ignore"):
            self.k_norm = np.sqrt(np.einsum("hmd,hmd->hm", k, k).max(axis=-1)).repeat(self.group)  # (H,)
        run_tasks(self._prepare, row_blocks(max(n, m), PREPARE_ROWS))

    def _prepare(self, block: slice) -> None:
        """Keys ``block`` of ``k_ones`` and ``v_ones``, and queries ``block`` of ``shifted``, for every head.

        c_i = ‖q_i·scale‖·max_j ‖k_j‖ ≥ every scaled q_i·k_j (Cauchy–Schwarz).
        """
        d_k, m, n = self.d_k, self.k.shape[1], self.q.shape[1]
        keys = range(block.start, min(block.stop, m))
        for start in keys[::16]:  # transposed in narrow slices: whole, the copy runs 2-3x slower
            stop = min(start + 16, keys.stop)
            self.k_ones[:, :d_k, start:stop] = self.k[:, start:stop].transpose(0, 2, 1)
        self.k_ones[:, d_k, keys.start : keys.stop] = 1
        self.v_ones[:, keys.start : keys.stop, :d_k] = self.v[:, keys.start : keys.stop]
        self.v_ones[:, keys.start : keys.stop, d_k] = 1
        if self.shifted is None:
            return
        shifted = self.shifted[:, block.start : min(block.stop, n)]  # (H, rows, d_k+1)
        qs = np.multiply(self.q[:, block.start : min(block.stop, n)], self.scale, out=shifted[..., :d_k])
        with np.errstate(over="ignore"):
            np.sqrt(np.einsum("hnd,hnd->hn", qs, qs), out=shifted[..., d_k])
            shifted[..., d_k] *= -self.k_norm[:, None]

    def head_outputs(self) -> np.ndarray:
        """An empty (H, N, d_k) array for the head outputs, stored token by token as the concatenated
        output is (contiguous layout): concatenating the heads is then a view, not a copy."""
        h, n, d_k = self.q.shape
        if self.spec.layout == "interleaved":
            return np.empty((h, n, d_k), self.dtype)
        return np.empty((n, h, d_k), self.dtype).transpose(1, 0, 2)  # (H, N, d_k) view of (N, H, d_k)

    def k_t(self, head: int) -> np.ndarray:
        """Kᵀ (d_k, M) of the K/V head that query ``head`` reads (a view)."""
        return self.k_ones[head // self.group, : self.d_k]

    def normalize(
        self,
        r: np.ndarray,
        out: np.ndarray,
        head: int,
        queries: np.ndarray,
        limit: int,
        allowed: np.ndarray | None,
        s: np.ndarray | None = None,
        weights: np.ndarray | None = None,
    ) -> None:
        """Head output rows into ``out`` from ``r = exp(shifted scores) @ [V | 1]``, dividing by the last column.

        ``queries`` are the shifted queries behind ``r``. With ``s``, the tile of exp(shifted
        scores) behind ``r`` (rows × limit), the weights are written into ``weights`` (the same
        shape; may be ``s`` itself). Rows whose denominator underflowed are recomputed exactly.
        """
        d_k, total = self.d_k, r[:, self.d_k :]  # (rows, 1): softmax denominators
        trusted = total.min() > self.tiny  # the usual case: every denominator can be trusted (NaN cannot)
        inverse = 1 / (total if trusted else np.where(total > self.tiny, total, 1))
        np.multiply(r[:, :d_k], inverse, out=out)
        if s is not None:
            np.multiply(s, inverse, out=weights)
        if trusted:
            return
        bad = np.flatnonzero(~(total[:, 0] > self.tiny))  # redo those rows with the true maximum
        kv = head // self.group
        exact = queries[bad, :d_k] @ self.k_ones[kv, :d_k, :limit]  # (bad, limit)
        softmax_rows_(exact, None if allowed is None else allowed[bad, :limit])
        out[bad] = exact @ self.v[kv, :limit]
        if weights is not None:
            weights[bad] = exact


def per_thread(make: Callable[[], Buffers]) -> Callable[[], Buffers]:
    """A getter of each thread's own ``make()``, made on that thread's first call (scratch reused across tasks)."""
    local = threading.local()

    def get() -> Buffers:
        try:
            return local.value  # type: ignore[no-any-return]
        except AttributeError:
            local.value = make()
            return local.value  # type: ignore[no-any-return]

    return get


class _Scratch:
    """A task's working arrays (reused by a thread's tasks on the output path): a ``rows × keys``
    tile, and the running sum ``exp(scores) @ [V | 1]`` (rows, d_k+1) with the matmul result added to it."""

    def __init__(self, rows: int, keys: int, d_k: int, dtype: np.dtype) -> None:
        self.tile = np.empty((rows, keys), dtype)
        self.total, self.part = np.empty((2, rows, d_k + 1), dtype)


def _tiled_exp(
    ops: _Operands,
    kv: int,
    queries: np.ndarray,
    limit: int,
    blocked: np.ndarray | None,
    scratch: _Scratch,
) -> np.ndarray:
    """``exp(queries @ [Kᵀ ; 1]) @ [V | 1]`` (b, d_k+1) over keys ``[0, limit)`` of K/V head ``kv``, tile by tile.

    ``queries`` are shifted (b, d_k+1), so every exp is ≤ 1; ``blocked`` (b, M) marks keys that
    count as −∞. Each tile's exp is made in the scratch tile, which stays in cache; a tile as wide
    as ``limit`` keeps them all (``scratch.tile[:b, :limit]``).
    """
    b, width = queries.shape[0], scratch.tile.shape[1]
    total, part = scratch.total[:b], scratch.part[:b]
    for start in range(0, limit, width):
        stop = min(start + width, limit)
        s = np.matmul(queries, ops.k_ones[kv, :, start:stop], out=scratch.tile[:b, : stop - start])  # (b, keys)
        if blocked is not None:
            np.copyto(s, -np.inf, where=blocked[:, start:stop])
        np.exp(s, out=s)  # exp(scaled − shift) ≤ 1
        if start == 0:
            np.matmul(s, ops.v_ones[kv, start:stop], out=total)
        else:
            total += np.matmul(s, ops.v_ones[kv, start:stop], out=part)
    return total


def _output_path(ops: _Operands) -> np.ndarray:
    """Head outputs (H, N, d_k), in ``rows × keys`` tiles: no H × N × M array is ever held."""
    spec, (h, n, d_k) = ops.spec, ops.q.shape
    head_outputs, shifted = ops.head_outputs(), ops.shifted
    assert shifted is not None
    rows_per_task = block_rows(OUTPUT_ROWS, n)
    width = min(key_tile(rows_per_task, ops.dtype.itemsize), ops.k.shape[1])
    scratch = per_thread(lambda: _Scratch(rows_per_task, width, d_k, ops.dtype))

    def work(task: tuple[slice, int]) -> None:
        rows, head = task
        limit, allowed = spec.key_limit(rows), spec.allowed(rows)  # keys past `limit` are blocked; allowed: (b, M)
        queries = shifted[head, rows]  # (b, d_k+1)
        r = _tiled_exp(ops, head // ops.group, queries, limit, None if allowed is None else ~allowed, scratch())
        ops.normalize(r, head_outputs[head, rows], head, queries, limit, allowed)

    # One task per block of rows and head: many tasks of equal cost keep both CPUs busy to the end.
    run_tasks(work, [(rows, head) for rows in row_blocks(n, rows_per_task) for head in range(h)])
    return head_outputs


def _weights_path(ops: _Operands, wanted: frozenset[str]) -> dict[str, np.ndarray]:
    """Head outputs and the matrices in ``wanted``, one ``rows × M`` tile per head at a time.

    The tile stays in cache; only the final weights go to memory, written once.
    """
    spec, (h, n, d_k), m = ops.spec, ops.q.shape, ops.k.shape[1]
    out = {name: np.empty((h, n, m), ops.dtype) for name in ("scores", "scaled", "weights") if name in wanted}
    average = np.empty((n, m), ops.dtype) if "average_weights" in wanted else None
    head_outputs, shifted = ops.head_outputs(), ops.shifted  # shifted: None when raw or scaled scores are kept
    rows_per_task = block_rows(WEIGHT_ROWS, n)

    def work(rows: slice) -> None:
        b, limit = rows.stop - rows.start, spec.key_limit(rows)
        allowed = spec.allowed(rows)  # (b, M) or None
        blocked = None if allowed is None or shifted is None else ~allowed  # the exact rows use `allowed`
        scratch = _Scratch(b, m, d_k, ops.dtype)  # one tile as wide as the keys: it stays in cache
        if average is not None:
            average[rows] = 0
        for head in range(h):
            w = out["weights"][head, rows] if "weights" in out else scratch.tile  # (b, M): this head's weights
            if shifted is None:
                head_outputs[head, rows] = _exact_rows(ops, out, w, head, rows, allowed)
            else:
                queries = shifted[head, rows]  # (b, d_k+1)
                r = _tiled_exp(ops, head // ops.group, queries, limit, blocked, scratch)
                exp = scratch.tile[:, :limit]
                ops.normalize(r, head_outputs[head, rows], head, queries, limit, allowed, exp, w[:, :limit])
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
    np.matmul(ops.q[head, rows], ops.k_t(head), out=raw)  # (b, M)
    np.multiply(raw, ops.scale, out=scaled)
    if scaled is not w:
        np.copyto(w, scaled)
    softmax_rows_(w, allowed)
    return w @ ops.v[head // ops.group]
