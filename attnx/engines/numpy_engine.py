"""The NumPy engine: all heads at once with batched matmuls and an in-place stable softmax."""

from __future__ import annotations

import math

import numpy as np

from attnx.errors import EngineUnavailableError
from attnx.result import AttentionResult
from attnx.spec import AttentionSpec

NAME = "numpy"
DTYPES = ("float64", "float32")


def version() -> str:
    """Version of the library behind this engine."""
    return np.__version__


def devices() -> list[str]:
    """Devices this engine can run on: the CPU."""
    return ["cpu"]


def dtypes(device: str) -> tuple[str, ...]:
    """Dtypes supported on ``device``, the default first."""
    return DTYPES


def resolve_device(requested: str) -> str:
    """``auto`` and ``cpu`` mean the CPU; anything else is unavailable to NumPy."""
    if requested in ("auto", "cpu"):
        return "cpu"
    raise EngineUnavailableError(
        f"the numpy engine runs on the CPU only, not {requested!r}; use --engine torch for {requested}"
    )


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """``[token, d_model]`` -> ``[head, token, d_k]``; head h gets columns h*d_k .. (h+1)*d_k-1."""
    n, d_model = x.shape
    return x.reshape(n, heads, d_model // heads).transpose(1, 0, 2)  # (H, n, d_k)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """``[head, token, d_k]`` -> ``[token, head*d_k]``: the concatenation of the heads."""
    h, n, d_k = x.shape
    return x.transpose(1, 0, 2).reshape(n, h * d_k)  # (n, H*d_k)


def softmax_(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place: subtract the row maximum, exponentiate, normalise."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def attend(spec: AttentionSpec, dtype: str = "float64", device: str = "cpu") -> AttentionResult:
    """Compute every intermediate of multi-head attention for ``spec`` in ``dtype``."""
    dt = np.dtype(dtype)
    q = split_heads(spec.q.astype(dt), spec.heads)  # (H, N, d_k)
    k = split_heads(spec.k.astype(dt), spec.heads)  # (H, M, d_k)
    v = split_heads(spec.v.astype(dt), spec.heads)  # (H, M, d_k)
    # The scale is kept in the array's dtype: a float64 scalar would promote float32 scores.
    scale = dt.type(1.0 / math.sqrt(spec.d_k))

    scores = q @ k.transpose(0, 2, 1)  # (H, N, M)
    scaled = scores * scale  # (H, N, M)
    weights = softmax_(scaled.copy())  # (H, N, M)
    head_outputs = weights @ v  # (H, N, d_k)
    arrays = {
        "q_heads": q,
        "k_heads": k,
        "v_heads": v,
        "scores": scores,
        "scaled": scaled,
        "weights": weights,
        "head_outputs": head_outputs,
        "output": merge_heads(head_outputs),  # (N, d_model)
        "average_weights": weights.mean(axis=0),  # (N, M)
    }
    return AttentionResult.assemble(spec, arrays, scale=float(scale), engine=NAME, device=device, dtype=dt.name)
