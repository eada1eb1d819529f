"""What the tiles read: the masking rules of one problem, Q/K/V with their score bounds, and scratch."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnx.core.spec import largest_abs
from attnx.engines.core import near_one_exponent
from attnx.engines.tiled.rows import by_row, softmax_rows_

# A denominator below this means the shift c_i overshot the row's true maximum by too much to trust.
TINY = {np.dtype(np.float32): 1e-30, np.dtype(np.float64): 1e-280}


@dataclass(frozen=True)
class Rules:
    """The settings of one problem the kernel reads (the engine builds it from the spec).

    ``allowed(rows)`` gives the (b, M) keys each row may attend (None: all), ``key_limit(rows)``
    the number of keys past which every row of ``rows`` is blocked; ``future_hidden`` says no query sees a
    key past its position, ``beyond_causal`` that some key before it may be blocked too (``Masking``'s
    answers), with ``positions`` (N,) each query's position.
    """

    multiplier: float
    layout: str
    future_hidden: bool
    beyond_causal: bool
    positions: np.ndarray
    allowed: Callable[[slice], np.ndarray | None]
    key_limit: Callable[[slice], int]


def _values_near_one(v: np.ndarray) -> tuple[np.ndarray, int]:
    """V scaled by a power of two so that its largest magnitude is in [1, 2), and the exponent k to scale the
    head outputs back by (V = V' · 2^k); V itself and 0 when it is near 1 already, or holds no finite number.

    The tiles sum M terms exp(s − c)·v before dividing by the row's sum: with |v| near the dtype's largest,
    M of them overflow although the output (a weighted mean of V's rows) fits; with |v| tiny, exp(s − c)·v
    underflows although the output does not. Scaled near 1, neither happens, and scaling by a power of two
    is exact (``np.ldexp``), so the outputs are the ones the one-piece path computes.
    """
    exponent = near_one_exponent(largest_abs(v))
    return (np.ldexp(v, -exponent).astype(v.dtype, copy=False), exponent) if exponent else (v, 0)


def _unit_stride(x: np.ndarray) -> np.ndarray:
    """``x``, or a copy of it whose last axis is contiguous: BLAS reads only such matrices."""
    return x if x.strides[-1] == x.itemsize else np.ascontiguousarray(x)


class Operands:
    """Q, K and V as the tiles read them, and the bounds the exp paths need; shared read-only by every task.

    The tiles read Q, K and V where they are (BLAS takes K transposed), copying one only when its
    last axis is strided, as with the interleaved layout. Query head h reads K/V head ``h // group``.
    On the exp paths (``exp_paths``), max_j ‖k_j‖ per K/V head and max |v| are measured first: with
    each query's norm, they bound every score and every sum (see ``queries``). There, scores are
    taken in the base of ``exp``: e, or 2 with ``exp2`` (where NumPy's exp2 is vectorised).
    """

    def __init__(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, rules: Rules, *, exp_paths: bool, exp2: bool
    ) -> None:
        h, (h_kv, m, _), dtype = q.shape[0], k.shape, q.dtype
        self.q, self.k, self.rules = _unit_stride(q), _unit_stride(k), rules
        self.v, self.v_exponent = _values_near_one(_unit_stride(v))
        self.group, self.dtype, self.tiny = h // h_kv, dtype, TINY[dtype]
        self.multiplier, self.exp_paths = dtype.type(rules.multiplier), exp_paths
        self.exp: np.ufunc = np.exp
        if not exp_paths:
            return
        # Scores in base 2 are the natural ones times log2 e: folded into the queries' multiplier.
        self.exp, unit = (np.exp2, 1 / math.log(2)) if exp2 else (np.exp, 1.0)
        self.exp_multiplier = dtype.type(rules.multiplier * unit)
        with np.errstate(over="ignore"):  # an overflow to inf only sends rows to the shifted path
            k_norm = np.sqrt(np.einsum("hmd,hmd->hm", self.k, self.k).max(axis=-1))  # (H_kv,): max_j ‖k_j‖
        self.k_norm = k_norm.repeat(self.group)  # (H,), per query head
        # Unshifted, exp(q·k·s) ≤ e^c: sums of M such terms times |v| stay finite, and a row's
        # denominator (≥ e^-c, its largest term) above `tiny`, while c is at most this.
        v_peak = largest_abs(self.v)
        headroom = math.log(np.finfo(dtype).max) - math.log(m) - math.log(max(v_peak, 1.0))
        self.unshifted_up_to = (min(-math.log(self.tiny), headroom) - 1) * unit if math.isfinite(v_peak) else -math.inf

    def queries(self, head: int, rows: slice, scratch: Scratch) -> tuple[np.ndarray, np.ndarray | None]:
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

    def blocked(self, rows: slice) -> Blocked | None:
        """The keys ``rows`` may not attend, tile by tile (None: every key is open)."""
        rules = self.rules
        allowed = rules.allowed(rows) if rules.beyond_causal else None  # a mask, padding or a window: built rows
        if allowed is not None:
            return Blocked(full=~allowed)
        if rules.future_hidden:
            return Blocked(positions=rules.positions[rows, None])
        return None

    def head_outputs(self) -> np.ndarray:
        """An empty (H, N, d_k) array for the head outputs, stored token by token as the concatenated
        output is (contiguous layout): concatenating the heads is then a view, not a copy."""
        h, n, d_k = self.q.shape
        if self.rules.layout == "interleaved":
            return np.empty((h, n, d_k), self.dtype)
        return np.empty((n, h, d_k), self.dtype).transpose(1, 0, 2)  # (H, N, d_k) view of (N, H, d_k)

    def keys(self, head: int) -> np.ndarray:
        """K (M, d_k) of the K/V head that query ``head`` reads (a view)."""
        return self.k[head // self.group]

    def values(self, head: int) -> np.ndarray:
        """V (M, d_k) of the K/V head that query ``head`` reads (a view)."""
        return self.v[head // self.group]

    def normalize(
        self, sums: tuple[np.ndarray, np.ndarray], out: np.ndarray, redo: Redo, tile: Tile | None = None
    ) -> None:
        """Head output rows into ``out`` from ``sums = (exp(scores) @ V, exp(scores) @ 1)``: the first over the second.

        With ``tile = (s, weights)``, the tile of exp(scores) behind the sums (rows × limit), the
        weights are written into ``weights`` (the same shape; may be ``s`` itself). Rows whose
        denominator underflowed (a shift far above the row's true maximum, or every key blocked)
        are recomputed exactly from ``redo``.
        """
        total, den = sums  # (b, d_k), (b,)
        trusted = den.min() > self.tiny  # the usual case: every denominator can be trusted (NaN cannot)
        inverse = (1 / (den if trusted else np.where(den > self.tiny, den, 1)))[:, None]  # (b, 1)
        np.multiply(total, inverse, out=out)
        if self.v_exponent:  # V was scaled by a power of two (see _values_near_one): undo it, exactly
            np.ldexp(out, self.v_exponent, out=out)
        if tile is not None:
            by_row(np.multiply, tile[0], inverse, out=tile[1])
        if not trusted:
            self._redo_exactly(np.flatnonzero(~(den > self.tiny)), out, redo, None if tile is None else tile[1])

    def _redo_exactly(self, bad: np.ndarray, out: np.ndarray, redo: Redo, weights: np.ndarray | None) -> None:
        """Rows ``bad`` of ``out`` (and of ``weights``) made again with each row's true maximum."""
        head, queries, rows, limit = redo
        exact = queries[bad] @ self.keys(head)[:limit].T  # (bad, limit)
        allowed = self.rules.allowed(rows)  # (b, M) or None
        softmax_rows_(exact, None if allowed is None else allowed[bad, :limit], self.exp)
        out[bad] = np.ldexp(exact @ self.values(head)[:limit], self.v_exponent)
        if weights is not None:
            weights[bad] = exact


Redo = tuple[int, np.ndarray, slice, int]  # (head, scaled queries, rows, key limit): what an exact redo reads
Tile = tuple[np.ndarray, np.ndarray]  # (exp(scores) tile, where its weights go)


class Blocked:
    """The keys that the rows of one task may not attend, handed out tile by tile.

    With a mask or padding, they come from ``Rules.allowed`` for the task's rows (``full``: True
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
        if first >= stop or self.positions is None:  # without ``full`` or positions nothing is blocked
            return None
        if self.last[0] != (start, stop):
            self.last = (start, stop), (first, np.arange(first, stop) > self.positions)  # after the query's position
        return self.last[1]


class Scratch:
    """A thread's working arrays, reused by its tasks: a ``rows × keys`` tile, the running sums
    ``exp(scores) @ V`` and ``exp(scores) @ 1`` with the matmul results added to them, a row of
    ones, and the scaled queries."""

    def __init__(self, rows: int, keys: int, d_k: int, dtype: np.dtype) -> None:
        self.tile = np.empty((rows, keys), dtype)
        self.total, self.part, self.queries = np.empty((3, rows, d_k), dtype)
        self.den, self.den_part = np.empty((2, rows), dtype)
        self.ones = np.ones(keys, dtype)
