"""Where a model's forward pass besides attention (norms, MLPs, residuals) finds the array primitives of its arrays.

A forward pass keeps its residual stream where its engine computes: a NumPy array, or a torch tensor on the torch
engine's device, in the working dtype. The families' math (``attnx.models``) is written once with Python's
operators (``+``, ``*``, ``@``, indexing) and the few primitives of the engine (``attnx.engines.core.Engine``) that
the arrays they work on live on::

    xp = arrays_of(x)                                  # the primitives of the engine x lives on
    x / xp.sqrt(xp.mean(x * x) + eps) * xp.like(w)     # RMSNorm; the weight moved where x is

so nothing outside ``attnx/engines`` imports torch, and weights go to the device a layer at a time, as that layer
needs them. ``host`` brings an array back to NumPy (what a spec and a result hold).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from attnx.core.choices import HALF

if TYPE_CHECKING:  # pragma: no cover
    from attnx.engines.core import Engine

Array: TypeAlias = Any  # a NumPy array, or a torch tensor on the torch engine (the families' arrays quack alike)


def host_dtype(dtype: str) -> str:
    """The NumPy dtype that holds arrays computed in ``dtype`` on the host: float32 for a half type (``HALF``, which
    NumPy has no arithmetic for, bfloat16 not at all), which holds every one of their values exactly."""
    return "float32" if dtype in HALF else dtype


# Each engine whose arrays are not NumPy's registers their type as its module is imported (``register``): an
# array of that type exists only once its engine's module has made it.
_ENGINES: dict[type, Callable[[Any], Engine]] = {}


def register(kind: type, arrays: Callable[[Any], Engine]) -> None:
    """Let ``arrays_of`` take arrays of type ``kind`` to ``arrays(x)``, their engine in their dtype and device."""
    _ENGINES[kind] = arrays


def arrays_of(x: Array) -> Engine:
    """The engine ``x`` lives on, in ``x``'s dtype (and device), for its primitives: NumPy's, or torch's."""
    if isinstance(x, np.ndarray):
        from attnx.engines.numpy_engine import numpy_on  # NumPy's engine, with the tiled kernel: only now

        return numpy_on(x.dtype.name)
    for kind, arrays in _ENGINES.items():
        if isinstance(x, kind):
            return arrays(x)
    raise TypeError(f"no engine computes on {type(x).__name__}")


def host(x: Array) -> np.ndarray:
    """``x`` as a NumPy array on the host (a NumPy array as it is)."""
    return x if isinstance(x, np.ndarray) else arrays_of(x).host(x)
