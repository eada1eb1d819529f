"""The math: one public entry point, ``compute``, over interchangeable engines loaded on demand."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.rows import Rows
from attnx.core.spec import AttentionSpec, ProjectedInputs, frozen
from attnx.core.tensors import COMPUTED, MASK, MATRICES, PROJECTED, TensorName
from attnx.engines import guards
from attnx.engines.core import Engine
from attnx.engines.guards import caps_for
from attnx.errors import EngineUnavailableError
from attnx.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from attnx.engines.numpy_engine import NumpyEngine
    from attnx.engines.torch_engine import TorchEngine


def _numpy() -> NumpyEngine:
    """The NumPy engine (its module imports NumPy and the tiled kernel)."""
    from attnx.engines.numpy_engine import NumpyEngine

    return NumpyEngine()


def _torch() -> TorchEngine:
    """The torch engine: its module alone imports torch, only now (ImportError where torch is missing)."""
    from attnx.engines.torch_engine import TorchEngine

    return TorchEngine()


@dataclass(frozen=True)
class EngineEntry:
    """How to load an engine, and what to tell a user who lacks its library."""

    name: str
    load: Callable[[], Engine]
    install_hint: str


# Install hints that work from a clone of attnx (it is not on PyPI).
ENGINES: dict[str, EngineEntry] = {
    "numpy": EngineEntry("numpy", _numpy, "python -m pip install numpy"),
    "torch": EngineEntry("torch", _torch, 'python -m pip install -e ".[torch]"'),
}


@overload
def load_engine(name: Literal["numpy"]) -> NumpyEngine: ...
@overload
def load_engine(name: Literal["torch"]) -> TorchEngine: ...
@overload
def load_engine(name: str) -> Engine: ...
def load_engine(name: str) -> Engine:
    """Engine ``name``, its framework imported only now, or EngineUnavailableError (unknown, or not installed)."""
    entry = ENGINES.get(name)
    if entry is None:
        raise EngineUnavailableError(f"unknown engine {name!r}; available: {', '.join(ENGINES)}")
    try:
        return entry.load()
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
    needs: Collection[TensorName] | None = None,
    strict: bool = True,
    rows: Rows | None = None,
    limits: Limits | None = None,
) -> AttentionResult:
    """Run multi-head attention for ``spec`` on ``engine``: the one checked entry to every engine.

    ``device`` is ``auto`` (CUDA, then MPS, then CPU, among those the engine can use) or a device
    name; ``dtype`` defaults to float64, or float32 where the device has no float64 (MPS).
    ``needs`` names the ``AttentionResult`` arrays wanted (plus ``mask``); None means all of them.
    ``output`` (and ``projected``) are always computed; without any H × N × M matrix in ``needs``
    the engines take a path that never builds one. With ``rows`` that leave some out, the
    matrices (and ``mask``) are computed for those rows alone, the output for every row; the
    result's ``matrix_rows`` says which (at N = 2048, H = 8 the whole matrices would take
    3 × 256 MiB in float64, the 40 rows a table shows 5 MiB).

    Before anything is allocated, what it will build is checked against ``limits`` (None: the caps the
    spec was read under, ``spec.limits``, else the defaults replaced by ``ATTNX_MAX_*``; see
    ``check_caps``): over a cap is LimitError. With ``strict``, inputs beyond the dtype's range and scores
    or outputs that overflowed raise NumericError; without it they come back as inf or NaN (for comparisons).
    """
    limits = caps_for(spec, limits)
    check_caps(spec, needs=needs, rows=rows, limits=limits)
    wanted = frozenset(COMPUTED) if needs is None else frozenset(needs)
    shown = rows.shown if rows is not None and not rows.complete else None
    if shown is not None and MATRICES & wanted:
        options: dict[str, Any] = {"engine": engine, "dtype": dtype, "device": device, "strict": strict}
        whole = compute(spec, **options, needs=wanted - MATRICES - {MASK}, limits=limits)
        part = compute(spec.select_queries(shown), **options, needs=(MATRICES & wanted) | {MASK}, limits=limits)
        held = {name: getattr(part, name) for name in (*MATRICES, MASK, "score_bias")}  # the rows shown
        return replace(whole, **held, matrix_rows=shown)
    chosen = load_engine(engine)
    resolved = chosen.resolve_device(device)
    in_dtype = _dtype_on(chosen, resolved, dtype)
    if strict:
        guards.check_range(spec, in_dtype)
    with np.errstate(all="ignore"):  # overflow is reported by check_finite, not as RuntimeWarnings
        result = chosen.attend(spec, in_dtype, resolved, needs)
    if strict and not guards.cannot_overflow(spec, in_dtype):
        guards.check_finite(spec, result)
    return result


def compute_many(
    specs: Sequence[AttentionSpec],
    engine: str = "numpy",
    *,
    dtype: str | None = None,
    device: str = "auto",
    needs: Collection[TensorName] | None = None,
    strict: bool = True,
) -> list[AttentionResult]:
    """``compute`` of each of ``specs``, in order, with the same arguments (every row; the caps each spec was read
    under). On the NumPy engine, problems alike (``attnx.engines.alike``: one model layer's attention on copies of
    a text, each dropping other heads, as an ablation sweep steps them) are computed together, each projection
    one matmul over all their tokens: each result equals its ``compute`` to the rounding of a taller matmul."""
    chosen = load_engine(engine)
    options: dict[str, Any] = {"engine": engine, "dtype": dtype, "device": device, "needs": needs, "strict": strict}
    if not chosen.stacks or len(specs) < 2:
        return [compute(spec, **options) for spec in specs]
    from attnx.engines import alike  # with the NumPy engine's module: only now

    in_dtype = _dtype_on(chosen, chosen.resolve_device(device), dtype)
    results: list[AttentionResult | None] = [None] * len(specs)
    for group in alike.groups(specs):
        if len(group) == 1:
            results[group[0]] = compute(specs[group[0]], **options)
            continue
        check_caps(specs[group[0]], needs=needs)  # alike: the same shapes, the same caps
        found = alike.compute_alike([specs[index] for index in group], in_dtype, needs, strict)
        for index, result in zip(group, found, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def compute_copies(
    spec: AttentionSpec,
    xs: np.ndarray,
    dropped: Sequence[tuple[int, ...]],
    engine: str = "numpy",
    *,
    dtype: str | None = None,
    device: str = "auto",
    strict: bool = True,
) -> np.ndarray:
    """The projected output, ``[copy, query, d_out]``, of ``spec``'s problem (projected from X, with W_o) for each
    copy of its input X in ``xs`` (``[copy, query, d_in]``), copy c dropping the heads ``dropped[c]`` in place of
    the spec's own: ``compute(...).projected`` of each copy alone, as a model's forward passes need it of a layer
    (``attnx.models.lockstep``). On the NumPy engine, where it computes the problem whole, the copies are computed
    together (``attnx.engines.alike``), as many at once as keep the stacked arrays within ``DENSE_LIMIT`` and the
    caps, equal to each alone to the rounding of a taller matmul; elsewhere, and where ``compute`` must decide
    (inputs beyond ``dtype``'s range, results not finite), copy by copy."""
    from attnx.engines import alike  # with the NumPy engine's module: only now

    inputs = spec.inputs
    if not isinstance(inputs, ProjectedInputs) or inputs.x_kv is not None or spec.w_o is None:
        raise TypeError("compute_copies takes a problem projected from X alone (no x_kv), with W_o")
    options: dict[str, Any] = {"dtype": dtype, "device": device, "needs": (PROJECTED,), "strict": strict}
    chosen = load_engine(engine)
    found: list[np.ndarray | None] = [None] * len(xs)
    if chosen.stacks and len(xs) > 1 and alike.key(spec) is not None:
        check_caps(spec, needs=(PROJECTED,))
        in_dtype = _dtype_on(chosen, chosen.resolve_device(device), dtype)
        size = alike.per_batch(spec)
        for at in range(0, len(xs), size):
            part = alike.projected_copies(spec, xs[at : at + size], dropped[at : at + size], in_dtype, strict)
            if part is not None:
                found[at : at + len(part)] = list(part)
    for copy, rows in enumerate(found):
        if rows is None:
            alone = replace(spec, inputs=replace(inputs, x=frozen(xs[copy])))
            found[copy] = compute(alone.with_settings(dropped_heads=dropped[copy]), engine, **options).projected
    return np.stack([rows for rows in found if rows is not None])


def check_caps(
    spec: AttentionSpec,
    *,
    needs: Collection[TensorName] | None = None,
    rows: Rows | None = None,
    limits: Limits | None = None,
) -> None:
    """Refuse with LimitError what ``compute`` would build for these arguments, allocating nothing.

    Q, K and V after projection always; the ``[head, query, key]`` matrices when ``needs`` (None: all)
    holds one, for the rows they are computed for (``rows.shown`` when ``rows`` leaves some out). Without
    a matrix in ``needs`` the engines work in blocks and build none, but for a spec with a score bias, which is
    computed on whole matrices (``spec.dense_only``). ``limits`` None: ``caps_for(spec)``.
    ``compute`` calls it first; a caller may call it sooner, to refuse before slow work (reading a
    model's layers, timing smaller sizes).
    """
    limits = caps_for(spec, limits)
    matrices = needs is None or not MATRICES.isdisjoint(needs) or spec.score_bias is not None  # a bias: dense only
    shown = None if rows is None or rows.complete else len(rows.shown)
    limits.check_problem(spec, matrices=matrices, rows=shown)


def resolve_dtype(engine: str, device: str = "auto", dtype: str | None = None) -> str:
    """The dtype ``compute`` uses for these arguments: ``dtype`` if the device supports it, else its default.

    A dtype the device lacks (float64 on MPS) raises EngineUnavailableError.
    """
    chosen = load_engine(engine)
    return _dtype_on(chosen, chosen.resolve_device(device), dtype)


def load_arrays(engine: str, dtype: str, device: str = "auto") -> Engine:
    """Engine ``engine`` in ``dtype`` on ``device`` (resolved as ``compute`` resolves it), for its array primitives:
    where a model's forward pass on that engine keeps its residual stream (``attnx.engines.arrays``)."""
    return load_engine(engine).on(dtype, device)


def _dtype_on(engine: Engine, device: str, dtype: str | None) -> str:
    """``dtype`` if ``engine`` supports it on the resolved ``device``, else its default there."""
    supported = engine.dtypes(device)
    chosen = dtype or supported[0]
    if chosen not in supported:
        raise EngineUnavailableError(
            f"{engine.name} on {device} does not support {chosen}; supported: {', '.join(supported)}"
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
        engine = load_engine(name)
    except EngineUnavailableError as exc:
        return EngineStatus(name, problem=str(exc))
    return EngineStatus(name, engine.version(), tuple((d, tuple(engine.dtypes(d))) for d in engine.devices()))


def engine_statuses() -> list[EngineStatus]:
    """Every known engine, available or not, in a stable order."""
    return [engine_status(name) for name in ENGINES]
