"""Comparing configurations of one input (a sweep over one setting), and two inputs or results tensor by tensor."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attnx.analysis.array_layouts import recognise, sizes_of
from attnx.analysis.heads import Saturation, saturation
from attnx.analysis.tolerance import TensorDiff, compare, difference, loosest, tolerance_for
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import MASK, OUTPUT, PROJECTED, WEIGHTS, TensorName, is_tensor_name
from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ConfigError
from attnx.io.results import RESULT_TENSORS, BareArray, SavedResult

# The settings a sweep can vary, with the prefix of each configuration's label ("H=2", "scale=none").
SWEEPS = {"heads": "H", "scale": "scale", "layout": "layout", "kv_heads": "kv_heads"}
LARGEST = 3  # how many of the largest differences a tensor comparison lists


@dataclass(frozen=True, eq=False)
class Variant:
    """One configuration of a sweep: its label and value, its result and the saturation of its heads."""

    label: str
    value: int | float | str
    result: AttentionResult
    saturation: Saturation


@dataclass(frozen=True, eq=False)
class Shift:
    """How far the compared output moves from variant ``before`` to variant ``after`` (indices).

    ``l2[i]`` and ``max_abs[i]`` are the L2 norm and the largest absolute value of query row i's
    change; ``l2_overall`` is the L2 norm of the whole change, ``max_abs_overall`` its largest entry.
    """

    before: int
    after: int
    l2: np.ndarray
    max_abs: np.ndarray
    l2_overall: float
    max_abs_overall: float


@dataclass(frozen=True, eq=False)
class Sweep:
    """The same input at each value of one setting (``varied``, a key of ``SWEEPS``).

    ``shifts`` run between consecutive variants, then from the first variant to
    each later one not already covered. ``compared`` names the output they measure: ``projected``
    when every computed variant has W_o, else ``output``.
    """

    source: str
    varied: str
    tokens: tuple[str, ...]
    variants: tuple[Variant, ...]
    shifts: tuple[Shift, ...]
    compared: TensorName


def variant_spec(spec: AttentionSpec, varied: str, value: int | float | str) -> AttentionSpec:
    """``spec`` with setting ``varied`` set to ``value``, the rest unchanged (validated again).

    Fewer K/V heads than ``spec`` has are made by mean-pooling its K/V heads within each group, as
    grouped-query attention is made from a multi-head checkpoint (Ainslie et al., 2023): every
    configuration of a ``kv_heads`` sweep reads the same keys and values, pooled.
    """
    if varied == "heads":
        return spec.with_heads(int(value))
    if varied == "kv_heads":
        return spec.with_kv_heads(int(value))
    return spec.with_settings(**{varied: value})  # a setting named at run time, checked again


def _label(varied: str, value: int | float | str) -> str:
    return f"{SWEEPS[varied]}={value}"


def shift(before: np.ndarray, after: np.ndarray, indices: tuple[int, int]) -> Shift:
    """The change from ``before`` to ``after`` (both ``[query, d]``), per query row and overall."""
    change = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)  # (N, d)
    size = change.size
    return Shift(
        before=indices[0],
        after=indices[1],
        l2=np.linalg.norm(change, axis=1),
        max_abs=np.abs(change).max(axis=1) if size else np.zeros(len(change)),
        l2_overall=float(np.linalg.norm(change)),
        max_abs_overall=float(np.abs(change).max()) if size else 0.0,
    )


def sweep(
    spec: AttentionSpec,
    varied: str,
    values: Sequence[int | float | str],
    *,
    on: Placement = NUMPY,
) -> Sweep:
    """Compute ``spec`` ``on`` an engine and device once per value of ``varied`` (duplicates dropped). A value the
    input cannot take is refused before anything is computed, with the ConfigError ``run`` gives for it (``d_model 4
    is not divisible by heads 3; head counts that work: 1, 2, 4``): a sweep shows every value it was given, or none."""
    specs = {value: variant_spec(spec, varied, value) for value in dict.fromkeys(values)}
    variants = []
    for value, changed in specs.items():
        result = on.compute(changed)
        variants.append(Variant(_label(varied, value), value, result, saturation(result)))
    results = [v.result for v in variants]
    compared = PROJECTED if results and all(r.projected is not None for r in results) else OUTPUT
    pairs = list(itertools.pairwise(range(len(variants))))
    pairs += [(0, i) for i in range(2, len(variants))]
    shifts = tuple(
        shift(getattr(variants[a].result, compared), getattr(variants[b].result, compared), (a, b)) for a, b in pairs
    )
    return Sweep(spec.source, varied, spec.tokens, tuple(variants), shifts, compared)


@dataclass(frozen=True, eq=False)
class Side:
    """One side of a comparison: where it came from, what it is, and its tensors named as JSON keys.

    ``kind`` is ``input`` (computed here), ``result`` (a result attnx or a kernel wrote, read back) or
    ``array`` (one bare array, read as the tensor its shape fits).
    """

    source: str
    kind: str
    tensors: Mapping[TensorName, np.ndarray]
    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    dtype: str
    allowed: np.ndarray | None = None  # [query, key], True = may attend; None: no mask


def side_from_result(result: AttentionResult, source: str) -> Side:
    """The computed ``result`` of the input ``source``, as a side (the tensors a JSON result carries)."""
    tensors = {name: getattr(result, name) for name in RESULT_TENSORS if getattr(result, name) is not None}
    return Side(source, "input", tensors, result.tokens, result.key_tokens, result.dtype, result.mask)


def _saved_mask(meta: Mapping[str, object], n: int, m: int) -> np.ndarray | None:
    """The ``mask`` a JSON result carries (``[query, key]`` booleans), or None when it has none of that shape."""
    mask = meta.get(MASK)
    if not isinstance(mask, list) or len(mask) != n:
        return None
    if not all(isinstance(row, list) and len(row) == m and all(isinstance(x, bool) for x in row) for row in mask):
        return None
    return np.array(mask, dtype=bool).reshape(n, m)


def side_from_saved(saved: SavedResult) -> Side:
    """A JSON result read back, as a side (its mask too, where it has one)."""
    meta = saved.meta
    tokens = tuple(map(str, meta.get("tokens", ())))
    key_tokens = tuple(map(str, meta.get("key_tokens", tokens)))
    allowed = _saved_mask(meta, len(tokens), len(key_tokens))
    return Side(saved.source, "result", saved.tensors, tokens, key_tokens, saved.dtype or "float64", allowed)


@dataclass(frozen=True)
class Location:
    """One element where the sides differ: its index, both values and ``|a − b|``."""

    index: tuple[int, ...]
    a: float
    b: float
    abs_diff: float


@dataclass(frozen=True, eq=False)
class TensorComparison:
    """One tensor of A against the same tensor of B (B is the reference of relative differences).

    ``problem`` is set, and ``diff`` None, when the tensor is in one side only or the shapes
    differ; then the tensor fails. ``largest`` lists the largest differences, largest first.
    """

    name: TensorName
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    diff: TensorDiff | None
    largest: tuple[Location, ...] = ()
    problem: str | None = None

    @property
    def passed(self) -> bool:
        """True when both sides hold the tensor, in the same shape, within tolerance."""
        return self.diff is not None and self.diff.passed


@dataclass(frozen=True, eq=False)
class Comparison:
    """Two sides compared tensor by tensor; ``weight_delta`` is ``|A − B|`` of the weights where shapes agree.

    ``masked`` (``[query, key]``) is True where both sides block the pair: a masked cell in both,
    whose weights are 0 by definition. None when either side has no mask or the shapes differ.
    ``skipped`` names the tensors one side holds and the other does not, each with the side that has it.
    """

    a: Side
    b: Side
    rows: tuple[TensorComparison, ...]
    weight_delta: np.ndarray | None
    masked: np.ndarray | None = None
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def passed(self) -> bool:
        """True when every tensor is within tolerance."""
        return all(row.passed for row in self.rows)

    @property
    def failures(self) -> int:
        """Number of tensors that differ (beyond tolerance, in shape, or present on one side only)."""
        return sum(not row.passed for row in self.rows)


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(map(str, shape)) + ")"


def largest(a: np.ndarray, b: np.ndarray, count: int = LARGEST) -> tuple[Location, ...]:
    """The ``count`` elements of largest ``|a − b|`` (NaN first), largest first; zero differences left out."""
    diff = difference(a, b)
    ranked = np.where(np.isnan(diff), np.inf, diff).ravel()
    order = np.argsort(-ranked, kind="stable")[:count]
    locations = []
    for flat in order:
        if ranked[flat] == 0:
            break
        index = tuple(int(i) for i in np.unravel_index(int(flat), diff.shape))
        locations.append(Location(index, float(a[index]), float(b[index]), float(diff[index])))
    return tuple(locations)


def compare_tensor(name: TensorName, a: np.ndarray | None, b: np.ndarray | None, dtype: str,
                   rtol: float | None = None, atol: float | None = None) -> TensorComparison:  # fmt: skip
    """Compare one tensor of A with B's; a missing side or a shape mismatch is a failed row, not an error."""
    shape_a = None if a is None else tuple(a.shape)
    shape_b = None if b is None else tuple(b.shape)
    if a is None or b is None:
        return TensorComparison(name, shape_a, shape_b, None, problem=f"only in {'B' if a is None else 'A'}")
    if shape_a != shape_b:
        problem = f"shapes differ: {_shape(a.shape)} vs {_shape(b.shape)}"
        return TensorComparison(name, shape_a, shape_b, None, problem=problem)
    tolerance = tolerance_for(dtype, b, rtol, atol)
    return TensorComparison(name, shape_a, shape_b, compare(a, b, tolerance), largest(a, b))


