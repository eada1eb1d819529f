"""Known attention bugs as hypotheses: compute the input as the buggy kernel would, and see if it explains the output.

Each hypothesis is the reference computation with one thing done wrong: the scale, the causal mask's
diagonal or corner, how grouped K/V heads are shared, which columns make a head, the softmax's axis or
its normalisation, what a query with no visible key gets. Where the kernel's tensors match a
hypothesis within the kernel's tolerance, and not the reference, the hypothesis is the diagnosis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from attnx.analysis.check_against import Diagnosis, Verification
from attnx.analysis.tolerance import tolerance_for
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import HEAD_OUTPUTS, OUTPUT, PROJECTED, WEIGHTS, K, Q, TensorName, V
from attnx.engines import compute
from attnx.engines.core import merge_heads
from attnx.engines.numpy_engine import numpy_on

# The tensors a hypothesis is judged on: what a kernel usually hands over.
JUDGED: tuple[TensorName, ...] = (OUTPUT, HEAD_OUTPUTS, WEIGHTS, PROJECTED)
Tensors = dict[TensorName, np.ndarray]


def _merge(head_outputs: np.ndarray, spec: AttentionSpec) -> np.ndarray:
    """``[head, query, d_k]`` -> ``[query, d_model]`` in the spec's column layout, dropped heads zeroed."""
    kept = head_outputs.copy()
    kept[list(spec.settings.dropped_heads)] = 0.0
    return merge_heads(numpy_on("float64"), kept, spec.settings.layout)


def mutant(
    spec: AttentionSpec,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    kv_of: np.ndarray,
    multiplier: float,
    allowed: np.ndarray | None,
    axis: int = -1,
    normalise: bool = True,
    empty: str = "zero",
) -> Tensors:
    """The weights and outputs of attention done the way a hypothesis says, in float64.

    ``kv_of[h]`` is the K/V head query head h reads; ``axis`` the axis the softmax runs over (−1: keys,
    right; −2: queries); without ``normalise`` the exponentials are not divided by their sum; ``empty``
    is what a query with no visible key gets: ``zero`` (attnx, SDPA), ``nan`` or ``uniform`` weights.
    """
    scores = np.einsum("hnd,hmd->hnm", q, k[kv_of]) * multiplier  # (H, N, M)
    if spec.score_bias is not None:  # the input's bias per query head, never the bug
        scores = scores + spec.score_bias
    cap = spec.settings.softcap
    if cap is not None:
        scores = cap * np.tanh(scores / cap)
    visible = np.ones(scores.shape[1:], dtype=bool) if allowed is None else allowed
    masked = np.where(visible, scores, -np.inf)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        top = np.max(masked, axis=axis, keepdims=True, initial=-np.inf)
        exps = np.where(visible, np.exp(masked - np.where(np.isfinite(top), top, 0.0)), 0.0)
        total = exps.sum(axis=axis, keepdims=True)
        weights = exps / np.where(total > 0, total, 1.0) if normalise else exps
    if axis == -1:
        none = ~visible.any(axis=1)  # (N,) queries that see no key
        if empty == "nan":
            weights[:, none] = np.nan
        elif empty == "uniform":
            weights[:, none] = 1.0 / weights.shape[2]
    head_outputs = weights @ v[kv_of]  # (H, N, d_k)
    out: Tensors = {WEIGHTS: weights, HEAD_OUTPUTS: head_outputs, OUTPUT: _merge(head_outputs, spec)}
    if spec.w_o is not None:
        out[PROJECTED] = out[OUTPUT] @ spec.w_o.weight + (0.0 if spec.w_o.bias is None else spec.w_o.bias)
    return out


Hypothesis = tuple[str, str, Callable[[], Tensors]]  # the bug's name, what it means here, how to compute it


