"""NumPy attention in query blocks spread over threads, for inputs too large to hold in one piece.

Two paths, both exact up to rounding:

- ``weights``: when any H × N × M matrix is asked for. Each block computes its scores, scales and
  softmaxes them in place, and writes only the matrices asked for.
- ``output``: when only head outputs are needed, no H × N × M array ever exists. Each block folds
  the softmax shift into its matmul: with c_i = ‖q_i‖·max_j ‖k_j‖ ≥ max_j q_i·k_j (Cauchy–Schwarz),
  [q_i, −c_i]·[k_j, 1] = q_i·k_j − c_i ≤ 0, so exp never overflows and needs no separate max pass;
  a column of ones appended to V makes the same matmul return each row's softmax denominator.
  Rows whose denominator underflows (c_i far above the true maximum, or every key masked) are
  recomputed exactly, with the true row maximum.

Blocks run on a thread pool with BLAS limited to one thread per worker (threadpoolctl): NumPy
releases the GIL in matmul and in ufuncs, so the softmax passes run in parallel too.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from attnx.spec import AttentionSpec

Arrays = dict[str, np.ndarray]
BLOCK_BYTES = 64 << 20  # one block's H × B × M scores
MIN_ROWS, MAX_ROWS = 32, 1024
# A denominator below this means the shift c_i overshot the row's true maximum by too much to trust.
TINY = {np.dtype(np.float32): 1e-30, np.dtype(np.float64): 1e-280}


def block_rows(heads: int, keys: int, itemsize: int, queries: int | None = None) -> int:
    """Query rows per block: one block's scores take about ``BLOCK_BYTES``, and ``queries`` rows
    split into at least one block per CPU (so that every CPU has work)."""
    rows = BLOCK_BYTES // max(1, heads * keys * itemsize)
    if queries is not None:
        rows = min(rows, -(-queries // workers()))
    return int(min(MAX_ROWS, max(MIN_ROWS, -(-rows // MIN_ROWS) * MIN_ROWS)))


def workers() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_blocks(work: Callable[[slice], None], n: int, rows: int) -> None:
    """Call ``work`` on every block of ``rows`` query rows, on as many threads as there are CPUs."""
    blocks = [slice(start, min(start + rows, n)) for start in range(0, n, rows)]
    threads = min(workers(), len(blocks))
    errstate = np.geterr()  # np.errstate is per thread: the workers take the caller's

    def guarded(block: slice) -> None:
        with np.errstate(**errstate):
            work(block)

    if threads <= 1:
        for block in blocks:
            work(block)
        return
    from concurrent.futures import ThreadPoolExecutor  # imported here: small inputs never need threads

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(guarded, blocks):  # re-raises a worker's exception here
            pass


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
    if wanted:
        return _weights_path(q, k, v, spec, wanted)
    return {"head_outputs": _output_path(q, k, v, spec)}


def _weights_path(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, wanted: frozenset[str]
) -> dict[str, np.ndarray]:
    (h, n, d_k), m, dtype = q.shape, k.shape[1], q.dtype
    out = {name: np.empty((h, n, m), dtype) for name in ("scores", "scaled", "weights") if name in wanted}
    if "average_weights" in wanted:
        out["average_weights"] = np.empty((n, m), dtype)
    head_outputs = np.empty((h, n, d_k), dtype)
    if {"scores", "scaled"} & wanted:
        work = _exact_block(q, k, v, spec, out, head_outputs)
    else:  # only weights: the shifted-matmul softmax, written in place when there is no GQA
        work = _shifted_block(q, k, v, spec, out, head_outputs)
    run_blocks(work, n, block_rows(h, m, dtype.itemsize, n))
    return {**out, "head_outputs": head_outputs}


def _exact_block(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    spec: AttentionSpec,
    out: dict[str, np.ndarray],
    head_outputs: np.ndarray,
) -> Callable[[slice], None]:
    """Blocks that also keep raw and scaled scores: matmul, scale, then a max-shifted softmax."""
    (h, _, d_k), (h_kv, m, _) = q.shape, k.shape
    g, scale = h // h_kv, q.dtype.type(spec.multiplier)
    k_t = np.ascontiguousarray(k.transpose(0, 2, 1))  # (H_kv, d_k, M)

    def work(rows: slice) -> None:
        b = rows.stop - rows.start
        s = (q[:, rows].reshape(h_kv, g * b, d_k) @ k_t).reshape(h, b, m)  # (H, B, M)
        if "scores" in out:
            out["scores"][:, rows] = s
        s *= scale
        if "scaled" in out:
            out["scaled"][:, rows] = s
        softmax_rows_(s, spec.allowed(rows))
        if "weights" in out:
            out["weights"][:, rows] = s
        if "average_weights" in out:
            out["average_weights"][rows] = s.mean(axis=0)
        head_outputs[:, rows] = (s.reshape(h_kv, g * b, m) @ v).reshape(h, b, d_k)

    return work


def _shifted_block(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    spec: AttentionSpec,
    out: dict[str, np.ndarray],
    head_outputs: np.ndarray,
) -> Callable[[slice], None]:
    """Blocks whose weights come from the shifted matmul: matmul, exp, matmul, divide (no max or sum pass)."""
    (h, _, d_k), (h_kv, m, _) = q.shape, k.shape
    g = h // h_kv
    shifted = _Shifted(q, k, v, spec)
    in_place = g == 1 and "weights" in out

    def work(rows: slice) -> None:
        b = rows.stop - rows.start
        target = out["weights"][:, rows] if in_place else None  # (H, B, M) view: the matmul writes there
        s, r, allowed, qs = shifted.exp_scores(rows, m, target)  # s: (H_kv, gB, M) = exp(scaled − shift)
        total = r[..., d_k:]  # (H_kv, gB, 1) softmax denominators, from V's column of ones
        ok = total > shifted.tiny
        s /= np.where(ok, total, 1)
        o = r[..., :d_k] / np.where(ok, total, 1)
        for kv, row in np.argwhere(~ok[..., 0]):  # recompute exactly (rare)
            s[kv, row], o[kv, row] = shifted.exact_row(qs, kv, row, allowed, b, m)
        weights = s.reshape(h, b, m)
        if "weights" in out and not in_place:
            out["weights"][:, rows] = weights
        if "average_weights" in out:
            out["average_weights"][rows] = weights.mean(axis=0)
        head_outputs[:, rows] = o.reshape(h, b, d_k)

    return work


class _Shifted:
    """Scores shifted by c_i = ‖q_i‖·max_j ‖k_j‖ inside the matmul, and V with a column of ones."""

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec) -> None:
        (h, _, d_k), (h_kv, m, _) = q.shape, k.shape
        self.q, self.k, self.v, self.spec = q, k, v, spec
        self.h_kv, self.g, self.d_k = h_kv, h // h_kv, d_k
        dtype = q.dtype
        self.scale, self.tiny = dtype.type(spec.multiplier), TINY[dtype]
        self.k_aug_t = np.empty((h_kv, d_k + 1, m), dtype)  # (H_kv, d_k+1, M): Kᵀ with a row of ones under it
        self.k_aug_t[:, :d_k] = k.transpose(0, 2, 1)
        self.k_aug_t[:, d_k] = 1
        self.v_aug = np.empty((h_kv, m, d_k + 1), dtype)  # (H_kv, M, d_k+1): V with a column of ones
        self.v_aug[..., :d_k] = v
        self.v_aug[..., d_k] = 1
        self.k_norm = np.sqrt((k.astype(np.float64) ** 2).sum(axis=-1).max(axis=-1)).astype(dtype)  # (H_kv,)

    def exp_scores(
        self, rows: slice, limit: int, out: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """exp(scaled − shift) over keys ``:limit`` (masked keys 0), its product with [V | 1], the mask, Q·scale."""
        h_kv, g, d_k = self.h_kv, self.g, self.d_k
        b = rows.stop - rows.start
        qs = self.q[:, rows].reshape(h_kv, g * b, d_k) * self.scale  # (H_kv, gB, d_k)
        # ‖q_i‖·max‖k_j‖ ≥ every q_i·k_j; an overflow to inf only sends the row to the exact fallback.
        with np.errstate(over="ignore"):
            shift = np.sqrt(np.einsum("hbd,hbd->hb", qs, qs)) * self.k_norm[:, None]  # (H_kv, gB)
        q_aug = np.concatenate([qs, -shift[..., None]], axis=-1)  # (H_kv, gB, d_k+1)
        s = np.matmul(q_aug, self.k_aug_t[:, :, :limit], out=out)  # (H_kv, gB, limit) = scaled − shift ≤ 0
        allowed = self.spec.allowed(rows)
        if allowed is not None:
            np.copyto(s.reshape(h_kv, g, b, limit), -np.inf, where=~allowed[:, :limit])
        np.exp(s, out=s)
        return s, s @ self.v_aug[:, :limit], allowed, qs

    def exact_row(
        self, qs: np.ndarray, kv: int, row: int, allowed: np.ndarray | None, b: int, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Weights and output of one stacked query row, with the true row maximum."""
        exact = (qs[kv, row] @ self.k[kv, :limit].T)[None]  # (1, limit)
        softmax_rows_(exact, None if allowed is None else allowed[row % b, :limit][None])
        return exact[0], exact[0] @ self.v[kv, :limit]


def _output_path(q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec) -> np.ndarray:
    (h, n, d_k), m = q.shape, k.shape[1]
    shifted = _Shifted(q, k, v, spec)
    head_outputs = np.empty((h, n, d_k), q.dtype)

    def work(rows: slice) -> None:
        b, limit = rows.stop - rows.start, spec.key_limit(rows)  # keys past `limit` are causally blocked
        _, r, allowed, qs = shifted.exp_scores(rows, limit)
        total = r[..., d_k:]  # (H_kv, gB, 1) softmax denominators
        ok = total > shifted.tiny
        o = r[..., :d_k] / np.where(ok, total, 1)
        for kv, row in np.argwhere(~ok[..., 0]):  # recompute exactly (rare)
            o[kv, row] = shifted.exact_row(qs, kv, row, allowed, b, limit)[1]
        head_outputs[:, rows] = o.reshape(h, b, d_k)

    run_blocks(work, n, block_rows(h, m, q.dtype.itemsize, n))
    return head_outputs
