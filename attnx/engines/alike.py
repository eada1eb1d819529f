"""Problems alike computed together on the NumPy engine: one model layer's attention on copies of a text.

An ablation sweep steps hundreds of copies of one text through a model's layers, each with other heads
dropped; at a layer their attention problems share the weights, settings, positions and masks and differ only
in X and the dropped heads. One at a time, each pays the engine's Python steps and a few small matmuls (about
1 ms at 11 tokens, most of it waiting on BLAS threads); together (``attnx.engines.core.attention_copies``), each
projection is one matmul over all their tokens and the scores, softmax and values one batched step. Only
problems the NumPy engine computes on whole matrices alone (``dense``) are stacked, so each result equals its
``compute``; the checks ``compute`` makes (caps, the dtype's range, finite results) are made here too.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator, Sequence
from dataclasses import fields

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.settings import AttentionSettings
from attnx.core.spec import AttentionSpec, ProjectedInputs, largest_abs
from attnx.core.tensors import (
    HEAD_OUTPUTS,
    INTACT_OUTPUT,
    INTACT_PROJECTED,
    MASK,
    OUTPUT,
    PROJECTED,
    SCALED,
    TensorName,
)
from attnx.engines import guards
from attnx.engines.core import attention_copies
from attnx.engines.numpy_engine import DENSE_LIMIT, numpy_on

# The arrays ``guards.check_finite`` scans, and those a copy that drops no head goes without.
FINITE = (SCALED, HEAD_OUTPUTS, OUTPUT, PROJECTED)
INTACT = (INTACT_OUTPUT, INTACT_PROJECTED)

# The settings problems alike share: all but the dropped heads.
SHARED = tuple(field.name for field in fields(AttentionSettings) if field.name != "dropped_heads")


def key(spec: AttentionSpec) -> Hashable | None:
    """What problems computed together must share (the same objects, for weights, masks and a score bias; else equal
    values);
    None for a problem that is never stacked: direct Q, K, V, cross-attention, or one the NumPy engine tiles."""
    inputs, settings = spec.inputs, spec.settings
    if not isinstance(inputs, ProjectedInputs) or inputs.x_kv is not None:
        return None
    if settings.heads * spec.n_queries * spec.n_keys > DENSE_LIMIT and not spec.dense_only:
        return None
    shared = (inputs.w_q, inputs.w_k, inputs.w_v, inputs.q_norm, inputs.k_norm, spec.w_o, spec.mask, spec.padding,
              spec.score_bias)  # fmt: skip
    return (
        *map(id, shared), inputs.x.shape, inputs.x.dtype, spec.query_positions, spec.kv_pooled_from, id(spec.limits),
        *(getattr(settings, name) for name in SHARED),
    )  # fmt: skip


def groups(specs: Sequence[AttentionSpec]) -> Iterator[list[int]]:
    """The indices of ``specs`` in groups of problems alike (``key``), each group's stacked arrays within
    ``DENSE_LIMIT`` elements and the caps (``footprint``): a problem alike with none, or too large to stack, stands
    alone."""
    found: dict[Hashable, list[int]] = {}
    for index, spec in enumerate(specs):
        found.setdefault(key(spec) or ("alone", index), []).append(index)
    for indices in found.values():
        size = per_batch(specs[indices[0]])
        for start in range(0, len(indices), size):
            yield indices[start : start + size]


def per_batch(spec: AttentionSpec) -> int:
    """How many copies of ``spec``'s problem are stacked at once: as many as keep the stacked arrays within
    ``DENSE_LIMIT`` elements and the caps (at least one)."""
    return max(1, min(DENSE_LIMIT, guards.caps_for(spec).max_elements) // footprint(spec))


def footprint(spec: AttentionSpec) -> int:
    """Elements one copy adds to the largest stacked array: its ``[head, query, key]`` scores or its widest
    ``[token, width]`` projection."""
    widths = [spec.inputs.shapes[3] * spec.n_keys // spec.n_queries, spec.d_model]
    if isinstance(spec.inputs, ProjectedInputs):
        widths.append(spec.inputs.w_q.d_in)
    if spec.w_o is not None:
        widths.append(spec.w_o.d_out)
    return max(spec.settings.heads * spec.n_queries * spec.n_keys, spec.n_queries * max(widths))


def compute_alike(
    specs: Sequence[AttentionSpec], dtype: str, needs: Collection[TensorName] | None, strict: bool
) -> list[AttentionResult]:
    """``compute`` on the NumPy engine of problems alike (one of ``groups``), together. The caller has checked the
    first against the caps (they share its shape). The arrays are checked finite all at once; only where one is
    not is each result checked alone, for the message that says where."""
    if strict:
        for spec in specs:
            guards.check_range(spec, dtype)
    first, dropped = specs[0], [spec.settings.dropped_heads for spec in specs]
    xs = np.stack([spec.inputs.x for spec in specs if isinstance(spec.inputs, ProjectedInputs)])  # (P, N, d_in)
    with np.errstate(all="ignore"):  # overflow is reported by check_finite, not as RuntimeWarnings
        stacked = attention_copies(numpy_on(dtype), first, xs, dropped, needs)  # [copy, …] each
    scale = float(np.dtype(dtype).type(first.multiplier))  # as NumpyEngine reports it
    census = None if needs is None or MASK in needs else first.mask_census()  # alike: the same mask
    results = []
    for copy, spec in enumerate(specs):
        dropping = bool(spec.settings.dropped_heads)
        own = {name: array[copy] for name, array in stacked.items() if dropping or name not in INTACT}
        results.append(AttentionResult.assemble(
            spec, own, scale=scale, engine="numpy", device="cpu", dtype=dtype, needs=needs, census=census
        ))  # fmt: skip
    if strict and not finite(stacked):
        for spec, result in zip(specs, results, strict=True):
            if not guards.cannot_overflow(spec, dtype):
                guards.check_finite(spec, result)
    return results


def projected_copies(
    spec: AttentionSpec, xs: np.ndarray, dropped: Sequence[tuple[int, ...]], dtype: str, strict: bool
) -> np.ndarray | None:
    """``compute(...).projected`` on the NumPy engine of ``spec``'s problem for each copy of X in ``xs``, copy c
    dropping ``dropped[c]``, together, ``[copy, query, d_out]``; None where ``compute``, copy by copy, must decide
    (an input beyond ``dtype``'s range, or a result not finite: it raises, saying where, or gives what it gives)."""
    largest = guards.largest_in(dtype)
    if strict and largest < np.finfo(np.float64).max:
        guards.check_range(spec, dtype)  # the weights (and the first copy's X)
        if not largest_abs(xs) <= largest:
            return None
    with np.errstate(all="ignore"):
        found = attention_copies(numpy_on(dtype), spec, xs, dropped, {PROJECTED})
    if strict and not finite(found):
        return None
    return np.asarray(found[PROJECTED])


def finite(arrays: dict[TensorName, np.ndarray]) -> bool:
    """True when no array ``guards.check_finite`` scans holds inf or NaN."""
    return all(guards._all_finite(arrays[name]) for name in FINITE if name in arrays)
