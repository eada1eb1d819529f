"""AttentionResult: what an engine computed, frozen, as NumPy arrays with documented axes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from attnx.spec import AttentionSpec

# Every array an engine can compute; an engine asked for fewer (``needs``) leaves the rest None.
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
OPTIONAL_ARRAYS = ("projected", "intact_output", "intact_projected")


@dataclass(frozen=True, eq=False)
class AttentionResult:
    """Every intermediate of one multi-head attention computation.

    Axis order (H heads, H_kv K/V heads, N queries, M keys):

    - ``q_heads``          ``[head, query, d_k]``    each head's slice of Q, as the engine used it
    - ``k_heads``          ``[kv_head, key, d_k]``   each K/V head's slice of K
    - ``v_heads``          ``[kv_head, key, d_k]``   each K/V head's slice of V
    - ``scores``           ``[head, query, key]``    raw dot products Q_h K_h^T
    - ``scaled``           ``[head, query, key]``    ``scores * scale`` (before any mask)
    - ``weights``          ``[head, query, key]``    softmax of ``scaled`` over the allowed keys
    - ``head_outputs``     ``[head, query, d_k]``    ``weights @ V_h``
    - ``output``           ``[query, d_model]``      head outputs concatenated (dropped heads zeroed)
    - ``average_weights``  ``[query, key]``          mean of ``weights`` over heads
    - ``projected``        ``[query, d_out]``        ``output @ W_o + b_o``, when W_o exists
    - ``mask``             ``[query, key]``          True where attending is allowed; None = all (or not asked for)
    - ``intact_output``/``intact_projected``         the same without ablation, when heads were dropped

    Arrays are read-only and keep the dtype the engine computed in. An array that was not asked
    for (``compute(..., needs=...)``) is None: ``output`` alone never builds an H×N×M matrix.
    ``query_positions[i]`` is the position in the original input of query row ``i`` (see
    ``AttentionSpec.select_queries``). ``blocked_pairs`` counts the query-key pairs a mask blocks
    (None without a mask), whether or not ``mask`` was asked for.
    """

    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    heads: int
    d_model: int
    d_k: int
    scale: float
    q_heads: np.ndarray | None
    k_heads: np.ndarray | None
    v_heads: np.ndarray | None
    scores: np.ndarray | None
    scaled: np.ndarray | None
    weights: np.ndarray | None
    head_outputs: np.ndarray | None
    output: np.ndarray
    average_weights: np.ndarray | None
    engine: str
    device: str
    dtype: str
    query_positions: tuple[int, ...] = ()
    kv_heads: int = 0
    layout: str = "contiguous"
    scale_mode: str = "sqrt_dk"
    mask: np.ndarray | None = None
    projected: np.ndarray | None = None
    intact_output: np.ndarray | None = None
    intact_projected: np.ndarray | None = None
    dropped_heads: tuple[int, ...] = ()
    parameters: int = 0
    fully_masked_rows: tuple[int, ...] = ()
    blocked_pairs: int | None = None

    def __post_init__(self) -> None:
        for name in (*ARRAYS, *OPTIONAL_ARRAYS, "mask"):
            array = getattr(self, name)
            if array is not None:
                array.flags.writeable = False
        if not self.query_positions:
            object.__setattr__(self, "query_positions", tuple(range(len(self.tokens))))
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)

    @classmethod
    def assemble(
        cls,
        spec: AttentionSpec,
        arrays: dict[str, np.ndarray],
        *,
        scale: float,
        engine: str,
        device: str,
        dtype: str,
        needs: Collection[str] | None = None,
    ) -> AttentionResult:
        """A result for ``spec`` from an engine's arrays (names from ``ARRAYS`` and ``OPTIONAL_ARRAYS``).

        The ``[query, key]`` mask (an N × M array) is kept when ``needs`` is None or names ``mask``;
        the fully masked rows are then read from it, else found block by block.
        """
        mask = spec.allowed() if needs is None or "mask" in needs else None
        if mask is None:
            fully_masked, blocked = spec.mask_census()
        else:
            fully_masked = tuple(spec.query_positions[i] for i in np.flatnonzero(~mask.any(axis=1)))  # type: ignore[index]
            blocked = mask.size - int(np.count_nonzero(mask))
        return cls(
            tokens=spec.tokens,
            key_tokens=spec.key_tokens,
            heads=spec.heads,
            d_model=spec.d_model,
            d_k=spec.d_k,
            scale=scale,
            engine=engine,
            device=device,
            dtype=dtype,
            query_positions=spec.query_positions or (),
            kv_heads=int(spec.kv_heads or spec.heads),
            layout=spec.layout,
            scale_mode=spec.scale if isinstance(spec.scale, str) else "number",
            mask=mask,
            fully_masked_rows=fully_masked,
            blocked_pairs=blocked if spec.masked else None,
            dropped_heads=spec.dropped_heads,
            parameters=spec.parameters,
            **{name: None for name in ARRAYS} | arrays,
        )

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without GQA)."""
        return self.heads // self.kv_heads

    def kv_head(self, head: int) -> int:
        """The K/V head that query head ``head`` reads (both 0-based)."""
        return head // self.group_size

    def head_columns(self, head: int) -> range:
        """Columns of d_model that head ``head`` (0-based) owns in Q and in the concatenated output."""
        if self.layout == "interleaved":
            return range(head, self.heads * self.d_k, self.heads)
        return range(head * self.d_k, (head + 1) * self.d_k)

    def require(self, *names: str) -> None:
        """Raise ValueError when an array a caller relies on was not computed."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise ValueError(f"this result was computed without {', '.join(missing)}")
