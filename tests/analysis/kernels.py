"""A zoo of attention kernels in torch: one right, and one wrong in each way attnx diagnoses.

Each kernel takes q ``[1, H, N, d]``, k and v ``[1, H_kv, M, d]`` in the kernel's dtype, is causal
(top-left, as SDPA's ``is_causal``) with grouped K/V heads, and returns what a kernel hands over:
``("head_outputs", [H, N, d])`` or ``("output", [N, H·d])``, as float64 NumPy values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Kernel = Callable[..., tuple[str, np.ndarray]]


def _sdpa(q, k, v, **options):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **options)


def _causal(n: int, m: int, shift: int = 0):  # type: ignore[no-untyped-def]
    import torch

    return torch.ones(n, m, dtype=torch.bool).tril(shift)


def _heads(out) -> tuple[str, np.ndarray]:  # type: ignore[no-untyped-def]
    return "head_outputs", out[0].double().numpy()


def _manual(q, k, v, *, axis: int = -1, normalise: bool = True):  # type: ignore[no-untyped-def]
    """softmax(QKᵀ/√d) V written out, in the inputs' dtype, with the softmax over ``axis``."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~_causal(q.shape[2], k.shape[2]), float("-inf"))
    if normalise:  # the softmax in float32 at least, as half-precision kernels do
        wide = scores.to(torch.promote_types(scores.dtype, torch.float32))
        weights = torch.softmax(wide, dim=axis).nan_to_num(0.0).to(q.dtype)
    else:
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True)).to(q.dtype)
    return weights @ v


def right(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_sdpa(q, k, v, is_causal=True))


def scale_d_model(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_sdpa(q, k, v, is_causal=True, scale=1 / math.sqrt(q.shape[1] * q.shape[3])))


def no_scale(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_sdpa(q, k, v, is_causal=True, scale=1.0))


def late(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_sdpa(q, k, v, attn_mask=_causal(q.shape[2], k.shape[2], 1)))


def early(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_sdpa(q, k, v, attn_mask=_causal(q.shape[2], k.shape[2], -1)))


def bottom_right(q, k, v):  # type: ignore[no-untyped-def]
    n, m = q.shape[2], k.shape[2]
    return _heads(_sdpa(q, k, v, attn_mask=_causal(n, m, m - n)))


def tiled(q, k, v):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    return _heads(F.scaled_dot_product_attention(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1),
                                                 is_causal=True))  # fmt: skip


def interleaved(q, k, v):  # type: ignore[no-untyped-def]
    """Heads taken from interleaved columns of Q, K, V (column j → head j mod H) and written back so."""

    def merge(x):  # type: ignore[no-untyped-def]  # [1, H, N, d] -> [N, H·d], head h on columns h·d …
        return x[0].transpose(0, 1).reshape(x.shape[2], -1)

    def split(x, h):  # type: ignore[no-untyped-def]  # [N, H·d] -> [1, H, N, d], head h on columns h, h + H, …
        return x.reshape(x.shape[0], -1, h).permute(2, 0, 1)[None]

    hq, hk = q.shape[1], k.shape[1]
    out = _sdpa(split(merge(q), hq), split(merge(k), hk), split(merge(v), hk), is_causal=True)
    return "output", out[0].permute(1, 2, 0).reshape(q.shape[2], -1).double().numpy()


def over_queries(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_manual(q, k, v, axis=-2))


def unnormalised(q, k, v):  # type: ignore[no-untyped-def]
    return _heads(_manual(q, k, v, normalise=False))


# Each wrong kernel and the bug attnx names for it.
WRONG: dict[str, tuple[Kernel, str]] = {
    "scale_d_model": (scale_d_model, "scale 1/√d_model"),
    "no_scale": (no_scale, "no scale"),
    "late": (late, "causal mask one key late"),
    "early": (early, "causal mask one key early"),
    "tiled": (tiled, "K/V heads tiled"),
    "interleaved": (interleaved, "heads from interleaved columns"),
    "over_queries": (over_queries, "softmax over queries"),
    "unnormalised": (unnormalised, "weights not normalised"),
}