def compare_sides(
    a: Side,
    b: Side,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    names: Sequence[str] | None = None,
) -> Comparison:
    """Compare the tensors both sides hold (or those ``names``, which both must hold), in the order of
    ``RESULT_TENSORS``; the tensors only one side holds are listed as skipped.

    Tolerances follow the least precise side's dtype (``default_tolerance``: float64, float32, float16 or
    bfloat16); ``rtol`` and ``atol`` replace them. Sides with no tensor in common are a ConfigError.
    """
    dtype = loosest(a.dtype, b.dtype)
    for name in names or ():
        missing = [side for side in (a, b) if name not in side.tensors]
        if missing:
            holds = ", ".join(missing[0].tensors) or "nothing"
            raise ConfigError(f"{missing[0].source} holds no {name!r} to compare (it holds {holds})")
    chosen = [name for name in names or () if is_tensor_name(name)]  # each is, being held by both sides
    wanted = chosen or [name for name in RESULT_TENSORS if name in a.tensors and name in b.tensors]
    if not wanted:
        raise ConfigError(
            f"{a.source} and {b.source} hold no tensor in common: A holds {', '.join(a.tensors) or 'nothing'}, "
            f"B holds {', '.join(b.tensors) or 'nothing'}"
        )
    skipped = tuple(
        (name, "only in A" if name in a.tensors else "only in B")
        for name in RESULT_TENSORS
        if (name in a.tensors) != (name in b.tensors) and not names
    )
    rows = tuple(compare_tensor(name, a.tensors.get(name), b.tensors.get(name), dtype, rtol, atol) for name in wanted)
    wa, wb = a.tensors.get(WEIGHTS), b.tensors.get(WEIGHTS)
    delta = None
    if wa is not None and wb is not None and wa.shape == wb.shape:
        delta = difference(wa, wb)
    masked = None
    if a.allowed is not None and b.allowed is not None and a.allowed.shape == b.allowed.shape:
        masked = ~a.allowed & ~b.allowed
    return Comparison(a, b, rows, delta, masked, skipped)


def side_from_array(array: BareArray, other: Side, layout: str | None = None) -> Side:
    """A bare array as a side, what it holds told from its shape against the ``other`` side's problem."""
    reading = recognise(array.array, sizes_of(other.tensors), layout, source=array.source)
    return Side(array.source, "array", {reading.name: reading.array}, other.tokens, other.key_tokens, array.dtype)
