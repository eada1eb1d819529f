"""The math: one public entry point, ``compute``, over interchangeable engines."""

from __future__ import annotations

from typing import Literal

from attnx.errors import EngineUnavailableError
from attnx.result import AttentionResult
from attnx.spec import AttentionSpec

EngineName = Literal["numpy"]
ENGINES: tuple[str, ...] = ("numpy",)


def compute(
    spec: AttentionSpec,
    engine: str = "numpy",
    *,
    dtype: str = "float64",
    device: str = "auto",
) -> AttentionResult:
    """Run multi-head attention for ``spec`` on ``engine`` and return every intermediate."""
    if engine != "numpy":
        raise EngineUnavailableError(f"unknown engine {engine!r}; available: {', '.join(ENGINES)}")
    if device not in ("auto", "cpu"):
        raise EngineUnavailableError(f"the numpy engine runs on the CPU only, not {device!r}")
    from attnx.engines import numpy_engine

    if dtype not in numpy_engine.DTYPES:
        raise EngineUnavailableError(
            f"dtype {dtype!r} is not supported; choose one of {', '.join(numpy_engine.DTYPES)}"
        )
    return numpy_engine.attend(spec, dtype)
