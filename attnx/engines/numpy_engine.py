"""The NumPy engine: the shared algorithm on NumPy arrays, all heads batched, on the CPU."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import TensorName
from attnx.engines.arrays import NumpyArrays, numpy_arrays
from attnx.engines.core import attention, dense
from attnx.engines.tiled import Rules, attend_tiled, softmax_rows_
from attnx.errors import EngineUnavailableError

DTYPES = ("float64", "float32")
DENSE_LIMIT = 1 << 20  # H·N·M up to this is computed in one piece (about 8 MiB of float64 scores)


class NumpyBackend:
    """Array primitives in one NumPy dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)

    def array(self, values: np.ndarray) -> np.ndarray:
        """``values`` as this dtype (booleans stay boolean)."""
        return values if values.dtype == bool else values.astype(self.dtype, copy=False)

    def permute(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """Reorder axes (a view)."""
        return x.transpose(axes)

    def softmax_masked(self, x: np.ndarray, allowed: np.ndarray | None, *, reuse: bool = False) -> np.ndarray:
        """Stable softmax over the last axis: over ``x`` itself with ``reuse``, else in a fresh array."""
        return softmax_rows_(x if reuse else x.copy(), allowed)

    def tanh(self, x: np.ndarray) -> np.ndarray:
        """Hyperbolic tangent."""
        return np.tanh(x)

    def join(self, x: np.ndarray, column: np.ndarray) -> np.ndarray:
        """``x`` and ``column`` side by side on the last axis (a new array)."""
        return np.concatenate([x, column], axis=-1)

    def attend(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, keep: frozenset[TensorName]
    ) -> dict[TensorName, np.ndarray]:
        """Small problems in one piece; larger ones in tiles on all CPUs (see attnx.engines.tiled), but for a soft
        cap or learned sinks, which the tiles' exp without a max pass cannot take."""
        (h, n, _), m = q.shape, k.shape[1]
        if h * n * m <= DENSE_LIMIT or spec.settings.dense_only:
            return dense(self, q, k, v, spec, keep)
        return attend_tiled(q, k, v, tiled_rules(spec), keep)

    def to_numpy(self, x: np.ndarray) -> np.ndarray:
        """Already NumPy."""
        return x


def tiled_rules(spec: AttentionSpec) -> Rules:
    """The settings of ``spec`` that the tiled kernel reads: the only place it meets the spec."""
    return Rules(
        multiplier=spec.multiplier,
        layout=spec.settings.layout,
        future_hidden=spec.masking.future_hidden,
        beyond_causal=spec.masking.beyond_causal,
        positions=spec.positions,
        allowed=spec.allowed,
        key_limit=spec.key_limit,
    )


class NumpyEngine:
    """The NumPy engine: all heads batched on the CPU, whole arrays for small problems, tiles for larger ones."""

    name = "numpy"
    stacks = True  # problems alike together: attnx.engines.alike
    traced = True  # NumPy's arrays are allocated where tracemalloc sees them

    def version(self) -> str:
        """Version of the library behind this engine."""
        return np.__version__

    def devices(self) -> list[str]:
        """Devices this engine can run on: the CPU."""
        return ["cpu"]

    def dtypes(self, device: str) -> tuple[str, ...]:
        """Dtypes supported on ``device``, the default first."""
        return DTYPES

    def resolve_device(self, requested: str) -> str:
        """``auto`` and ``cpu`` mean the CPU; anything else is unavailable to NumPy."""
        if requested in ("auto", "cpu"):
            return "cpu"
        raise EngineUnavailableError(
            f"the numpy engine runs on the CPU only, not {requested!r}; use --engine torch for {requested}"
        )

    def attend(
        self, spec: AttentionSpec, dtype: str, device: str, needs: Collection[TensorName] | None
    ) -> AttentionResult:
        """Compute multi-head attention for ``spec`` in ``dtype``: the arrays in ``needs`` (None: all)."""
        arrays = attention(NumpyBackend(dtype), spec, needs)
        # The multiplier is applied as a Python float, which keeps float32 arrays float32; report it
        # as the dtype holds it.
        scale = float(np.dtype(dtype).type(spec.multiplier))
        return AttentionResult.assemble(
            spec, arrays, scale=scale, engine=self.name, device=device, dtype=dtype, needs=needs
        )

    def arrays(self, dtype: str, device: str) -> NumpyArrays:
        """The NumPy primitives of a model's forward pass in ``dtype`` (on the CPU, whatever ``device`` says)."""
        return numpy_arrays(dtype)
