"""The PyTorch engine: all heads batched on CPU, CUDA or MPS, results moved back to NumPy."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnx.errors import EngineUnavailableError
from attnx.result import AttentionResult
from attnx.spec import AttentionSpec

NAME = "torch"
PREFERENCE = ("cuda", "mps", "cpu")


def version() -> str:
    """Version of PyTorch."""
    return str(torch.__version__)


def devices() -> list[str]:
    """Devices present on this machine, in the order ``auto`` prefers them."""
    present = {
        "cuda": torch.cuda.is_available(),
        "mps": bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available(),
        "cpu": True,
    }
    return [name for name in PREFERENCE if present[name]]


def dtypes(device: str) -> tuple[str, ...]:
    """Dtypes supported on ``device``, the default first: MPS has no float64."""
    return ("float32",) if device.startswith("mps") else ("float64", "float32")


def resolve_device(requested: str) -> str:
    """The one place devices are chosen: ``auto`` picks CUDA, then MPS, then CPU."""
    present = devices()
    if requested == "auto":
        return present[0]
    if requested.split(":")[0] not in present:
        raise EngineUnavailableError(
            f"device {requested!r} is not available to torch here; available: {', '.join(present)}"
        )
    return requested


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    n, d_model = x.shape
    return x.view(n, heads, d_model // heads).transpose(0, 1)  # (H, n, d_k)


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to("cpu").contiguous().numpy()


def attend(spec: AttentionSpec, dtype: str = "float64", device: str = "cpu") -> AttentionResult:
    """Compute every intermediate of multi-head attention for ``spec`` with torch."""
    dt = getattr(torch, dtype)
    dev = torch.device(device)
    n = spec.n_queries
    with torch.inference_mode():
        q, k, v = (
            _split_heads(torch.tensor(x, dtype=dt, device=dev), spec.heads)  # (H, tokens, d_k)
            for x in (spec.q, spec.k, spec.v)
        )
        # A Python float multiplies in the tensor's dtype; report the multiplier as that dtype holds it.
        scale = 1.0 / math.sqrt(spec.d_k)
        scores = q @ k.transpose(-2, -1)  # (H, N, M)
        scaled = scores * scale  # (H, N, M)
        weights = torch.softmax(scaled, dim=-1)  # (H, N, M)
        head_outputs = weights @ v  # (H, N, d_k)
        output = head_outputs.transpose(0, 1).reshape(n, spec.d_model)  # (N, d_model)
        tensors = {
            "q_heads": q,
            "k_heads": k,
            "v_heads": v,
            "scores": scores,
            "scaled": scaled,
            "weights": weights,
            "head_outputs": head_outputs,
            "output": output,
            "average_weights": weights.mean(dim=0),  # (N, M)
        }
        arrays = {name: _numpy(t) for name, t in tensors.items()}
    return AttentionResult.assemble(
        spec, arrays, scale=float(torch.tensor(scale, dtype=dt)), engine=NAME, device=str(dev), dtype=dtype
    )
