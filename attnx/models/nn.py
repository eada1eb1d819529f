"""The parts of a transformer block besides attention: LayerNorm, activations, linear maps, on any engine's arrays.

Each works on the arrays it is given (``attnx.engines.arrays``: NumPy's, or torch tensors on the torch engine) and
moves its weights, NumPy arrays read from the checkpoint, to where its input lives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from attnx.engines.arrays import Array, arrays_of
from attnx.engines.erf import erf

__all__ = ["ACTIVATIONS", "dense", "erf", "gelu", "gelu_tanh", "layer_norm", "relu", "silu"]


def layer_norm(x: Array, weight: np.ndarray, bias: np.ndarray, eps: float) -> Array:
    """LayerNorm over the last axis (biased variance, as torch), in ``x``'s dtype."""
    xp = arrays_of(x)
    centred = x - xp.mean(x)
    variance = xp.mean(centred * centred)
    return centred / xp.sqrt(variance + eps) * xp.like(weight) + xp.like(bias)


def dense(x: Array, weight: np.ndarray, bias: np.ndarray | None) -> Array:
    """``x @ weight + bias`` with ``weight`` stored input-major (``[in, out]``), in ``x``'s dtype."""
    xp = arrays_of(x)
    out = x @ xp.like(weight)
    return out + xp.like(bias) if bias is not None else out


def gelu(x: Array) -> Array:
    """GELU with the exact normal CDF, x·Φ(x) = x/2·(1 + erf(x/√2)) (BERT's ``gelu``): on NumPy arrays computed in
    float64 and rounded once; on another engine in ``x``'s dtype, with its erf."""
    if not isinstance(x, np.ndarray):
        return 0.5 * x * (1.0 + arrays_of(x).erf(x * (1 / math.sqrt(2))))
    wide = np.asarray(x, dtype=np.float64)
    return (0.5 * wide * (1.0 + erf(wide * (1 / math.sqrt(2))))).astype(x.dtype, copy=False)


def gelu_tanh(x: Array) -> Array:
    """GELU's tanh approximation (GPT-2's ``gelu_new``), in ``x``'s dtype."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + arrays_of(x).tanh(inner))


def silu(x: Array) -> Array:
    """x·sigmoid(x) (Llama's ``silu``), with sigmoid written as (1 + tanh(x/2))/2: no overflow for any x."""
    scaled = x * 0.5  # a Python float keeps x's dtype
    out = arrays_of(x).tanh(scaled)  # then in place: an MLP's hidden layer is the largest array of a layer
    out += 1
    out *= scaled
    return out


def relu(x: Array) -> Array:
    """max(x, 0)."""
    return arrays_of(x).maximum(x, 0.0)


# Activation names as Hugging Face configs spell them (`hidden_act`, `activation_function`).
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": relu,
    "silu": silu,
}
