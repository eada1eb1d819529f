"""Word alignment from cross-attention: for each target token, the source token its decoder's heads attend most."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnx.errors import ChoiceError


@dataclass(frozen=True, eq=False)
class Alignment:
    """The cross-attention weights of the chosen decoder ``layers`` and ``heads`` (from 0), averaged:
    ``weights[target, source]``; ``best[target]`` is the source token each target token attends most; ``per_head``
    how each head of every layer aligns (``HeadAlignment``); ``written`` the target positions the model wrote itself."""

    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    weights: np.ndarray  # (T, S)
    per_head: tuple[HeadAlignment, ...] = ()  # every decoder layer's heads, whichever were averaged
    written: tuple[int, ...] = ()  # the target positions the model wrote itself (--generate)

    @property
    def best(self) -> np.ndarray:
        """The source position each target token attends most (the first of equals), ``[target]``."""
        return np.argmax(self.weights, axis=1)


def chosen(asked: Sequence[int] | None, count: int, what: str) -> tuple[int, ...]:
    """``asked`` (from 0, -1 the last) as positions among ``count`` (None: all of them), in order, once each; one
    out of range is a ChoiceError giving the range."""
    from attnx.core.counting import from_end, span

    if asked is None:
        return tuple(range(count))
    found: list[int] = []
    for value in asked:
        resolved = from_end(value, count)
        if resolved is None:
            raise ChoiceError(f"{what} {value} does not exist: there are {what}s {span(count)}")
        if resolved not in found:
            found.append(resolved)
    return tuple(found)


def align(
    cross: Sequence[np.ndarray],
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
) -> Alignment:
    """The alignment of every decoder layer's cross-attention weights ``cross`` (each ``[head, target, source]``),
    averaged over ``layers`` and ``heads`` (None: all; from 0, -1 the last)."""
    picked = chosen(layers, len(cross), "layer")
    n_heads = cross[0].shape[0]
    by_head = chosen(heads, n_heads, "head")
    stacked = np.stack([cross[layer][list(by_head)] for layer in picked])  # (L, H, T, S)
    mean = stacked.mean(axis=(0, 1), dtype=np.float64)  # (T, S)
    return Alignment(tuple(source_tokens), tuple(target_tokens), picked, by_head, mean, tuple(head_alignments(cross)))


@dataclass(frozen=True)
class HeadAlignment:
    """How one cross-attention head aligns a target with its source: ``monotonicity``, Spearman's correlation between
    each target position and the source position it weighs most (1: it walks the source in order; None: one side
    never moves), ``coverage``, the share of source positions some target token weighs most, and ``entropy``, the
    rows' mean entropy over log(source length) (0: one source token a row, 1: uniform)."""

    layer: int
    head: int
    monotonicity: float | None
    coverage: float
    entropy: float


def ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks from 1 (equal values share the mean of their ranks), as Spearman's correlation wants."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values), dtype=np.float64)
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation of ``a`` and ``b``; None where either is constant."""
    ra, rb = ranks(a) - (len(a) + 1) / 2, ranks(b) - (len(b) + 1) / 2
    spread = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return None if spread == 0 else float((ra * rb).sum() / spread)


def head_alignments(cross: Sequence[np.ndarray]) -> list[HeadAlignment]:
    """Each decoder layer's heads (``cross[layer]``: ``[head, target, source]``) as ``HeadAlignment``s, in order."""
    found = []
    for layer, weights in enumerate(cross):
        heads, targets, sources = weights.shape
        for head in range(heads):
            rows = weights[head].astype(np.float64)  # (T, S)
            best = np.argmax(rows, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                entropy = -np.where(rows > 0, rows * np.log(rows), 0.0).sum(axis=1)
            scale = np.log(sources) if sources > 1 else 1.0
            found.append(HeadAlignment(layer, head, spearman(np.arange(targets), best),
                                       len(np.unique(best)) / sources, float(entropy.mean() / scale)))  # fmt: skip
    return found
