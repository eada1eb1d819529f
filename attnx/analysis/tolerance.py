"""Tolerances against a float64 reference, per dtype, and one tensor compared under them: differences and a verdict."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from attnx.core.choices import KERNEL_DTYPES
from attnx.errors import ConfigError

# Against a float64 reference (docs/kernels.md says where each comes from): float64 results agree to rtol 1e-7,
# atol 1e-7; float32 to rtol 1.3e-6 and atol 1e-5 scaled by the reference's magnitude (at least 1), the rtol of
# torch.testing.assert_close. Half precision: torch's rtol, and an atol of two epsilons of the dtype times the
# reference's largest magnitude (torch's 1e-5 fails correct half-precision kernels; a floor of 1 on the
# magnitude would let a wrong kernel whose outputs are small pass).
FLOAT64_RTOL, FLOAT64_ATOL = 1e-7, 1e-7
FLOAT32_RTOL, FLOAT32_ATOL = 1.3e-6, 1e-5
HALF_RTOL = {"float16": 1e-3, "bfloat16": 1.6e-2}
HALF_ATOL_EPSILONS = 2.0
EPSILON = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@dataclass(frozen=True)
class Tolerance:
    """Elementwise test ``|a - r| <= atol + rtol * |r|``."""

    rtol: float
    atol: float

    def within(self, errors: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Where ``errors`` (``|a − r|``) are within the tolerance of ``reference``, elementwise. An infinite or NaN
        error never is; a bound beyond float64 (rtol 1e300 on values near 1e10) is infinite, so every finite error is
        within it, with no overflow warning (and no NaN from ``inf × 0``: the tolerances are finite,
        ``check_tolerances``)."""
        with np.errstate(over="ignore"):
            bound = self.atol + self.rtol * np.abs(np.asarray(reference, dtype=np.float64))
        return np.asarray(np.isfinite(errors) & (errors <= bound))


def loosest(*dtypes: str | None) -> str:
    """The least precise of ``dtypes`` (unknown names and None count as float64)."""
    return max((d if d in KERNEL_DTYPES else "float64" for d in dtypes), key=KERNEL_DTYPES.index, default="float64")


def default_tolerance(dtype: str, reference: np.ndarray) -> Tolerance:
    """The tolerance a result computed in ``dtype`` is held to against a float64 ``reference``."""
    if dtype not in KERNEL_DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(KERNEL_DTYPES)} to choose a tolerance, got {dtype!r}")
    if dtype == "float64":
        return Tolerance(FLOAT64_RTOL, FLOAT64_ATOL)
    finite = np.abs(reference[np.isfinite(reference)])
    magnitude = float(finite.max()) if finite.size else 0.0
    if dtype == "float32":
        return Tolerance(FLOAT32_RTOL, FLOAT32_ATOL * max(1.0, magnitude))
    return Tolerance(HALF_RTOL[dtype], HALF_ATOL_EPSILONS * EPSILON[dtype] * magnitude)


def check_tolerances(rtol: object, atol: object, names: tuple[str, str] = ("rtol", "atol")) -> None:
    """Refuse a tolerance that is not a finite number of at least 0 (None: the default), naming it as ``names``
    say (``--rtol`` on the command line): an infinite one would turn ``inf × 0`` into NaN and fail equal values,
    a NaN one would fail everything, a negative one would fail even equal values. What is no real number (a
    string, a bool, an array) is refused as such."""
    for value, name in zip((rtol, atol), names, strict=True):
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name} must be a number, got {type(value).__name__}")
        try:
            number = float(value)
        except OverflowError:  # 10**400: an int no float64 holds
            raise ConfigError(f"{name} must be a finite number ≥ 0, got a number beyond float64's range") from None
        if not math.isfinite(number) or number < 0:
            raise ConfigError(f"{name} must be a finite number ≥ 0, got {shown(number)}")


def shown(number: float) -> str:
    """A number as a message quotes it: as Python writes a float, without a trailing ``.0`` (``-1``, ``inf``,
    ``nan``, ``1e-07``, ``0.25``), cut to 40 characters."""
    return repr(number).removesuffix(".0")[:40]


def tolerance_for(dtype: str, reference: np.ndarray, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """``default_tolerance``, with ``rtol`` and ``atol`` replacing its values where given (``check_tolerances``)."""
    check_tolerances(rtol, atol)
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


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a − b|`` in float64, elementwise: infinite where it is beyond float64 (1e308 against -1e308), NaN where
    either is NaN or both are the same infinity; no warning either way."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))


def compare(actual: np.ndarray, reference: np.ndarray, tolerance: Tolerance) -> TensorDiff:
    """Compare ``actual`` with ``reference`` (same shape) in float64 (``difference``)."""
    r = np.asarray(reference, dtype=np.float64)
    diff = difference(actual, r)
    if not diff.size:
        return TensorDiff(0.0, 0.0, (), tolerance, True)
    worst = np.unravel_index(int(np.argmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
    nonzero = r != 0
    with np.errstate(over="ignore"):
        max_rel = float(np.max(diff[nonzero] / np.abs(r[nonzero]))) if nonzero.any() else 0.0
    passed = bool(np.all(tolerance.within(diff, r)))
    return TensorDiff(float(np.max(diff)), max_rel, tuple(int(i) for i in worst), tolerance, passed)
