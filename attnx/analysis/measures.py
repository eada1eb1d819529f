"""What attention does, beyond its weights: rollout through the layers, value-weighted contributions, sink mass.

- **Rollout** (Abnar & Zuidema, 2020): each layer's weights averaged over heads, half of each row kept on
  the token itself for the residual stream, ``A_l = 0.5·mean_h(W_l) + 0.5·I`` with rows renormalised; the
  rollout after layer l is ``A_l ··· A_0``. A causal model's rows stay causal: every factor is lower
  triangular.
- **Value-weighted attention** (Kobayashi et al., 2020): ``‖α_ij · v_j W_O^h‖``, the size of what key j
  actually adds to query i's output through head h (without W_O, ``‖α_ij · v_j‖``).
- **Sink mass**: the share of each head's attention that lands on the first token (and, for a model, on the
  special tokens its tokenizer adds): beside it, the share of the head's value-weighted contributions that
  lands there, both over the queries with a choice (the registry's ``sink`` and ``sink-by-value``). A head
  that parks its weight on a sink whose values are small writes little.
- **Write**: the size of what a head adds to each query's output, ``‖Σ_j α_ij v_j W_O^h‖``, averaged over the
  queries; ``share`` divides it by the largest head's. A head whose weights earn it a label but whose
  share is below ``FAINT`` is flagged ``faint``: its pattern is striking and its effect small.

The thresholds (``SINK``, ``FAINT``) live in the measure registry (attnx/core/measures.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from attnx.analysis.heads import chosen_queries, on_sinks, sink_keys, sink_mass
from attnx.core.measures import MEASURES, Measure
from attnx.core.result import AttentionResult
from attnx.core.tensors import HEAD_OUTPUTS, WEIGHTS, V


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
    weights = np.asarray(result.tensor(WEIGHTS), dtype=np.float64)  # (H, N, M)
    values = result.tensor(V)  # (H_kv, M, d_k)
    out = np.empty_like(weights)
    w_o = None if w_o is None else np.asarray(w_o, dtype=np.float64)
    for h in range(result.heads):
        v = np.asarray(values[result.kv_head(h)], dtype=np.float64)  # (M, d_k)
        moved = v @ w_o[list(result.head_columns(h))] if w_o is not None else v  # (M, d_out)
        out[h] = weights[h] * np.linalg.norm(moved, axis=1)[None, :]  # ‖α_ij v_j W‖ = α_ij ‖v_j W‖
    return out


def value_shares(result: AttentionResult, w_o: np.ndarray | None = None) -> np.ndarray:
    """``[head, query, key]``: each key's share of what the query receives through the head, measured by value:
    ``‖α_ij v_j W_O^h‖ / Σ_j ‖α_ij v_j W_O^h‖`` (a row that receives nothing stays 0). Rows sum to 1, as the
    weights' do, so the two read side by side."""
    pairs = value_contributions(result, w_o)
    totals = pairs.sum(axis=2, keepdims=True)
    return np.divide(pairs, totals, out=np.zeros_like(pairs), where=totals > 0)


def _threshold(measure: Measure) -> float:
    """``measure``'s threshold, which the registry gives each measure this module notes heads by."""
    if measure.threshold is None:
        raise RuntimeError(f"the measure registry gives {measure.name!r} no threshold (attnx/core/measures.py)")
    return measure.threshold


_SINK, _SHARE = MEASURES["sink"], MEASURES["share"]
SINK: float = _threshold(_SINK)  # a head whose sink mass reaches this is noted a sink
FAINT: float = _threshold(_SHARE)  # a labelled head whose write share is below this is flagged faint


@dataclass(frozen=True, eq=False)
class HeadMeasures:
    """Per head (``[head]`` arrays, float64): sink mass by weight and by value-weighted contribution (means over
    the queries with a choice; NaN without one), the mean size of what the head writes and its share of the
    largest head's; ``sinks`` are the keys counted as sinks."""

    sinks: tuple[int, ...]
    sink: np.ndarray
    sink_value: np.ndarray
    write: np.ndarray
    share: np.ndarray

    def is_sink(self, head: int) -> bool:
        """Whether head ``head`` puts at least ``SINK`` of its weight on the sinks."""
        return _SINK.holds(float(self.sink[head]))

    def is_faint(self, head: int, label: str | None) -> bool:
        """Whether a head with ``label`` (None: no label) writes less than ``FAINT`` of the largest head."""
        return label is not None and _SHARE.holds(float(self.share[head]))


def head_measures(result: AttentionResult, w_o: np.ndarray | None = None, sinks: Sequence[int] = (0,)) -> HeadMeasures:
    """Sink mass, value-weighted sink mass, write and share of every head (``w_o``: ``[d_model, d_out]``, or None
    to measure ``‖α_ij v_j‖``; ``sinks``: the keys that count as sinks, key 0 by default). Sink masses are means
    over the queries with a choice, as every score of `attnx heads` is (a causal query 0 sees key 0 alone)."""
    keys = sink_keys(sinks, len(result.key_tokens))
    rows = np.flatnonzero(chosen_queries(result))
    weights = np.asarray(result.tensor(WEIGHTS), dtype=np.float64)  # (H, N, M)
    shares = value_shares(result, w_o)  # (H, N, M): each key's share of its row, by value
    none = np.full(result.heads, np.nan)  # no query with a choice: no sink mass
    sink = sink_mass(result, weights, rows, keys).mean(axis=1) if rows.size else none
    sink_value = on_sinks(shares, rows, keys).mean(axis=1) if rows.size else none
    head_outputs = result.tensor(HEAD_OUTPUTS)
    w = None if w_o is None else np.asarray(w_o, dtype=np.float64)
    write = np.empty(result.heads)
    for h in range(result.heads):
        written = np.asarray(head_outputs[h], dtype=np.float64)  # (N, d_k): α·V, before any drop
        if w is not None:
            written = written @ w[list(result.head_columns(h))]  # (N, d_out)
        write[h] = np.linalg.norm(written, axis=1).mean()
    top = write.max() if write.size else 0.0
    share = write / top if top > 0 else np.zeros_like(write)
    return HeadMeasures(tuple(keys), sink, sink_value, write, share)
