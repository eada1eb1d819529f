"""Comparing tensors against a reference: differences, tolerances and verdicts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Against a float64 reference (see the README's "Tolerances"): float64 results agree to rtol 1e-7,
# atol 1e-7; float32 to rtol 1.3e-6 and atol 1e-5 scaled by the reference's magnitude.
FLOAT64_RTOL, FLOAT64_ATOL = 1e-7, 1e-7
FLOAT32_RTOL, FLOAT32_ATOL = 1.3e-6, 1e-5


@dataclass(frozen=True)
class Tolerance:
    """Elementwise test ``|a - r| <= atol + rtol * |r|``."""

    rtol: float
    atol: float


def default_tolerance(dtype: str, reference: np.ndarray) -> Tolerance:
    """The tolerance a result in ``dtype`` is held to against a float64 ``reference``."""
    if dtype == "float64":
        return Tolerance(FLOAT64_RTOL, FLOAT64_ATOL)
    magnitude = float(np.max(np.abs(reference))) if reference.size else 0.0
    return Tolerance(FLOAT32_RTOL, FLOAT32_ATOL * max(1.0, magnitude))


def tolerance_for(dtype: str, reference: np.ndarray, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """``default_tolerance``, with ``rtol`` and ``atol`` replacing its values where given."""
    default = default_tolerance(dtype, reference)
    return Tolerance(default.rtol if rtol is None else rtol, default.atol if atol is None else atol)


@dataclass(frozen=True)
class TensorDiff:
    """How far one tensor is from its reference.

    ``max_abs`` is max |a − r|; ``max_rel`` is max |a − r| / |r| over elements where r ≠ 0;
    ``worst`` is the index of the largest absolute difference; ``passed`` applies ``tolerance``
    to every element (NaN never passes).
    """

    max_abs: float
    max_rel: float
    worst: tuple[int, ...]
    tolerance: Tolerance
    passed: bool


def compare(actual: np.ndarray, reference: np.ndarray, tolerance: Tolerance) -> TensorDiff:
    """Compare ``actual`` with ``reference`` (same shape) in float64."""
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    diff = np.abs(a - r)
    if not diff.size:
        return TensorDiff(0.0, 0.0, (), tolerance, True)
    worst = np.unravel_index(int(np.argmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
    nonzero = r != 0
    max_rel = float(np.max(diff[nonzero] / np.abs(r[nonzero]))) if nonzero.any() else 0.0
    passed = bool(np.all(diff <= tolerance.atol + tolerance.rtol * np.abs(r)))
    return TensorDiff(float(np.max(diff)), max_rel, tuple(int(i) for i in worst), tolerance, passed)
