"""The math: one public entry point, ``compute``, over interchangeable engines loaded on demand."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.rows import Rows
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import COMPUTED, MATRICES
from attnx.engines import guards
from attnx.errors import EngineUnavailableError


@dataclass(frozen=True)
class EngineEntry:
    """Where an engine lives and what to tell a user who lacks its library."""

    name: str
    module: str
    install_hint: str


# Install hints that work from a clone of attnx (it is not on PyPI).
ENGINES: dict[str, EngineEntry] = {
    "numpy": EngineEntry("numpy", "attnx.engines.numpy_engine", "python -m pip install numpy"),
    "torch": EngineEntry("torch", "attnx.engines.torch_engine", 'python -m pip install ".[torch]"'),
}


def load_engine(name: str) -> ModuleType:
    """Import engine ``name`` (its framework too, only now) or raise EngineUnavailableError.

    Every engine module provides ``NAME``, ``version()``, ``devices()``, ``dtypes(device)``,
    ``resolve_device(requested)`` and ``attend(spec, dtype, device)``.
    """
    entry = ENGINES.get(name)
    if entry is None:
        raise EngineUnavailableError(f"unknown engine {name!r}; available: {', '.join(ENGINES)}")
    try:
        return importlib.import_module(entry.module)
    except ImportError as exc:
        missing = exc.name or name
        raise EngineUnavailableError(
            f"the {name} engine needs {missing}, which is not installed: {entry.install_hint}"
        ) from None


def compute(
    spec: AttentionSpec,
    engine: str = "numpy",
    *,
    dtype: str | None = None,
    device: str = "auto",
    needs: Collection[str] | None = None,
    strict: bool = True,
    rows: Rows | None = None,
) -> AttentionResult:
    """Run multi-head attention for ``spec`` on ``engine``.

    ``device`` is ``auto`` (CUDA, then MPS, then CPU, among those the engine can use) or a device
    name; ``dtype`` defaults to float64, or float32 where the device has no float64 (MPS).
    ``needs`` names the ``AttentionResult`` arrays wanted (plus ``mask``); None means all of them.
    ``output`` (and ``projected``) are always computed; without any H × N × M matrix in ``needs``
    the engines take a path that never builds one. With ``rows`` that leave some out, the
    matrices (and ``mask``) are computed for those rows alone, the output for every row; the
    result's ``matrix_rows`` says which (at N = 2048, H = 8 the whole matrices would take
    3 × 256 MiB in float64, the 40 rows a table shows 5 MiB).

    Input caps are checked where the input is read (``Limits.check_problem``). With ``strict``, inputs beyond the
    dtype's range and scores or outputs that overflowed raise NumericError; without it they come
    back as inf or NaN (for comparisons).
    """
    wanted = frozenset(COMPUTED) if needs is None else frozenset(needs)
    if rows is not None and not rows.complete and MATRICES & wanted:
        options: dict[str, Any] = {"engine": engine, "dtype": dtype, "device": device, "strict": strict}
        whole = compute(spec, **options, needs=wanted - MATRICES - {"mask"})
        shown = compute(spec.select_queries(rows.shown), **options, needs=(MATRICES & wanted) | {"mask"})
        held = {name: getattr(shown, name) for name in (*MATRICES, "mask")}
        return replace(whole, **held, matrix_rows=rows.shown)
    module = load_engine(engine)
    resolved = module.resolve_device(device)
    chosen = _dtype_on(module, resolved, dtype)
    if strict:
        guards.check_range(spec, chosen)
    with np.errstate(all="ignore"):  # overflow is reported by check_finite, not as RuntimeWarnings
        result = module.attend(spec, chosen, resolved, needs)
    if strict and not guards.cannot_overflow(spec, chosen):
        guards.check_finite(spec, result)
    return result


def resolve_dtype(engine: str, device: str = "auto", dtype: str | None = None) -> str:
    """The dtype ``compute`` uses for these arguments: ``dtype`` if the device supports it, else its default.

    A dtype the device lacks (float64 on MPS) raises EngineUnavailableError.
    """
    module = load_engine(engine)
    return _dtype_on(module, module.resolve_device(device), dtype)


def _dtype_on(module: ModuleType, device: str, dtype: str | None) -> str:
    """``dtype`` if the engine ``module`` supports it on the resolved ``device``, else its default there."""
    supported = module.dtypes(device)
    chosen = dtype or supported[0]
    if chosen not in supported:
        raise EngineUnavailableError(
            f"{module.NAME} on {device} does not support {chosen}; supported: {', '.join(supported)}"
        )
    return chosen


@dataclass(frozen=True)
class EngineStatus:
    """What one engine offers here: its version and, per device present, its dtypes.

    ``problem`` says why the engine cannot run (its library is missing); then nothing else is set.
    """

    name: str
    version: str | None = None
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    problem: str | None = None

    @property
    def available(self) -> bool:
        """True when the engine's library is installed."""
        return self.problem is None


def engine_status(name: str) -> EngineStatus:
    """Survey engine ``name`` (this imports its library)."""
    try:
        module = load_engine(name)
    except EngineUnavailableError as exc:
        return EngineStatus(name, problem=str(exc))
    return EngineStatus(name, module.version(), tuple((d, tuple(module.dtypes(d))) for d in module.devices()))


def engine_statuses() -> list[EngineStatus]:
    """Every known engine, available or not, in a stable order."""
    return [engine_status(name) for name in ENGINES]
