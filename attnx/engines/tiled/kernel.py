"""The two tiled paths: head outputs alone, key tile by key tile, or the H × N × M matrices, row block by row block."""

from __future__ import annotations

import numpy as np

from attnx.core.tensors import AVERAGE_WEIGHTS, HEAD_OUTPUTS, SCALED, SCORES, WEIGHTS, TensorName
from attnx.engines.tiled.operands import Blocked, Operands, Scratch
from attnx.engines.tiled.plan import Plan, block_rows, key_tile, output_rows, row_blocks, weight_rows
from attnx.engines.tiled.rows import by_row, softmax_rows_
from attnx.engines.tiled.threads import per_thread, run_tasks


def tiled_exp(
    ops: Operands,
    head: int,
    queries: tuple[np.ndarray, np.ndarray | None],
    limit: int,
    blocked: Blocked | None,
    scratch: Scratch,
) -> tuple[np.ndarray, np.ndarray]:
    """``exp(q Kᵀ − c) @ V`` (b, d_k) and its row sums ``exp(q Kᵀ − c) @ 1`` (b,), over keys ``[0, limit)``.

    K and V are those query ``head`` reads; ``queries`` are (q, c) from ``Operands.queries`` (c None: no shift);
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


def output_path(ops: Operands, plan: Plan) -> np.ndarray:
    """Head outputs (H, N, d_k), in ``rows × keys`` tiles: no H × N × M array is ever held."""
    rules, (h, n, d_k) = ops.rules, ops.q.shape
    head_outputs = ops.head_outputs()
    rows_per_task = output_rows(plan, n, h, plan.causal_rows if rules.future_hidden else plan.output_rows)
    width = min(key_tile(plan, rows_per_task, ops.dtype.itemsize), ops.k.shape[1])
    scratch = per_thread(lambda: Scratch(rows_per_task, width, d_k, ops.dtype))

    def work(task: tuple[slice, int]) -> None:
        rows, head = task
        limit = rules.key_limit(rows)  # keys past it are blocked for every row
        buffers = scratch()
        queries = ops.queries(head, rows, buffers)
        sums = tiled_exp(ops, head, queries, limit, ops.blocked(rows), buffers)
        ops.normalize(sums, head_outputs[head, rows], (head, queries[0], rows, limit))

    # One task per block of rows and head. Under a causal mask later rows see more keys: the blocks
    # that cost most go first, so that the last tasks, which CPUs finish at different times, are short.
    blocks = sorted(row_blocks(n, rows_per_task), key=rules.key_limit, reverse=True)
    run_tasks(work, [(rows, head) for rows in blocks for head in range(h)], plan.cpus)
    return head_outputs


def weights_path(ops: Operands, plan: Plan, wanted: frozenset[TensorName]) -> dict[TensorName, np.ndarray]:
    """Head outputs and the matrices in ``wanted``, one ``rows × M`` tile per head at a time.

    The tile stays in cache; only the final weights go to memory, written once. A task walks every
    head of its rows: it owns its rows of the head average.
    """
    rules, (h, n, d_k), m = ops.rules, ops.q.shape, ops.k.shape[1]
    out: dict[TensorName, np.ndarray] = {
        name: np.empty((h, n, m), ops.dtype) for name in (SCORES, SCALED, WEIGHTS) if name in wanted
    }
    average = np.empty((n, m), ops.dtype) if AVERAGE_WEIGHTS in wanted else None
    head_outputs = ops.head_outputs()
    rows_per_task = block_rows(plan, weight_rows(plan, m, ops.dtype.itemsize), n)
    scratch = per_thread(lambda: Scratch(rows_per_task, m, d_k, ops.dtype))  # a tile as wide as the keys

    def work(rows: slice) -> None:
        b, limit = rows.stop - rows.start, rules.key_limit(rows)
        allowed = None if ops.exp_paths else rules.allowed(rows)  # (b, M) or None, for the exact rows
        blocked = ops.blocked(rows) if ops.exp_paths else None  # made once: its causal tiles serve every head
        buffers = scratch()
        if average is not None:
            average[rows] = 0
        for head in range(h):
            w = out[WEIGHTS][head, rows] if WEIGHTS in out else buffers.tile[:b]  # (b, M): this head's weights
            if ops.exp_paths:
                _exp_rows(ops, w, head, (rows, limit), blocked, buffers, head_outputs[head, rows])
            else:
                head_outputs[head, rows] = _exact_rows(ops, out, w, head, rows, allowed)
            if average is not None:
                average[rows] += w
        if average is not None:
            average[rows] *= ops.dtype.type(1 / h)

    run_tasks(work, row_blocks(n, rows_per_task), plan.cpus)
    if average is not None:
        out[AVERAGE_WEIGHTS] = average
    return {**out, HEAD_OUTPUTS: head_outputs}


def _exp_rows(
    ops: Operands,
    w: np.ndarray,
    head: int,
    span: tuple[slice, int],
    blocked: Blocked | None,
    buffers: Scratch,
    dest: np.ndarray,
) -> None:
    """The weights of ``head`` for ``rows`` into ``w`` (b, M) and its output rows into ``dest`` (b, d_k),
    from the exp tile over keys ``[0, limit)`` (``span = (rows, limit)``); keys past ``limit`` get 0."""
    (rows, limit), b = span, span[0].stop - span[0].start
    queries = ops.queries(head, rows, buffers)
    sums = tiled_exp(ops, head, queries, limit, blocked, buffers)
    ops.normalize(sums, dest, (head, queries[0], rows, limit), (buffers.tile[:b, :limit], w[:, :limit]))
    w[:, limit:] = 0  # causally blocked


def _exact_rows(
    ops: Operands, out: dict[TensorName, np.ndarray], w: np.ndarray, head: int, rows: slice, allowed: np.ndarray | None
) -> np.ndarray:
    """Raw and scaled scores of ``head`` for ``rows`` (kept where asked for) and their softmax in ``w``.

    Returns the head's output rows.
    """
    raw = out[SCORES][head, rows] if SCORES in out else w
    scaled = out[SCALED][head, rows] if SCALED in out else w
    np.matmul(ops.q[head, rows], ops.keys(head).T, out=raw)  # (b, M)
    np.multiply(raw, ops.multiplier, out=scaled)
    if scaled is not w:
        np.copyto(w, scaled)
    softmax_rows_(w, allowed)
    return np.ldexp(w @ ops.values(head), ops.v_exponent)  # V is held scaled by 2^-v_exponent
