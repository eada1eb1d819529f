"""Two checkpoints of one architecture on one text, layer by layer: which heads' attention moved, and how far.

The uses: a quantized file against its float original (which heads does quantization hurt?), a fine-tune
against its base. Both models read the same tokens (the tokenizers must agree) and run side by side, one layer
of each held at a time. Per layer and head: the Jensen-Shannon divergence between the two sides' weights of
each query's row (in bits: 0 the same, 1 disjoint; a learned sink counts as one more key), its mean and largest
over the queries, and the largest |Δα| and where; per layer, how far the output left on the residual stream
moved (‖B − A‖ / ‖A‖ per token); and, where both have an LM head, the next-token KL(A ‖ B) per token. This module
holds those values and the measures over arrays; ``attnx.workflows.model_diff`` runs the two models to get them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.tensors import WEIGHTS


@dataclass(frozen=True, eq=False)
class HeadShift:
    """How far one head's attention moved from A to B: the JS divergence of its rows (bits), mean and largest
    over the queries, and its largest |Δα| at ``query`` → ``key`` (-1: the learned sink)."""

    layer: int
    head: int
    js_mean: float
    js_max: float
    max_delta: float
    query: int
    key: int


@dataclass(frozen=True, eq=False)
class LayerShift:
    """One layer: its heads' shifts, and the relative L2 shift of its output per token (``output_shift``
    ``[token]``) and over the whole layer (``output_overall``: ‖B − A‖ / ‖A‖ over every token)."""

    layer: int
    heads: tuple[HeadShift, ...]
    output_shift: np.ndarray
    output_overall: float


@dataclass(frozen=True, eq=False)
class ModelComparison:
    """Two checkpoints on one text: ``a`` and ``b`` (as given), the family they share, the tokens both read (the
    queries'), every layer's shifts, and the next-token KL(A ‖ B) per token in nats (None unless the layers
    compared feed both models' LM heads).

    In a model of several stacks, ``stack`` and ``kind`` name the attention compared (an encoder-decoder's
    ``decoder`` and its ``cross`` attention) and ``keys`` the tokens its keys stand for (the source's, for a
    cross-attention); None where the model has one stack, whose keys are its queries' tokens."""

    a: str
    b: str
    architecture: str
    tokens: tuple[str, ...]
    layers: tuple[LayerShift, ...]
    kl: np.ndarray | None
    stack: str | None = None
    kind: str | None = None
    keys: tuple[str, ...] | None = None

    @property
    def key_tokens(self) -> tuple[str, ...]:
        """The tokens the keys stand for: ``keys``, else the queries' own."""
        return self.tokens if self.keys is None else self.keys

    def grid(self) -> np.ndarray:
        """``[layer, head]``: each head's mean JS divergence."""
        return np.array([[head.js_mean for head in layer.heads] for layer in self.layers])

    def worst(self, count: int | None = None) -> list[HeadShift]:
        """The heads by mean JS divergence, largest first (the lower layer and head first among equals)."""
        heads = [head for layer in self.layers for head in layer.heads]
        return sorted(heads, key=lambda h: (-h.js_mean, h.layer, h.head))[:count]


def js_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The Jensen-Shannon divergence in bits of each row (last axis) of ``p`` and ``q``: 0 the same, 1 disjoint."""
    m = (p + q) / 2

    def part(x: np.ndarray) -> np.ndarray:
        ratio = np.where(x > 0, x / np.where(m > 0, m, 1.0), 1.0)
        return np.asarray((x * np.log2(ratio)).sum(axis=-1))

    return np.maximum((part(p) + part(q)) / 2, 0.0)


def outcomes(result: AttentionResult) -> np.ndarray:
    """``[head, query, key (+ sink)]``: the weights, with the learned sink's share as a last key where it has one."""
    weights = np.asarray(result.tensor(WEIGHTS), dtype=np.float64)
    if result.sink_weights is None:
        return weights
    return np.concatenate([weights, np.asarray(result.sink_weights, dtype=np.float64)[..., None]], axis=2)


def head_shifts(layer: int, a: AttentionResult, b: AttentionResult) -> tuple[HeadShift, ...]:
    """Every head's shift between the two sides' results of one layer."""
    p, q = outcomes(a), outcomes(b)  # (H, N, M [+ 1])
    js = js_divergence(p, q)  # (H, N)
    delta = np.abs(q - p)
    keys = a.tensor(WEIGHTS).shape[2]
    shifts = []
    for h in range(a.heads):
        query, key = np.unravel_index(int(np.argmax(delta[h])), delta[h].shape)
        shifts.append(HeadShift(layer, h, float(js[h].mean()), float(js[h].max()), float(delta[h, query, key]),
                                int(query), -1 if key == keys else int(key)))  # fmt: skip
    return tuple(shifts)


def relative_shift(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """‖b − a‖ / ‖a‖ per row, and over the whole arrays (0 where ``a`` is 0 and so is the difference)."""
    a64, d64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rows, base = np.linalg.norm(d64, axis=1), np.linalg.norm(a64, axis=1)
    per_row = np.divide(rows, base, out=np.where(rows > 0, np.inf, 0.0), where=base > 0)
    whole = float(np.linalg.norm(a64))
    return per_row, float(np.linalg.norm(d64)) / whole if whole > 0 else 0.0
