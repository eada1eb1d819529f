"""How far the output moves when heads are dropped (ablation), per token and overall."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.tensors import OUTPUT, PROJECTED, TensorName


@dataclass(frozen=True)
class Ablation:
    """The shift ``final − intact`` of the layer's last output (projected when W_o exists).

    ``per_token[i]`` is the L2 norm of query row i's shift; ``overall`` the L2 norm of all of it.
    """

    dropped_heads: tuple[int, ...]
    compared: TensorName
    per_token: np.ndarray
    overall: float


def ablation(result: AttentionResult) -> Ablation | None:
    """The ablation shift of ``result``, or None when no head was dropped."""
    if not result.dropped_heads or result.intact_output is None:
        return None
    compared: TensorName
    if result.projected is not None and result.intact_projected is not None:
        compared, final, intact = PROJECTED, result.projected, result.intact_projected
    else:
        compared, final, intact = OUTPUT, result.output, result.intact_output
    shift = np.asarray(final, dtype=np.float64) - np.asarray(intact, dtype=np.float64)
    return Ablation(result.dropped_heads, compared, np.linalg.norm(shift, axis=1), float(np.linalg.norm(shift)))
