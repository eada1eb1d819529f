"""`check --against`: a kernel's tensors against attnx's float64 reference, where they differ, by how much, in ε units.

Tolerances follow the kernel's dtype (``attnx.analysis.tolerance.default_tolerance``, where each default is
explained); errors are also given in units of the dtype's epsilon times the reference's largest magnitude.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from attnx.analysis.tolerance import EPSILON, Tolerance, difference, tolerance_for
from attnx.core.result import AttentionResult
from attnx.core.tensors import (
    AVERAGE_WEIGHTS,
    HEAD_OUTPUTS,
    OUTPUT,
    PROJECTED,
    SCALED,
    SCORES,
    SINK_WEIGHTS,
    TENSORS,
    WEIGHTS,
    K,
    Q,
    TensorName,
    V,
    is_tensor_name,
)
from attnx.errors import ConfigError

NOT_HELD = "not in the kernel's file"
# Tensors a kernel may hand over, in the order reports list them: every tensor a result holds.
KERNEL_TENSORS: tuple[TensorName, ...] = (
    OUTPUT, HEAD_OUTPUTS, PROJECTED, WEIGHTS, AVERAGE_WEIGHTS, SINK_WEIGHTS, SCALED, SCORES, Q, K, V,
)  # fmt: skip


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

    name: TensorName
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
    tensor: TensorName
    max_abs: float


@dataclass(frozen=True, eq=False)
class Verification:
    """A kernel's tensors checked against the float64 ``reference`` of one input.

    ``skipped`` names the reference's tensors the kernel did not hand over and those it handed over that
    cannot be compared, each with the reason; ``mismatched`` the tensors it holds under a name the reference has
    but in another shape (kernel's shape, reference's): each a failure, as ``attnx diff`` counts it;
    ``diagnoses`` the known bugs its output matches; ``weights_too`` the weights layouts a bare array's shape fits
    as well, set aside for the output it was read as; ``held`` the dtype the kernel's numbers are in where it is more
    precise than the inputs' ``dtype``, at whose tolerance they are judged (None: they are in ``dtype``).
    """

    source: str
    kernel: str
    dtype: str
    reference: AttentionResult
    checks: tuple[TensorCheck, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    weights_too: tuple[str, ...] = ()
    mismatched: tuple[tuple[TensorName, tuple[int, ...], tuple[int, ...]], ...] = ()
    held: str | None = None

    @property
    def passed(self) -> bool:
        """True when every tensor the kernel holds has the reference's shape and is within tolerance."""
        return not self.mismatched and all(check.passed for check in self.checks)

    @property
    def failures(self) -> int:
        """Tensors that fail: beyond tolerance, or in another shape."""
        return len(self.mismatched) + sum(not check.passed for check in self.checks)


def _errors(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual − expected| in float64, NaN and infinities as +inf (they are never within tolerance)."""
    diff = difference(actual, expected)
    return np.where(np.isnan(diff), np.inf, diff)


def per_head(
    name: TensorName, errors: np.ndarray, reference: AttentionResult
) -> tuple[np.ndarray | None, np.ndarray | None]:
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
    name: TensorName, actual: np.ndarray, reference: AttentionResult, tolerance: Tolerance, dtype: str
) -> TensorCheck:
    """Compare the kernel's ``name`` with the reference's (same shape) under ``tolerance``."""
    expected = np.asarray(reference.tensor(name), dtype=np.float64)
    errors = _errors(actual, expected)
    worst = np.unravel_index(int(np.argmax(errors)), errors.shape) if errors.size else ()
    max_abs = float(errors.max()) if errors.size else 0.0
    nonzero = expected != 0
    with np.errstate(over="ignore"):
        max_rel = float((errors[nonzero] / np.abs(expected[nonzero])).max()) if nonzero.any() else 0.0
    beyond = int(np.count_nonzero(~tolerance.within(errors, expected)))
    unit = EPSILON[dtype] * (float(np.abs(expected).max()) if expected.size else 0.0)  # 0 below ε's reach too
    eps_units = max_abs / unit if unit > 0 else (0.0 if max_abs == 0 else np.inf)
    by_head, by_key = per_head(name, errors, reference)
    index = tuple(int(i) for i in worst)
    value = float(np.asarray(actual)[index]) if index else 0.0
    return TensorCheck(
        name, tuple(expected.shape), tolerance, max_abs, max_rel, eps_units, beyond, index, value,
        float(expected[index]) if index else 0.0, by_head, by_key,
    )  # fmt: skip


def verify(
    reference: AttentionResult,
    tensors: Mapping[TensorName, np.ndarray],
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
    checks: list[TensorCheck] = []
    mismatched: list[tuple[TensorName, tuple[int, ...], tuple[int, ...]]] = []
    for name in filter(is_tensor_name, wanted):  # each is, being held
        actual, expected = tensors[name], reference.tensor(name)
        if tuple(actual.shape) != tuple(expected.shape):
            mismatched.append((name, tuple(actual.shape), tuple(expected.shape)))
            continue
        checks.append(check_tensor(name, actual, reference, tolerance_for(dtype, expected, rtol, atol), dtype))
    skipped = [(name, NOT_HELD) for name in held if name not in tensors and names is None]
    skipped += [(name, f"the reference has none: {TENSORS[name].absent}") for name in KERNEL_TENSORS
                if name in tensors and name not in held and names is None]  # fmt: skip
    return Verification(source, kernel, dtype, reference, tuple(checks), tuple(skipped), mismatched=tuple(mismatched))
