"""The parts of a transformer block besides attention, in NumPy: LayerNorm, activations, linear maps."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np

# erf(|x|) is 1 to float64 precision from here on (1 - erf(6) is 2e-17).
ERF_TOP = 6.0
ERF_STEP = 1 / 32  # grid spacing of the Taylor table: |x - grid point| <= 1/64
ERF_ORDER = 8  # Taylor terms beyond the value: the remainder is below 1e-16 at that distance


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis (biased variance, as torch), in ``x``'s dtype."""
    centred = x - x.mean(axis=-1, keepdims=True)
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + eps) * weight + bias


def dense(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight + bias`` with ``weight`` stored input-major (``[in, out]``), in ``x``'s dtype."""
    out = x @ weight.astype(x.dtype, copy=False)
    return out + bias.astype(x.dtype, copy=False) if bias is not None else out


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


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU with the exact normal CDF, x·Φ(x) = x/2·(1 + erf(x/√2)), computed in float64 (BERT's ``gelu``)."""
    wide = np.asarray(x, dtype=np.float64)
    return (0.5 * wide * (1.0 + erf(wide * (1 / math.sqrt(2))))).astype(x.dtype, copy=False)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (GPT-2's ``gelu_new``), in ``x``'s dtype."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + np.tanh(inner))


def silu(x: np.ndarray) -> np.ndarray:
    """x·sigmoid(x) (Llama's ``silu``), with sigmoid written as (1 + tanh(x/2))/2: no overflow for any x."""
    half = np.asarray(0.5, dtype=x.dtype)
    scaled = x * half
    out = np.tanh(scaled)  # then in place: an MLP's hidden layer is the largest array of a layer
    out += 1
    out *= scaled
    return out


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, 0)


# Activation names as Hugging Face configs spell them (`hidden_act`, `activation_function`).
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": relu,
    "silu": silu,
}
