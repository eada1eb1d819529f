"""Word alignment from cross-attention: for each target token, the source token its decoder's heads attend most."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnx.errors import ChoiceError


@dataclass(frozen=True, eq=False)
class Alignment:
    """The cross-attention weights of the chosen decoder ``layers`` and ``heads`` (from 0), averaged:
    ``weights[target, source]``; ``best[target]`` is the source token each target token attends most."""

    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    weights: np.ndarray  # (T, S)

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
    return Alignment(tuple(source_tokens), tuple(target_tokens), picked, by_head, mean)
