"""A kernel's tensors against attnx's float64 reference: where they differ, by how much, in the kernel dtype's units.

Tolerances follow the kernel's dtype (``attnx.analysis.compare.default_tolerance``, where each default is
explained); errors are also given in units of the dtype's epsilon times the reference's largest magnitude.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import numpy as np

from attnx.analysis.compare import DTYPES, EPSILON, Tolerance, tolerance_for
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import TENSORS
from attnx.errors import ConfigError
from attnx.io.results import BareArray, SavedResult

NOT_HELD = "not in the kernel's file"
# Tensors a kernel may hand over, in the order reports list them.
KERNEL_TENSORS = ("output", "head_outputs", "projected", "weights", "scaled", "scores", "q", "k", "v")


@dataclass(frozen=True, eq=False)
class TensorCheck:
    """One tensor of the kernel against the reference.

    ``eps_units`` is ``max_abs`` in units of the kernel dtype's epsilon times the reference's largest
    magnitude (how many roundings away the worst element is); ``beyond`` counts the elements outside
    the tolerance (NaN always is); ``worst`` is the index of the largest difference, ``actual`` and
    ``expected`` its two values. ``by_head`` is the largest difference per ``[head, query]`` (None for
    a tensor that mixes heads, such as ``projected``); ``by_key`` the largest over heads per
    ``[query, key]`` for the ``[head, query, key]`` matrices, where a shifted mask shows as a diagonal.
    """

    name: str
    shape: tuple[int, ...]
    tolerance: Tolerance
    max_abs: float
    max_rel: float
    eps_units: float
    beyond: int
    worst: tuple[int, ...]
    actual: float
    expected: float
    by_head: np.ndarray | None = None
    by_key: np.ndarray | None = None

    @property
    def passed(self) -> bool:
        """True when every element is within tolerance."""
        return self.beyond == 0

    @property
    def size(self) -> int:
        """Number of elements compared."""
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Diagnosis:
    """A known bug the kernel's output matches: what it is, and how closely (``max_abs`` over ``tensor``)."""

    bug: str
    detail: str
    tensor: str
    max_abs: float


