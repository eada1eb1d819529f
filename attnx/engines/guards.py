"""Checks around one engine run: array sizes and the dtype's range before it, finite numbers after it."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from attnx.engines.core import MATRICES
from attnx.errors import LimitError, NumericError
from attnx.result import AttentionResult
from attnx.spec import AttentionSpec, largest_abs


def check_sizes(spec: AttentionSpec, needs: Collection[str] | None = None) -> None:
    """Refuse, before anything is allocated, arrays that would pass the caps ``spec`` was read under.

    Q, K and V (after any projection) and, when ``needs`` asks for them (None: everything), the
    ``[head, query, key]`` matrices; a trace, which computes one query row, is checked for that row
    only. Without the matrices the engines work in blocks and never hold them.
    """
    if spec.limits is None:
        return
    n, m = spec.n_queries, spec.n_keys
    arrays = [("Q", (n, spec.d_model)), ("K and V", (m, spec.kv_width))]
    if needs is None or MATRICES & set(needs):
        arrays.append(("the scores", (spec.heads, n, m)))
    for what, shape in arrays:
        problem = spec.limits.shape_problem(shape)
        if problem:
            raise LimitError(f"{spec.source}: {what}: {problem}")


def check_range(spec: AttentionSpec, dtype: str) -> None:
    """Refuse inputs beyond what ``dtype`` holds: cast to it, they would become infinite."""
    largest = float(np.finfo(dtype).max)
    if largest >= np.finfo(np.float64).max or spec.magnitude <= largest:
        return  # the spec's arrays are float64 already, or every value fits
    for name, array in spec.number_arrays().items():
        if largest_abs(array) > largest:
            index = np.unravel_index(np.abs(array).argmax(), array.shape)
            where = "".join(f"[{i}]" for i in index)
            raise NumericError(
                f"{spec.source}: {name}{where} = {array[index]:.4g} is beyond the largest {dtype} "
                f"({largest:.4g}); use --dtype float64"
            )


def check_finite(spec: AttentionSpec, result: AttentionResult) -> None:
    """Refuse a result whose scores or outputs overflowed to infinity or NaN, saying where.

    The concatenated output holds the head outputs' values (or zeros, for dropped heads), so it is
    scanned only when the head outputs were not kept.
    """
    for name in ("scaled", "head_outputs", "output", "projected"):
        array = getattr(result, name)
        if name == "output" and result.head_outputs is not None:
            continue
        if array is None or _all_finite(array):
            continue
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise NumericError(f"{spec.source}: {_what(name, index, spec, result)} overflows {_remedy(result.dtype)}")


def _all_finite(array: np.ndarray) -> bool:
    """True when no element is inf or NaN, without a temporary array as large as ``array``.

    One pass usually: a sum is finite only when every term is (inf and NaN propagate); a sum of
    finite terms that overflowed is told apart by the min and max.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(array.sum()):
            return True
    return bool(np.isfinite(array.min()) and np.isfinite(array.max()))


def _what(name: str, index: tuple[int, ...], spec: AttentionSpec, result: AttentionResult) -> str:
    if name == "scaled":
        h, i, j = index
        raw_finite = result.scores is None or np.isfinite(result.scores[index])
        kind = "scaled score" if raw_finite else "score Q·K"
        return f"the {kind} of query {spec.tokens[i]!r} and key {spec.key_tokens[j]!r} in head {h + 1}"
    if name == "head_outputs":
        return f"the output of head {index[0] + 1} for query {spec.tokens[index[1]]!r}"
    if name == "output":
        return f"the output for query {spec.tokens[index[0]]!r}"
    return f"the projected output for query {spec.tokens[index[0]]!r}"


def _remedy(dtype: str) -> str:
    largest = float(np.finfo(dtype).max)
    fix = "use --dtype float64" if largest < np.finfo(np.float64).max else "scale the inputs down"
    return f"{dtype} (beyond ±{largest:.4g}); {fix}"
