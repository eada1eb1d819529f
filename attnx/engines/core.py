"""Multi-head attention written once, over a small backend of array primitives per framework."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from attnx.spec import AttentionSpec, Linear

Array = Any  # a numpy.ndarray or a torch.Tensor, depending on the backend


class Backend(Protocol):
    """The primitives an engine supplies; everything else is shared arithmetic (``@``, ``*``, ...)."""

    def array(self, values: np.ndarray) -> Array:
        """``values`` in the engine's dtype and device (booleans stay boolean)."""

    def permute(self, x: Array, axes: tuple[int, ...]) -> Array:
        """Reorder the axes of ``x``."""

    def softmax_masked(self, x: Array, allowed: Array | None) -> Array:
        """Softmax over the last axis where ``allowed``; rows with no allowed key become zeros."""

    def mean0(self, x: Array) -> Array:
        """Mean over the first axis."""

    def to_numpy(self, x: Array) -> np.ndarray:
        """A NumPy array on the host."""


def split_heads(ops: Backend, x: Array, heads: int, layout: str) -> Array:
    """``[token, heads*d_k]`` -> ``[head, token, d_k]`` with head h on ``head_columns(h)``."""
    n, width = x.shape
    if layout == "interleaved":  # column j belongs to head j mod H
        return ops.permute(x.reshape(n, width // heads, heads), (2, 0, 1))  # (H, n, d_k)
    return ops.permute(x.reshape(n, heads, width // heads), (1, 0, 2))  # (H, n, d_k)


def merge_heads(ops: Backend, x: Array, layout: str) -> Array:
    """``[head, token, d_k]`` -> ``[token, heads*d_k]``: the inverse of ``split_heads``."""
    h, n, d_k = x.shape
    axes = (1, 2, 0) if layout == "interleaved" else (1, 0, 2)
    return ops.permute(x, axes).reshape(n, h * d_k)  # (n, H*d_k)


def linear(ops: Backend, x: Array, w: Linear) -> Array:
    """``x @ W + b``."""
    out = x @ ops.array(w.weight)
    return out + ops.array(w.bias) if w.bias is not None else out


def attention(ops: Backend, spec: AttentionSpec) -> dict[str, Array]:
    """Every intermediate of multi-head attention for ``spec``, as backend arrays.

    Keys match ``AttentionResult`` fields. With grouped K/V heads (GQA/MQA) the ``g = H / H_kv``
    query heads of a group are stacked along the query axis and share one matmul with their K/V
    head, so K and V are never repeated in memory.
    """
    if spec.x is not None:
        x = ops.array(spec.x)
        x_kv = ops.array(spec.x_kv) if spec.x_kv is not None else x
        q, k, v = linear(ops, x, spec.w_q), linear(ops, x_kv, spec.w_k), linear(ops, x_kv, spec.w_v)  # type: ignore[arg-type]
    else:
        q, k, v = ops.array(spec.q), ops.array(spec.k), ops.array(spec.v)
    h, h_kv, g = spec.heads, int(spec.kv_heads or spec.heads), spec.group_size
    n, m, d_k = spec.n_queries, spec.n_keys, spec.d_k
    q_heads = split_heads(ops, q, h, spec.layout)  # (H, N, d_k)
    k_heads = split_heads(ops, k, h_kv, spec.layout)  # (H_kv, M, d_k)
    v_heads = split_heads(ops, v, h_kv, spec.layout)  # (H_kv, M, d_k)

    scores = (q_heads.reshape(h_kv, g * n, d_k) @ ops.permute(k_heads, (0, 2, 1))).reshape(h, n, m)  # (H, N, M)
    scaled = scores * spec.multiplier  # (H, N, M); a Python float keeps the array's dtype
    allowed = spec.allowed()
    weights = ops.softmax_masked(scaled, None if allowed is None else ops.array(allowed))  # (H, N, M)
    head_outputs = (weights.reshape(h_kv, g * n, m) @ v_heads).reshape(h, n, d_k)  # (H, N, d_k)

    out: dict[str, Array] = {
        "q_heads": q_heads,
        "k_heads": k_heads,
        "v_heads": v_heads,
        "scores": scores,
        "scaled": scaled,
        "weights": weights,
        "head_outputs": head_outputs,
        "average_weights": ops.mean0(weights),  # (N, M)
    }
    kept = head_outputs
    if spec.dropped_heads:
        keep = np.ones((h, 1, 1))
        keep[list(spec.dropped_heads)] = 0.0
        kept = head_outputs * ops.array(keep)
        out["intact_output"] = merge_heads(ops, head_outputs, spec.layout)
        if spec.w_o is not None:
            out["intact_projected"] = linear(ops, out["intact_output"], spec.w_o)
    out["output"] = merge_heads(ops, kept, spec.layout)  # (N, d_model)
    if spec.w_o is not None:
        out["projected"] = linear(ops, out["output"], spec.w_o)  # (N, d_out)
    return out
