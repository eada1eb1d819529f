"""What attention does, beyond its weights: rollout through the layers, value-weighted contributions, sink mass.

- **Rollout** (Abnar & Zuidema, 2020): each layer's weights averaged over heads, half of each row kept on
  the token itself for the residual stream, ``A_l = 0.5·mean_h(W_l) + 0.5·I`` with rows renormalised; the
  rollout after layer l is ``A_l ··· A_0``. A causal model's rows stay causal: every factor is lower
  triangular.
- **Value-weighted attention** (Kobayashi et al., 2020): ``‖α_ij · v_j W_O^h‖``, the size of what key j
  actually adds to query i's output through head h (without W_O, ``‖α_ij · v_j‖``).
- **Sink mass**: the share of each head's attention that lands on the first token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from attnx.core.result import AttentionResult


@dataclass(frozen=True, eq=False)
class Rollout:
    """Rollout after each layer: ``layers[l]`` is ``[query, key]`` after layers 0 … l (both from 0)."""

    tokens: tuple[str, ...]
    layers: np.ndarray  # (L, N, N)

    @property
    def final(self) -> np.ndarray:
        """The rollout through every layer, ``[query, key]``."""
        return self.layers[-1]


def rollout_step(average: np.ndarray) -> np.ndarray:
    """One layer's factor: ``0.5·average + 0.5·I``, rows renormalised (a row with no weight stays the identity)."""
    n = average.shape[0]
    factor = 0.5 * np.asarray(average, dtype=np.float64) + 0.5 * np.eye(n)
    return factor / factor.sum(axis=1, keepdims=True)


def rollout(averages: Iterable[np.ndarray], tokens: tuple[str, ...]) -> Rollout:
    """Rollout from each layer's head-averaged weights ``[query, key]`` (layer 0 first), one layer at a time."""
    steps: list[np.ndarray] = []
    for average in averages:
        factor = rollout_step(average)
        steps.append(factor if not steps else factor @ steps[-1])
    if not steps:
        raise ValueError("rollout needs at least one layer")
    return Rollout(tokens, np.stack(steps))


def value_contributions(result: AttentionResult, w_o: np.ndarray | None = None) -> np.ndarray:
    """``[head, query, key]``: ‖α_ij · v_j W_O^h‖ (W_O^h: the rows of ``w_o`` ``[d_model, d_out]`` that read
    head h's columns), or ‖α_ij · v_j‖ without ``w_o``, in float64."""
    assert result.weights is not None and result.v is not None  # computed with weights and V
    weights = np.asarray(result.weights, dtype=np.float64)  # (H, N, M)
    out = np.empty_like(weights)
    w_o = None if w_o is None else np.asarray(w_o, dtype=np.float64)
    for h in range(result.heads):
        v = np.asarray(result.v[result.kv_head(h)], dtype=np.float64)  # (M, d_k)
        moved = v @ w_o[list(result.head_columns(h))] if w_o is not None else v  # (M, d_out)
        out[h] = weights[h] * np.linalg.norm(moved, axis=1)[None, :]  # ‖α_ij v_j W‖ = α_ij ‖v_j W‖
    return out


def sink_mass(result: AttentionResult) -> np.ndarray:
    """``[head]``: the mean weight the queries put on the first key (token 0)."""
    assert result.weights is not None
    return np.asarray(result.weights[:, :, 0], dtype=np.float64).mean(axis=1)
