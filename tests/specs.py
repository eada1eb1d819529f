"""Terse ways for tests to build a spec: Q, K and V, the head count and the labels, positionally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnx.core.spec import AttentionSpec


def spec_of(
    q: np.ndarray | None,
    k: np.ndarray | None,
    v: np.ndarray | None,
    heads: int,
    tokens: Sequence[str],
    key_tokens: Sequence[str],
    source: str = "<input>",
    **rest: Any,
) -> AttentionSpec:
    """``AttentionSpec.build`` with Q, K, V, heads and labels in that order (None for Q, K, V with ``x=``)."""
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=key_tokens, source=source, **rest)
