"""Where a computation runs: one value naming the engine, the device and the dtype, handed down as one."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec
    from attnx.core.tensors import TensorName
    from attnx.engines.core import Engine


@dataclass(frozen=True)
class Placement:
    """An engine by name (``numpy``, ``torch``), a device (``auto``: CUDA, then MPS, then CPU, among those the engine
    can use) and a dtype (None: the engine's default there, float64 but on MPS). ``attnx.compute`` takes the three
    as keywords; a model's forward pass and every workflow take this value, ``on=Placement("torch", "cuda")``."""

    engine: str = "numpy"
    device: str = "auto"
    dtype: str | None = None

    def using(self, dtype: str | None) -> Placement:
        """The same engine and device in ``dtype``."""
        return replace(self, dtype=dtype)

    def resolved_dtype(self) -> str:
        """The dtype ``compute`` uses here: ``dtype`` where the device has it, else the engine's default there; a
        dtype the device lacks (float64 on MPS) is EngineUnavailableError."""
        from attnx.engines import resolve_dtype

        return resolve_dtype(self.engine, self.device, self.dtype)

    def loaded(self) -> Engine:
        """The engine, its framework imported now (EngineUnavailableError where it is not installed)."""
        from attnx.engines import load_engine

        return load_engine(self.engine)

    def arrays(self) -> Engine:
        """The engine in ``resolved_dtype`` on the device, for its array primitives (a forward pass's stream)."""
        return self.loaded().on(self.resolved_dtype(), self.device)

    def compute(self, spec: AttentionSpec, needs: Collection[TensorName] | None = None) -> AttentionResult:
        """``attnx.compute(spec)`` here."""
        from attnx.engines import compute

        return compute(spec, self.engine, dtype=self.dtype, device=self.device, needs=needs)

    def compute_many(
        self, specs: Sequence[AttentionSpec], needs: Collection[TensorName] | None = None
    ) -> list[AttentionResult]:
        """``attnx.engines.compute_many(specs)`` here."""
        from attnx.engines import compute_many

        return compute_many(specs, self.engine, dtype=self.dtype, device=self.device, needs=needs)

    def compute_copies(self, spec: AttentionSpec, xs: np.ndarray, dropped: Sequence[tuple[int, ...]]) -> np.ndarray:
        """``attnx.engines.compute_copies(spec, xs, dropped)`` here."""
        from attnx.engines import compute_copies

        return compute_copies(spec, xs, dropped, self.engine, dtype=self.dtype, device=self.device)


NUMPY = Placement()  # the default everywhere: the NumPy engine on the CPU, in float64
