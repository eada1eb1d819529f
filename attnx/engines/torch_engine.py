"""The PyTorch engine: the shared algorithm on torch tensors (CPU, CUDA, MPS), results back in NumPy."""

from __future__ import annotations

import numpy as np
import torch

from attnx.engines.core import attention
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


class TorchBackend:
    """Array primitives as torch tensors of one dtype on one device."""

    def __init__(self, dtype: str, device: str) -> None:
        self.dtype = getattr(torch, dtype)
        self.device = torch.device(device)

    def array(self, values: np.ndarray) -> torch.Tensor:
        """A tensor copy of ``values`` on the device (booleans stay boolean)."""
        dtype = torch.bool if values.dtype == bool else self.dtype
        return torch.tensor(values, dtype=dtype, device=self.device)

    def permute(self, x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
        """Reorder dimensions (a view)."""
        return x.permute(axes)

    def softmax_masked(self, x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """torch.softmax where allowed; rows with no allowed key are zeros, not NaN."""
        if allowed is None:
            return torch.softmax(x, dim=-1)
        weights = torch.softmax(x.masked_fill(~allowed, float("-inf")), dim=-1)
        return torch.nan_to_num(weights, nan=0.0)

    def mean0(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over the first dimension."""
        return x.mean(dim=0)

    def to_numpy(self, x: torch.Tensor) -> np.ndarray:
        """A NumPy copy on the host."""
        return x.detach().to("cpu").contiguous().numpy()


def attend(spec: AttentionSpec, dtype: str = "float64", device: str = "cpu") -> AttentionResult:
    """Compute every intermediate of multi-head attention for ``spec`` with torch."""
    backend = TorchBackend(dtype, device)
    with torch.inference_mode():
        arrays = {name: backend.to_numpy(t) for name, t in attention(backend, spec).items()}
        scale = float(torch.tensor(spec.multiplier, dtype=backend.dtype))
    return AttentionResult.assemble(spec, arrays, scale=scale, engine=NAME, device=str(backend.device), dtype=dtype)