@dataclass(frozen=True, eq=False)
class Verification:
    """A kernel's tensors checked against the float64 ``reference`` of one input.

    ``skipped`` names the reference's tensors the kernel did not hand over and those it handed over that
    cannot be compared, each with the reason; ``diagnoses`` the known bugs its output matches.
    """

    source: str
    kernel: str
    dtype: str
    reference: AttentionResult
    checks: tuple[TensorCheck, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()

    @property
    def passed(self) -> bool:
        """True when every compared tensor is within tolerance."""
        return all(check.passed for check in self.checks)


def _errors(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual − expected| in float64, NaN and infinities as +inf (they are never within tolerance)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(np.asarray(actual, dtype=np.float64) - expected)
    return np.where(np.isnan(diff), np.inf, diff)


def per_head(name: str, errors: np.ndarray, reference: AttentionResult) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The largest error per ``[head, query]``, and for ``[head, query, key]`` tensors per ``[query, key]``."""
    axes = TENSORS[name].axes
    if axes == ("head", "query", "key"):
        return errors.max(axis=2), errors.max(axis=0)
    if axes[:2] == ("head", "query"):
        return errors.max(axis=tuple(range(2, errors.ndim))), None
    if axes == ("query", "d_model"):
        grid = np.stack([errors[:, reference.head_columns(h)].max(axis=1) for h in range(reference.heads)])
        return grid, None  # (H, N)
    return None, None


def check_tensor(
    name: str, actual: np.ndarray, reference: AttentionResult, tolerance: Tolerance, dtype: str
) -> TensorCheck:
    """Compare the kernel's ``name`` with the reference's (same shape) under ``tolerance``."""
    expected = np.asarray(getattr(reference, name), dtype=np.float64)
    errors = _errors(actual, expected)
    worst = np.unravel_index(int(np.argmax(errors)), errors.shape) if errors.size else ()
    max_abs = float(errors.max()) if errors.size else 0.0
    nonzero = expected != 0
    max_rel = float((errors[nonzero] / np.abs(expected[nonzero])).max()) if nonzero.any() else 0.0
    beyond = int(np.count_nonzero(~(errors <= tolerance.atol + tolerance.rtol * np.abs(expected))))
    magnitude = float(np.abs(expected).max()) if expected.size else 0.0
    eps_units = max_abs / (EPSILON[dtype] * magnitude) if magnitude > 0 else (0.0 if max_abs == 0 else np.inf)
    by_head, by_key = per_head(name, errors, reference)
    index = tuple(int(i) for i in worst)
    value = float(np.asarray(actual)[index]) if index else 0.0
    return TensorCheck(
        name, tuple(expected.shape), tolerance, max_abs, max_rel, eps_units, beyond, index, value,
        float(expected[index]) if index else 0.0, by_head, by_key,
    )  # fmt: skip


def verify(
    reference: AttentionResult,
    tensors: Mapping[str, np.ndarray],
    dtype: str,
    *,
    source: str = "<input>",
    kernel: str = "<kernel>",
    names: Collection[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Verification:
    """Check the kernel's ``tensors`` (computed in ``dtype``) against ``reference``, tensor by tensor.

    ``names`` limits the comparison to those tensors (each must be held by both); by default every tensor
    both hold is compared, and the others are listed as skipped. Holding none in common is a ConfigError.
    """
    held = [name for name in KERNEL_TENSORS if getattr(reference, name, None) is not None]
    wanted = list(names) if names is not None else [name for name in held if name in tensors]
    for name in wanted:
        if name not in tensors:
            raise ConfigError(f"{kernel}: holds no {name!r}; it holds {', '.join(sorted(tensors)) or 'nothing'}")
        if name not in held:
            raise ConfigError(f"{source}: the reference has no {name!r} to compare with")
    if not wanted:
        raise ConfigError(
            f"{kernel} and the reference hold no tensor in common: it holds {', '.join(sorted(tensors)) or 'nothing'}, "
            f"the reference {', '.join(held)}"
        )
    checks, skipped = [], []
    for name in wanted:
        actual, expected = tensors[name], getattr(reference, name)
        if tuple(actual.shape) != tuple(expected.shape):
            skipped.append((name, f"shape {tuple(actual.shape)}, the reference's {tuple(expected.shape)}"))
            continue
        checks.append(check_tensor(name, actual, reference, tolerance_for(dtype, expected, rtol, atol), dtype))
    if not checks:
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped)
        raise ConfigError(f"{kernel}: nothing to compare with the reference ({reasons})")
    skipped += [(name, NOT_HELD) for name in held if name not in tensors and names is None]
    return Verification(source, kernel, dtype, reference, tuple(checks), tuple(skipped))


# How a bare array may lay out what a kernel computed: the tensor it holds, and its axes in terms of
# N (queries), M (keys), H (heads), D (one head's width) and C (all heads' width, H·D).
ARRAY_LAYOUTS: dict[str, tuple[str, str]] = {
    "nd": ("output", "N C"),
    "bnd": ("output", "1 N C"),
    "hnd": ("head_outputs", "H N D"),
    "bhnd": ("head_outputs", "1 H N D"),
    "nhd": ("head_outputs", "N H D"),
    "bnhd": ("head_outputs", "1 N H D"),
    "hnm": ("weights", "H N M"),
    "bhnm": ("weights", "1 H N M"),
}


def sizes_of(tensors: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The problem's sizes by axis word (``query``, ``key``, ``head``, ``d_k``, ``d_model``), read from the
    shapes of named tensors (their axes are in the tensor registry)."""
    sizes: dict[str, int] = {}
    for name, array in tensors.items():
        if name in TENSORS:
            for axis, size in zip(TENSORS[name].axes, np.shape(array), strict=False):
                sizes.setdefault(axis, int(size))
    if "d_model" not in sizes and "head" in sizes and "d_k" in sizes:
        sizes["d_model"] = sizes["head"] * sizes["d_k"]
    return sizes


def layout_shape(layout: str, sizes: Mapping[str, int]) -> tuple[int, ...] | None:
    """The shape an array in ``layout`` has for a problem of ``sizes`` (None when a size is unknown)."""
    words = {"N": "query", "M": "key", "H": "head", "D": "d_k", "C": "d_model"}
    shape = []
    for axis in ARRAY_LAYOUTS[layout][1].split():
        if axis == "1":
            shape.append(1)
        elif words[axis] in sizes:
            shape.append(sizes[words[axis]])
        else:
            return None
    return tuple(shape)


def from_layout(array: np.ndarray, layout: str) -> tuple[str, np.ndarray]:
    """The tensor an array in ``layout`` holds, in attnx's axis order (``[head, query, d_k]``, ...)."""
    name, axes = ARRAY_LAYOUTS[layout]
    if axes.startswith("1 "):
        array = array[0]
    if layout in ("nhd", "bnhd"):
        array = array.transpose(1, 0, 2)  # (N, H, D) -> (H, N, D)
    return name, array


def recognise(array: np.ndarray, sizes: Mapping[str, int], layout: str | None = None) -> tuple[str, np.ndarray]:
    """What a bare array holds, from its shape (or ``layout``), as ``(tensor name, array in attnx's order)``,
    for a problem of ``sizes`` (see ``sizes_of``).

    A shape that fits no layout, or two that read it differently, is a ConfigError that lists the layouts
    this problem's arrays would have.
    """
    shape = tuple(array.shape)
    if layout is not None:
        expected = layout_shape(layout, sizes)
        if shape != expected:
            raise ConfigError(f"an array in layout {layout} has shape {expected} here, got {shape}")
        return from_layout(array, layout)
    fits = [name for name in ARRAY_LAYOUTS if shape == layout_shape(name, sizes)]
    if not fits:
        known = ", ".join(f"{name} {layout_shape(name, sizes)}" for name in ARRAY_LAYOUTS if layout_shape(name, sizes))
        raise ConfigError(f"an array of shape {shape} fits none of the layouts for this input: {known}")
    readings = [from_layout(array, name) for name in fits]
    first = readings[0]
    if any(name != first[0] or not np.array_equal(held, first[1], equal_nan=True) for name, held in readings[1:]):
        raise ConfigError(f"an array of shape {shape} could be {' or '.join(fits)}: name its layout with --layout")
    return first


def verify_kernel(
    spec: AttentionSpec,
    saved: SavedResult | BareArray,
    *,
    dtype: str | None = None,
    layout: str | None = None,
    names: Collection[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Verification:
    """A kernel's saved tensors (or one bare array, read by its shape or ``layout``) against the float64
    reference of ``spec``, with the known bugs that explain a difference.

    ``dtype`` is what the kernel computed in (default: the file's dtype); it sets the tolerances.
    """
    from attnx.analysis.diagnose import diagnose
    from attnx.engines import compute

    if isinstance(saved, BareArray):
        sizes = {"query": spec.n_queries, "key": spec.n_keys, "head": spec.settings.heads,
                 "kv_head": spec.settings.kv_heads, "d_k": spec.d_k, "d_model": spec.d_model}  # fmt: skip
        name, array = recognise(saved.array, sizes, layout)
        tensors = {name: array}
        kernel = f"{saved.source}, one array read as {name} [{', '.join(TENSORS[name].axes)}]"
    else:
        if layout is not None:
            raise ConfigError(
                f"{saved.source}: --layout names how a bare .npy array is laid out; this file names its tensors"
            )
        tensors, kernel = saved.tensors, saved.source
    kernel_dtype = dtype or saved.dtype or "float64"
    if kernel_dtype not in DTYPES:
        raise ConfigError(
            f"{saved.source}: holds {kernel_dtype} numbers; say what the kernel computed in with --kernel-dtype "
            f"({', '.join(DTYPES)})"
        )
    # Only what is compared, and the heads' Q, K and V the diagnoses start from: no [head, query, key]
    # matrix unless the kernel's file holds one.
    wanted = set(names if names is not None else tensors) & set(KERNEL_TENSORS)
    reference = compute(spec, "numpy", dtype="float64", needs=wanted | {"q", "k", "v", "head_outputs"})
    verification = verify(reference, tensors, kernel_dtype, source=spec.source, kernel=kernel, names=names,
                          rtol=rtol, atol=atol)  # fmt: skip
    return replace(verification, diagnoses=diagnose(spec, verification, tensors, rtol=rtol, atol=atol))
