"""AttentionSpec: the validated, immutable description of one multi-head attention problem."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from attnx.errors import ConfigError


def divisors(n: int) -> list[int]:
    """Return the head counts that split ``n`` columns evenly, in increasing order."""
    return [h for h in range(1, n + 1) if n % h == 0]


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=np.float64, copy=True)
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class AttentionSpec:
    """Q, K, V and the head count, checked to be mutually consistent.

    Shapes: ``q`` is ``[query, d_model]``; ``k`` and ``v`` are ``[key, d_model]``. Head ``h`` owns
    the contiguous columns ``h*d_k .. (h+1)*d_k - 1`` of each. The arrays are float64 copies that
    cannot be written to. ``source`` names where the problem came from, for messages.

    ``query_positions`` gives, for each row of ``q``, its position in the original problem: a spec
    narrowed with ``select_queries`` keeps only some rows but still knows where they stood.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    heads: int
    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    source: str = "<input>"
    query_positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        where = self.source
        for name in ("q", "k", "v"):
            array = getattr(self, name)
            if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
                raise ConfigError(f"{where}: {name} must be a non-empty matrix, got shape {array.shape}")
            object.__setattr__(self, name, _frozen(array))
        (n, d_model), (m, d_k_model), (m_v, d_v_model) = self.q.shape, self.k.shape, self.v.shape
        if d_k_model != d_model or d_v_model != d_model:
            raise ConfigError(
                f"{where}: q, k and v must have the same number of columns (d_model), "
                f"got q {self.q.shape}, k {self.k.shape}, v {self.v.shape}"
            )
        if m != m_v:
            raise ConfigError(f"{where}: k and v must have one row per key, got k {self.k.shape}, v {self.v.shape}")
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise ConfigError(f"{where}: heads must be a positive whole number, got {self.heads!r}")
        if d_model % self.heads:
            raise ConfigError(
                f"{where}: d_model {d_model} is not divisible by heads {self.heads}; "
                f"head counts that work: {', '.join(map(str, divisors(d_model)))}"
            )
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "key_tokens", tuple(self.key_tokens))
        if len(self.tokens) != n:
            raise ConfigError(f"{where}: {len(self.tokens)} tokens given but q has {n} rows")
        if len(self.key_tokens) != m:
            raise ConfigError(f"{where}: {len(self.key_tokens)} key tokens given but k has {m} rows")
        positions = tuple(range(n)) if self.query_positions is None else tuple(self.query_positions)
        if len(positions) != n:
            raise ConfigError(f"{where}: {len(positions)} query positions given but q has {n} rows")
        object.__setattr__(self, "query_positions", positions)

    @property
    def d_model(self) -> int:
        """Width of Q, K and V (all heads together)."""
        return int(self.q.shape[1])

    @property
    def d_k(self) -> int:
        """Width of one head's slice of Q, K and V."""
        return self.d_model // self.heads

    @property
    def n_queries(self) -> int:
        """Number of query rows (N)."""
        return int(self.q.shape[0])

    @property
    def n_keys(self) -> int:
        """Number of key and value rows (M)."""
        return int(self.k.shape[0])

    def head_columns(self, head: int) -> range:
        """Columns of d_model that head ``head`` (0-based) reads."""
        return range(head * self.d_k, (head + 1) * self.d_k)

    def with_heads(self, heads: int) -> AttentionSpec:
        """The same problem split into a different number of heads (validated again)."""
        return replace(self, heads=heads)

    def select_queries(self, rows: Sequence[int]) -> AttentionSpec:
        """The same problem restricted to some query rows (0-based), all keys kept.

        An engine then computes only those rows: tracing one token of a long input costs one row
        of each head's weights, not the whole matrix.
        """
        index = list(rows)
        bad = [i for i in index if not 0 <= i < self.n_queries]
        if bad:
            raise ConfigError(f"{self.source}: query {bad[0]} is out of range 0..{self.n_queries - 1}")
        return replace(
            self,
            q=self.q[index],
            tokens=tuple(self.tokens[i] for i in index),
            query_positions=tuple(self.query_positions[i] for i in index),
        )
