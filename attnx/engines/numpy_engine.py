"""The NumPy engine: the shared algorithm on NumPy arrays, all heads batched, on the CPU."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import TensorName
from attnx.engines.core import attention, dense
from attnx.engines.erf import erf
from attnx.engines.tiled import Rules, attend_tiled, softmax_rows_
from attnx.errors import EngineUnavailableError

DTYPES = ("float64", "float32")
DENSE_LIMIT = 1 << 20  # H·N·M up to this is computed in one piece (about 8 MiB of float64 scores)


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
    """The NumPy engine, in one dtype: all heads batched on the CPU, whole arrays for small problems, tiles for larger
    ones; the array primitives the algorithm (``attnx.engines.core``) and a model's forward pass use."""

    name = "numpy"
    stacks = True  # problems alike together: attnx.engines.alike
    traced = True  # NumPy's arrays are allocated where tracemalloc sees them

    def __init__(self, dtype: str = DTYPES[0]) -> None:
        self.dtype = np.dtype(dtype)

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

    def on(self, dtype: str, device: str = "cpu") -> NumpyEngine:
        """This engine in ``dtype`` (on the CPU, whatever ``device`` says): one object per dtype."""
        return numpy_on(dtype)

    def attend(
        self, spec: AttentionSpec, dtype: str, device: str, needs: Collection[TensorName] | None
    ) -> AttentionResult:
        """Compute multi-head attention for ``spec`` in ``dtype``: the arrays in ``needs`` (None: all)."""
        arrays = attention(self.on(dtype), spec, needs)
        # The multiplier is applied as a Python float, which keeps float32 arrays float32; report it
        # as the dtype holds it.
        scale = float(np.dtype(dtype).type(spec.multiplier))
        return AttentionResult.assemble(
            spec, arrays, scale=scale, engine=self.name, device=device, dtype=dtype, needs=needs
        )

    def attend_heads(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, spec: AttentionSpec, keep: frozenset[TensorName]
    ) -> dict[TensorName, np.ndarray]:
        """Small problems in one piece; larger ones in tiles on all CPUs (see attnx.engines.tiled), but for a soft
        cap, learned sinks or a score bias, which the tiles' exp without a max pass cannot take
        (``spec.dense_only``)."""
        (h, n, _), m = q.shape, k.shape[1]
        if h * n * m <= DENSE_LIMIT or spec.dense_only:
            return dense(self, q, k, v, spec, keep)
        return attend_tiled(q, k, v, tiled_rules(spec), keep)

    # The array primitives.

    def array(self, values: np.ndarray) -> np.ndarray:
        """A spec's ``values`` in this dtype (booleans stay boolean; no copy where they already are)."""
        return values if values.dtype == bool else values.astype(self.dtype, copy=False)

    def like(self, values: np.ndarray) -> np.ndarray:
        """Any ``values`` as an array in this dtype (no copy where they already are one)."""
        return np.asarray(values).astype(self.dtype, copy=False)

    def indices(self, values: np.ndarray) -> np.ndarray:
        """Integer positions, as this engine indexes with them."""
        return np.asarray(values, dtype=np.intp)

    @staticmethod
    def host(x: np.ndarray) -> np.ndarray:
        """``x`` as a NumPy array (itself)."""
        return x

    @staticmethod
    def permute(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """Reorder axes (a view)."""
        return x.transpose(axes)

    @staticmethod
    def softmax_masked(x: np.ndarray, allowed: np.ndarray | None, *, reuse: bool = False) -> np.ndarray:
        """Stable softmax over the last axis: over ``x`` itself with ``reuse``, else in a fresh array."""
        return softmax_rows_(x if reuse else x.copy(), allowed)

    @staticmethod
    def join(x: np.ndarray, column: np.ndarray) -> np.ndarray:
        """``x`` and ``column`` side by side on the last axis (a new array)."""
        return np.concatenate([x, column], axis=-1)

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
        """The error function, elementwise (``attnx.engines.erf``: in float64, rounded to ``x``'s dtype)."""
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
def numpy_on(dtype: str) -> NumpyEngine:
    """The NumPy engine in ``dtype`` (one object per dtype: a forward pass's arrays find theirs, ``arrays_of``)."""
    return NumpyEngine(dtype)
