"""AttentionResult: what an engine computed, frozen, as NumPy arrays with documented axes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ARRAYS = (
    "q_heads",
    "k_heads",
    "v_heads",
    "scores",
    "scaled",
    "weights",
    "head_outputs",
    "output",
    "average_weights",
)


@dataclass(frozen=True, eq=False)
class AttentionResult:
    """Every intermediate of one multi-head attention computation.

    Axis order (H heads, N queries, M keys):

    - ``q_heads``         ``[head, query, d_k]``  each head's slice of Q, as the engine used it
    - ``k_heads``         ``[head, key, d_k]``    each head's slice of K
    - ``v_heads``         ``[head, key, d_k]``    each head's slice of V
    - ``scores``          ``[head, query, key]``  raw dot products Q_h K_h^T
    - ``scaled``          ``[head, query, key]``  ``scores * scale``
    - ``weights``         ``[head, query, key]``  softmax of ``scaled`` over keys
    - ``head_outputs``    ``[head, query, d_k]``  ``weights @ V_h``
    - ``output``          ``[query, d_model]``    head outputs concatenated along columns
    - ``average_weights`` ``[query, key]``        mean of ``weights`` over heads

    Arrays are read-only and keep the dtype the engine computed in. ``query_positions[i]`` is the
    position in the original input of query row ``i`` (rows may be a selection, see
    ``AttentionSpec.select_queries``).
    """

    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    heads: int
    d_model: int
    d_k: int
    scale: float
    q_heads: np.ndarray
    k_heads: np.ndarray
    v_heads: np.ndarray
    scores: np.ndarray
    scaled: np.ndarray
    weights: np.ndarray
    head_outputs: np.ndarray
    output: np.ndarray
    average_weights: np.ndarray
    engine: str
    device: str
    dtype: str
    query_positions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ARRAYS:
            getattr(self, name).flags.writeable = False
        if not self.query_positions:
            object.__setattr__(self, "query_positions", tuple(range(len(self.tokens))))

    def head_columns(self, head: int) -> range:
        """Columns of d_model that head ``head`` (0-based) owns."""
        return range(head * self.d_k, (head + 1) * self.d_k)
