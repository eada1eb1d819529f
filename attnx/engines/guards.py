"""Checks around one engine run: the caps it is held to and the dtype's range before it, finite numbers after it."""

from __future__ import annotations

import math

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec, ProjectedInputs, largest_abs
from attnx.core.tensors import HEAD_OUTPUTS, OUTPUT, PROJECTED, SCALED, TensorName
from attnx.errors import NumericError
from attnx.limits import Limits

# The share of a dtype's range that a bound may reach: rounding in long sums stays far inside the rest.
ROUNDING_ROOM = 2.0**-10
BFLOAT16_MAX = float.fromhex("0x1.fep127")  # NumPy has no bfloat16: its largest number, 3.39e38


def largest_in(dtype: str) -> float:
    """The largest finite number ``dtype`` holds (bfloat16's too, which NumPy lacks)."""
    return BFLOAT16_MAX if dtype == "bfloat16" else float(np.finfo(dtype).max)


def caps_for(spec: AttentionSpec, limits: Limits | None = None) -> Limits:
    """``limits`` if given, else the caps ``spec`` was read under, else the defaults replaced by ``ATTNX_MAX_*``."""
    if limits is not None:
        return limits
    return spec.limits if spec.limits is not None else Limits.from_env()


def check_range(spec: AttentionSpec, dtype: str) -> None:
    """Refuse inputs beyond what ``dtype`` holds: cast to it, they would become infinite."""
    largest = largest_in(dtype)
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


def cannot_overflow(spec: AttentionSpec, dtype: str) -> bool:
    """True when the inputs' magnitude rules out any overflow in ``dtype``: the result need not be scanned.

    With every input value within a: Q, K and V are within b = a (or d_in·a² + a, projected);
    a raw or scaled score within d_k·b²·max(1, |s|), plus a with a score bias (within a); a head output,
    a weighted mean of V's rows, within b, and the engines' sums of M rescaled terms within M·b; the
    projected output within d_model·b·a + a. Rotary positions turn pairs of Q's and K's numbers: each
    stays within √2·b, so a score within 2·d_k·b². A head norm (QK-norm) of width w (d_k per head, H·d_k
    over the projection) leaves each number within √w·a (a unit-RMS vector's largest is √w, times a
    weight within a), so Q and K are then within max(b, √w·a).
    Each must stay below the dtype's largest number with room for rounding.
    Only below float64, whose range ``check_range`` has already measured a for; in float64,
    measuring the inputs would cost more than the scan of the output it spares.
    """
    largest = largest_in(dtype)
    if largest >= np.finfo(np.float64).max:
        return False
    a = spec.magnitude  # NaN when any input is NaN: every comparison below is then False
    inputs = spec.inputs
    projections = [inputs.w_q, inputs.w_k, inputs.w_v] if isinstance(inputs, ProjectedInputs) else []
    b = max(w.d_in for w in projections) * a * a + a if projections else a
    norms = [n for n in (inputs.q_norm, inputs.k_norm) if n is not None] if isinstance(inputs, ProjectedInputs) else []
    qk = max(b, math.sqrt(max(n.weight.size for n in norms)) * a) if norms else b  # a norm's width: d_k or H · d_k
    rotary = spec.settings.rotary  # turning can double a score, and an attention factor scales q and k alike
    turned = 1.0 if rotary is None else 2.0 * rotary.attention**2
    bias = 0.0 if spec.score_bias is None else a  # a score bias is among the inputs a bounds
    bounds = [turned * spec.d_k * qk * qk * max(1.0, abs(spec.multiplier)) + bias, spec.n_keys * b]
    if spec.w_o is not None:
        bounds.append(spec.d_model * b * a + a)
    return all(bound <= largest * ROUNDING_ROOM for bound in bounds)


def check_finite(spec: AttentionSpec, result: AttentionResult) -> None:
    """Refuse a result whose scores or outputs overflowed to infinity or NaN, saying where.

    The concatenated output holds the head outputs' values (or zeros, for dropped heads), so it is
    scanned only when the head outputs were not kept.
    """
    for name in (SCALED, HEAD_OUTPUTS, OUTPUT, PROJECTED):
        array = getattr(result, name)
        if name == OUTPUT and result.head_outputs is not None:
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


def _what(name: TensorName, index: tuple[int, ...], spec: AttentionSpec, result: AttentionResult) -> str:
    if name == SCALED:
        h, i, j = index
        raw_finite = result.scores is None or np.isfinite(result.scores[index])
        kind = "scaled score" if raw_finite else "score Q·K"
        return f"the {kind} of query {spec.tokens[i]!r} and key {spec.key_tokens[j]!r} in head {h}"
    if name == HEAD_OUTPUTS:
        return f"the output of head {index[0]} for query {spec.tokens[index[1]]!r}"
    if name == OUTPUT:
        return f"the output for query {spec.tokens[index[0]]!r}"
    return f"the projected output for query {spec.tokens[index[0]]!r}"


def _remedy(dtype: str) -> str:
    largest = largest_in(dtype)
    fix = "use --dtype float64" if largest < np.finfo(np.float64).max else "scale the inputs down"
    return f"{dtype} (beyond ±{largest:.4g}); {fix}"