@dataclass(frozen=True, eq=False)
class _Reference:
    """The reference's own computation of ``spec``, float64, to redo with one thing done wrong (``run``)."""

    spec: AttentionSpec
    q: np.ndarray  # (H, N, d_k)
    k: np.ndarray  # (H_kv, M, d_k)
    v: np.ndarray  # (H_kv, M, d_v)
    kv_of: np.ndarray  # the K/V head each query head reads: h // (H / H_kv)
    allowed: np.ndarray | None  # (N, M) where a query may attend a key; None: everywhere
    d_k: int

    @classmethod
    def of(cls, spec: AttentionSpec, verification: Verification) -> _Reference:
        """The reference's Q, K and V of ``verification``, and how its heads share K and V."""
        ref = verification.reference
        q, k, v = (np.asarray(ref.tensor(name), dtype=np.float64) for name in (Q, K, V))
        heads, kv_heads = spec.settings.heads, spec.settings.kv_heads
        return cls(spec, q, k, v, np.arange(heads) // (heads // kv_heads), spec.allowed(), ref.d_k)

    def run(self, **changes: object) -> Callable[[], Tensors]:
        """The computation with ``changes`` to ``mutant``'s options (the scale, the mask, ...), to run later."""
        options: dict[str, object] = {"kv_of": self.kv_of, "multiplier": self.spec.multiplier,
                                       "allowed": self.allowed} | changes  # fmt: skip
        return lambda: mutant(self.spec, self.q, self.k, self.v, **options)  # type: ignore[arg-type]


def hypotheses(spec: AttentionSpec, verification: Verification) -> Iterator[Hypothesis]:
    """Each known bug that could apply to ``spec``: its name, what it means here, and how to compute it."""
    reference = _Reference.of(spec, verification)
    yield from _scale_bugs(reference)
    yield from _mask_bugs(reference)
    yield from _head_bugs(reference)
    yield from _softmax_bugs(reference)
    yield from _empty_row_bugs(reference, verification.reference.fully_masked_rows)


def _scale_bugs(reference: _Reference) -> Iterator[Hypothesis]:
    """1/√d_model in place of the reference's scale (with more than one head), or no scale at all."""
    multiplier, heads = reference.spec.multiplier, reference.spec.settings.heads
    d_model = heads * reference.d_k
    if heads > 1 and not math.isclose(multiplier, 1 / math.sqrt(d_model)):
        scale = 1 / math.sqrt(d_model)
        yield (
            "scale 1/√d_model",
            f"scores × 1/√d_model = {scale:.4g} where the reference uses {multiplier:.4g}",
            reference.run(multiplier=scale),
        )
    if multiplier != 1.0:
        yield (
            "no scale",
            f"scores not scaled, where the reference multiplies them by {multiplier:.4g}",
            reference.run(multiplier=1.0),
        )


def _mask_bugs(reference: _Reference) -> Iterator[Hypothesis]:
    """A plain causal mask one key late or early, or aligned bottom-right where N ≠ M."""
    spec = reference.spec
    masking = spec.masking
    if not masking.plain_causal:
        return

    def shifted(shift: int) -> np.ndarray | None:
        return masking.shifted(shift).allowed(spec.positions, spec.n_keys)

    yield (
        "causal mask one key late",
        "each query also sees the key after it (j ≤ i + 1)",
        reference.run(allowed=shifted(1)),
    )
    yield "causal mask one key early", "each query misses itself (j < i)", reference.run(allowed=shifted(-1))
    if spec.n_queries != spec.n_keys:
        shift = spec.n_keys - spec.n_queries
        yield (
            "causal mask aligned bottom-right",
            f"query i sees keys j ≤ i + {shift} (M − N), where the reference aligns the mask top-left (j ≤ i)",
            reference.run(allowed=shifted(shift)),
        )


def _head_bugs(reference: _Reference) -> Iterator[Hypothesis]:
    """K/V heads tiled instead of repeated, and heads read from the other column layout."""
    settings = reference.spec.settings
    heads, kv_heads = settings.heads, settings.kv_heads
    if 1 < kv_heads < heads:
        yield (
            "K/V heads tiled",
            f"query head h reads K/V head h mod {kv_heads} (tiling), not h // {heads // kv_heads} (repeat_interleave)",
            reference.run(kv_of=np.arange(heads) % kv_heads),
        )
    if heads > 1:
        other = "contiguous" if settings.layout == "interleaved" else "interleaved"
        swapped = reference.spec.with_settings(layout=other)
        yield (
            f"heads from {other} columns",
            f"head h reads {'every H-th column from h' if other == 'interleaved' else 'a block of d_k columns'} "
            f"of Q, K and V, where the reference reads {settings.layout} columns",
            lambda: _tensors(compute(swapped, "numpy", dtype="float64")),
        )


def _softmax_bugs(reference: _Reference) -> Iterator[Hypothesis]:
    """The softmax over the wrong axis, or not normalised."""
    yield (
        "softmax over queries",
        "each key's scores normalised over the queries, not each query's over the keys",
        reference.run(axis=-2),
    )
    yield (
        "weights not normalised",
        "exp(score − max) used as weights without dividing by their sum",
        reference.run(normalise=False),
    )


def _empty_row_bugs(reference: _Reference, fully_masked: tuple[int, ...]) -> Iterator[Hypothesis]:
    """NaN or uniform weights, where the reference gives zeros, for the queries that see no key."""
    if not fully_masked:
        return
    rows = ", ".join(map(str, fully_masked))
    yield (
        "masked rows NaN",
        f"queries {rows} see no key: NaN there, where the reference gives zeros",
        reference.run(empty="nan"),
    )
    yield (
        "masked rows uniform",
        f"queries {rows} see no key: uniform weights (the mean of V) there, where the reference gives zeros",
        reference.run(empty="uniform"),
    )


def _tensors(result: object) -> Tensors:
    return {name: getattr(result, name) for name in JUDGED if getattr(result, name, None) is not None}


def _explains(
    kernel: Mapping[TensorName, np.ndarray],
    expected: Tensors,
    verification: Verification,
    rtol: float | None = None,
    atol: float | None = None,
) -> tuple[TensorName, float] | None:
    """The largest difference (and its tensor) when every judged tensor of the kernel is within its tolerance
    of ``expected`` (NaN matching NaN), else None."""
    worst: tuple[TensorName, float] | None = None
    judged = [check.name for check in verification.checks if check.name in JUDGED and check.name in expected]
    if not judged:
        return None
    for name in judged:
        actual = np.asarray(kernel[name], dtype=np.float64)
        want = expected[name]
        if actual.shape != want.shape:
            return None
        tolerance = tolerance_for(verification.dtype, want, rtol, atol)
        both_nan = np.isnan(actual) & np.isnan(want)
        with np.errstate(invalid="ignore"):
            diff = np.where(both_nan, 0.0, np.abs(actual - want))
        if not np.all(diff <= tolerance.atol + tolerance.rtol * np.abs(np.nan_to_num(want))):
            return None
        largest = float(diff.max()) if diff.size else 0.0
        if worst is None or largest > worst[1]:
            worst = (name, largest)
    return worst


def diagnose(
    spec: AttentionSpec,
    verification: Verification,
    kernel: Mapping[TensorName, np.ndarray],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> tuple[Diagnosis, ...]:
    """The known bugs that explain a failed verification: each hypothesis the kernel's tensors match within the
    tolerance the kernel was held to (``rtol`` and ``atol`` as given to it)."""
    if verification.passed:
        return ()
    found = []
    for bug, detail, compute_it in hypotheses(spec, verification):
        explained = _explains(kernel, compute_it(), verification, rtol, atol)
        if explained is not None:
            found.append(Diagnosis(bug, detail, *explained))
    return tuple(found)
