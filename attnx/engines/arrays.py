"""The array primitives of a model's forward pass besides attention (norms, MLPs, residuals), on an engine's arrays.

A forward pass keeps its residual stream where its engine computes: a NumPy array, or a torch tensor on the torch
engine's device, in the working dtype. The families' math (``attnx.models``) is written once with Python's
operators (``+``, ``*``, ``@``, indexing) and the few functions below, taken from the arrays they work on::

    xp = arrays_of(x)                                  # the primitives of the engine x lives on
    x / xp.sqrt(xp.mean(x * x) + eps) * xp.like(w)     # RMSNorm; the weight moved where x is

so nothing outside ``attnx/engines`` imports torch, and weights go to the device a layer at a time, as that layer
needs them. ``host`` brings an array back to NumPy (what a spec and a result hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Protocol, TypeAlias

import numpy as np

from attnx.core.choices import HALF

Array: TypeAlias = Any  # a NumPy array, or a torch tensor on the torch engine (the families' arrays quack alike)


def host_dtype(dtype: str) -> str:
    """The NumPy dtype that holds arrays computed in ``dtype`` on the host: float32 for a half type (``HALF``, which
    NumPy has no arithmetic for, bfloat16 not at all), which holds every one of their values exactly."""
    return "float32" if dtype in HALF else dtype


# erf(|x|) is 1 to float64 precision from here on (1 - erf(6) is 2e-17).
ERF_TOP = 6.0
ERF_STEP = 1 / 32  # grid spacing of the Taylor table: |x - grid point| <= 1/64
ERF_ORDER = 8  # Taylor terms beyond the value: the remainder is below 1e-16 at that distance


@cache
def _erf_table() -> tuple[np.ndarray, ...]:
    """Taylor coefficients of erf at every grid point of [0, ERF_TOP], highest order first.

    erf⁽ⁿ⁾(x) = 2/√π · (−1)ⁿ⁻¹ · Hₙ₋₁(x) · e^(−x²) for n ≥ 1 (Hₖ: physicists' Hermite polynomials),
    so the table is exact up to rounding: it is built from ``math.erf`` and that recurrence only.
    """
    grid = np.arange(round(ERF_TOP / ERF_STEP) + 2) * ERF_STEP
    hermite = [np.ones_like(grid), 2 * grid]
    for k in range(1, ERF_ORDER):
        hermite.append(2 * grid * hermite[k] - 2 * k * hermite[k - 1])
    gauss = 2 / math.sqrt(math.pi) * np.exp(-grid * grid)
    terms = [np.array([math.erf(g) for g in grid])]
    terms += [gauss * (-1) ** (n - 1) * hermite[n - 1] / math.factorial(n) for n in range(1, ERF_ORDER + 1)]
    return tuple(np.ascontiguousarray(t) for t in reversed(terms))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in float64, within one unit in the last place of ``math.erf``.

    NumPy has no erf: each value is a degree-8 Taylor polynomial around the nearest point of a 1/32
    grid (a table built once from ``math.erf``), about 6× faster than calling ``math.erf`` per element.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), ERF_TOP)
    index = np.rint(a * (1 / ERF_STEP)).astype(np.intp)
    h = a - index * ERF_STEP  # (…) distance to the grid point, |h| <= 1/64
    table = _erf_table()
    y = table[0].take(index)
    for coefficients in table[1:]:
        y *= h
        y += coefficients.take(index)
    return np.copysign(y, x)


class Arrays(Protocol):
    """What every engine's primitives offer (``NumpyArrays``; ``TorchArrays`` in the torch engine's module)."""

    name: str

    def like(self, values: np.ndarray) -> Array:
        """``values`` as this engine's array, in its dtype, on its device."""

    def indices(self, values: np.ndarray) -> Array:
        """Integer positions, as this engine indexes with them."""

    def host(self, x: Array) -> np.ndarray:
        """``x`` as a NumPy array."""

    def mean(self, x: Array) -> Array:
        """The mean over the last axis, kept as an axis of 1."""

    def sqrt(self, x: Array) -> Array:
        """Square root, elementwise."""

    def tanh(self, x: Array) -> Array:
        """Hyperbolic tangent, elementwise."""

    def exp(self, x: Array) -> Array:
        """Exponential, elementwise."""

    def erf(self, x: Array) -> Array:
        """The error function, elementwise."""

    def maximum(self, x: Array, low: float) -> Array:
        """``max(x, low)``, elementwise."""

    def minimum(self, x: Array, high: float) -> Array:
        """``min(x, high)``, elementwise."""

    def clip(self, x: Array, low: float, high: float) -> Array:
        """``x`` clamped to ``[low, high]``."""

    def zeros_like(self, x: Array) -> Array:
        """Zeros of ``x``'s shape and dtype."""

    def concatenate(self, parts: Sequence[Array]) -> Array:
        """``parts`` one under another (along the first axis)."""

    def split(self, x: Array, sizes: Sequence[int]) -> list[Array]:
        """``x`` cut along its first axis into consecutive parts of ``sizes`` rows."""


class NumpyArrays:
    """The primitives on NumPy arrays of one dtype."""

    name = "numpy"

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)

    def like(self, values: np.ndarray) -> np.ndarray:
        """``values`` as this engine's array in its dtype (no copy where it already is one)."""
        return np.asarray(values).astype(self.dtype, copy=False)

    def indices(self, values: np.ndarray) -> np.ndarray:
        """Integer positions, as this engine indexes with them."""
        return np.asarray(values, dtype=np.intp)

    @staticmethod
    def host(x: np.ndarray) -> np.ndarray:
        """``x`` as a NumPy array (itself)."""
        return x

    @staticmethod
    def mean(x: np.ndarray) -> np.ndarray:
        """The mean over the last axis, kept as an axis of 1."""
        return np.mean(x, axis=-1, keepdims=True)

    @staticmethod
    def sqrt(x: np.ndarray) -> np.ndarray:
        """Square root, elementwise."""
        return np.sqrt(x)

    @staticmethod
    def tanh(x: np.ndarray) -> np.ndarray:
        """Hyperbolic tangent, elementwise."""
        return np.tanh(x)

    @staticmethod
    def exp(x: np.ndarray) -> np.ndarray:
        """Exponential, elementwise."""
        return np.exp(x)

    @staticmethod
    def erf(x: np.ndarray) -> np.ndarray:
        """The error function, elementwise (``erf``: in float64, rounded to ``x``'s dtype)."""
        return erf(x).astype(x.dtype, copy=False)

    @staticmethod
    def maximum(x: np.ndarray, low: float) -> np.ndarray:
        """``max(x, low)``, elementwise."""
        return np.maximum(x, np.asarray(low, dtype=x.dtype))

    @staticmethod
    def minimum(x: np.ndarray, high: float) -> np.ndarray:
        """``min(x, high)``, elementwise."""
        return np.minimum(x, np.asarray(high, dtype=x.dtype))

    @staticmethod
    def clip(x: np.ndarray, low: float, high: float) -> np.ndarray:
        """``x`` clamped to ``[low, high]``."""
        return np.clip(x, np.asarray(low, dtype=x.dtype), np.asarray(high, dtype=x.dtype))

    @staticmethod
    def zeros_like(x: np.ndarray) -> np.ndarray:
        """Zeros of ``x``'s shape and dtype."""
        return np.zeros_like(x)

    @staticmethod
    def concatenate(parts: Sequence[np.ndarray]) -> np.ndarray:
        """``parts`` one under another (along the first axis)."""
        return np.concatenate(parts)

    @staticmethod
    def split(x: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
        """``x`` cut along its first axis into consecutive parts of ``sizes`` rows."""
        return np.split(x, np.cumsum(sizes)[:-1])


@cache
def numpy_arrays(dtype: str) -> NumpyArrays:
    """The NumPy primitives for ``dtype`` (one object per dtype)."""
    return NumpyArrays(dtype)


# Each engine whose arrays are not NumPy's registers their type as its module is imported (``register``): an
# array of that type exists only once its engine's module has made it.
_ENGINES: dict[type, Callable[[Any], Arrays]] = {}


def register(kind: type, arrays: Callable[[Any], Arrays]) -> None:
    """Let ``arrays_of`` take arrays of type ``kind`` to ``arrays(x)``, their engine's primitives."""
    _ENGINES[kind] = arrays


def arrays_of(x: Array) -> Arrays:
    """The primitives of the engine ``x`` lives on, in ``x``'s dtype (and device): NumPy's, or torch's."""
    if isinstance(x, np.ndarray):
        return numpy_arrays(x.dtype.name)
    for kind, arrays in _ENGINES.items():
        if isinstance(x, kind):
            return arrays(x)
    raise TypeError(f"no engine computes on {type(x).__name__}")


def host(x: Array) -> np.ndarray:
    """``x`` as a NumPy array on the host (a NumPy array as it is)."""
    return x if isinstance(x, np.ndarray) else arrays_of(x).host(x)
