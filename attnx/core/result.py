"""AttentionResult: what an engine computed, frozen, as NumPy arrays with documented axes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from attnx.core.masks import Masking
from attnx.core.settings import AttentionSettings
from attnx.core.spec import columns_of
from attnx.core.tensors import COMPUTED, MASK, TENSORS, TensorName
from attnx.errors import NotComputedError

# Array fields that are inputs a result carries (for the trace), not tensors: no serializer writes them.
INPUT_ARRAYS = ("score_bias",)

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec, Origin


@dataclass(frozen=True, eq=False)
class AttentionResult:
    """Every intermediate of one multi-head attention computation.

    Axis order (H heads, H_kv K/V heads, N queries, M keys):

    - ``q``                ``[head, query, d_k]``    each head's slice of Q (projected, if W_q exists), as used
    - ``k``                ``[kv_head, key, d_k]``   each K/V head's slice of K (projected, if W_k exists)
    - ``v``                ``[kv_head, key, d_k]``   each K/V head's slice of V (projected, if W_v exists)
    - ``scores``           ``[head, query, key]``    raw dot products Q_h K_h^T
    - ``scaled``           ``[head, query, key]``    ``scores * scale + score_bias`` (soft-capped, with a cap; before
                                                     any mask)
    - ``weights``          ``[head, query, key]``    softmax of ``scaled`` over the allowed keys
    - ``head_outputs``     ``[head, query, d_k]``    ``weights @ V_h``
    - ``output``           ``[query, d_model]``      head outputs concatenated (dropped heads zeroed)
    - ``average_weights``  ``[query, key]``          mean of ``weights`` over heads
    - ``projected``        ``[query, d_out]``        ``output @ W_o + b_o``, when W_o exists
    - ``mask``             ``[query, key]``          True where attending is allowed; None = all (or not asked for)
    - ``intact_output``/``intact_projected``         the same without ablation, when heads were dropped
    - ``sink_weights``     ``[head, query]``         the weight a learned sink takes (rows of ``weights`` sum to the
                                                     rest), when the settings have ``sink_logits``

    Arrays are read-only and keep the dtype the engine computed in. An array that was not asked
    for (``compute(..., needs=...)``) is None: ``output`` alone never builds an H×N×M matrix.
    ``query_positions[i]`` is the position in the original input of query row ``i`` (see
    ``AttentionSpec.select_queries``). ``blocked_pairs`` counts the query-key pairs a mask blocks
    (None without a mask), whether or not ``mask`` was asked for. ``kv_pooled_from`` is the number
    of K/V heads the input had before a ``--kv-heads`` override mean-pooled them (None: not pooled).
    ``matrix_rows`` names the query rows the H × N × M matrices and ``mask`` hold, when a command
    asked for some rows only (``compute(..., rows=...)``; None: every row); ``matrix_row`` finds one.
    ``settings`` are the attention settings it was computed with (its rotary positions, window and soft cap
    among them), ``masking`` the spec's: what its mask is and what it hides. ``heads``, ``kv_heads``, ``layout``,
    ``scale_mode`` and ``dropped_heads`` read the settings. ``score_bias`` is the spec's additive bias
    (``[head, query, key]``, the rows the matrices hold; None: none): an input, not a computed tensor, so no
    serializer writes it.
    """

    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    d_model: int
    d_k: int
    scale: float
    q: np.ndarray | None
    k: np.ndarray | None
    v: np.ndarray | None
    scores: np.ndarray | None
    scaled: np.ndarray | None
    weights: np.ndarray | None
    head_outputs: np.ndarray | None
    output: np.ndarray
    average_weights: np.ndarray | None
    engine: str
    device: str
    dtype: str
    settings: AttentionSettings
    masking: Masking
    query_positions: tuple[int, ...] = ()
    mask: np.ndarray | None = None
    projected: np.ndarray | None = None
    intact_output: np.ndarray | None = None
    intact_projected: np.ndarray | None = None
    sink_weights: np.ndarray | None = None
    parameters: int = 0
    fully_masked_rows: tuple[int, ...] = ()
    blocked_pairs: int | None = None
    kv_pooled_from: int | None = None
    matrix_rows: tuple[int, ...] | None = None
    score_bias: np.ndarray | None = None  # an input carried for the trace (INPUT_ARRAYS), not a tensor
    origin: Origin | None = None  # where in a model the problem was taken (None: not from a model)

    def __post_init__(self) -> None:
        for name in TENSORS:
            array = getattr(self, name)
            if array is not None:
                array.flags.writeable = False
        if not self.query_positions:
            object.__setattr__(self, "query_positions", tuple(range(len(self.tokens))))
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)

    @property
    def heads(self) -> int:
        """Number of heads (the settings')."""
        return self.settings.heads

    @property
    def kv_heads(self) -> int:
        """Number of K/V heads (the settings')."""
        return self.settings.kv_heads

    @property
    def layout(self) -> str:
        """How heads own the columns of Q, K and V (the settings')."""
        return self.settings.layout

    @property
    def scale_mode(self) -> str:
        """The scale's rule (``sqrt_dk``, ``sqrt_d_model``, ``none``), or ``number`` where the scale was given."""
        scale = self.settings.scale
        return scale if isinstance(scale, str) else "number"

    @property
    def dropped_heads(self) -> tuple[int, ...]:
        """The heads zeroed before concatenation (the settings')."""
        return self.settings.dropped_heads

    @classmethod
    def assemble(
        cls,
        spec: AttentionSpec,
        arrays: dict[TensorName, np.ndarray],
        *,
        scale: float,
        engine: str,
        device: str,
        dtype: str,
        needs: Collection[TensorName] | None = None,
        census: tuple[tuple[int, ...], int] | None = None,
    ) -> AttentionResult:
        """A result for ``spec`` from an engine's arrays (names from ``attnx.core.tensors.COMPUTED``).

        The ``[query, key]`` mask (an N × M array) is kept when ``needs`` is None or names ``mask``;
        the fully masked rows are then read from it, else found block by block (``census``: what
        ``spec.mask_census()`` gives, found already for problems with the same mask).
        """
        mask = spec.allowed() if needs is None or MASK in needs else None
        if mask is None:
            fully_masked, blocked = spec.mask_census() if census is None else census
        else:
            positions = spec.query_positions
            fully_masked = tuple(positions[i] for i in np.flatnonzero(~mask.any(axis=1)))
            blocked = mask.size - int(np.count_nonzero(mask))
        return cls(
            tokens=spec.tokens,
            key_tokens=spec.key_tokens,
            d_model=spec.d_model,
            d_k=spec.d_k,
            scale=scale,
            engine=engine,
            device=device,
            dtype=dtype,
            query_positions=spec.query_positions,
            mask=mask,
            fully_masked_rows=fully_masked,
            blocked_pairs=blocked if spec.masking.masked else None,
            parameters=spec.parameters,
            kv_pooled_from=spec.kv_pooled_from,
            settings=spec.settings,
            masking=spec.masking,
            score_bias=spec.score_bias,
            origin=spec.origin,
            # Every engine's arrays hold ``output``; the type of a dict of names cannot say so.
            **cast("dict[str, Any]", {name: None for name in COMPUTED} | arrays),
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
        return columns_of(head, self.heads, self.d_k, self.layout)

    def kv_columns(self, kv_head: int) -> range:
        """Columns of K and V (``kv_heads × d_k`` wide) that K/V head ``kv_head`` (0-based) owns."""
        return columns_of(kv_head, self.kv_heads, self.d_k, self.layout)

    def group_of(self, kv_head: int) -> range:
        """The query heads (0-based) that read K/V head ``kv_head``."""
        return range(kv_head * self.group_size, (kv_head + 1) * self.group_size)

    def matrix_row(self, row: int) -> int:
        """Where query row ``row`` is in the H × N × M matrices (and ``mask``), which may hold some rows only."""
        return row if self.matrix_rows is None else self.matrix_rows.index(row)

    def tensor(self, name: TensorName) -> np.ndarray:
        """The array ``name``; NotComputedError when this result does not hold it."""
        array: np.ndarray | None = getattr(self, name)
        if array is None:
            present, left_out = TENSORS[name].present, "compute(..., needs=...) left it out"
            why = left_out if present == "always" else f"a result holds it when {present}, unless {left_out}"
            raise NotComputedError(f"this result was computed without {name} ({why})")
        return array


# How close to its row's maximum a cell must be to count as tied with it, in units of the dtype's
# machine epsilon relative to that maximum (see ``row_maxima``).
TIE_ULPS = 4


def row_maxima(values: np.ndarray) -> np.ndarray:
    """True where a cell is its row's maximum (the last axis), ties included: the cells a table highlights.

    A tie is decided on the numbers the engine computed, not on the digits a table shows: a cell
    ties the maximum when it is within ``TIE_ULPS`` units in the last place of it (``TIE_ULPS ×
    eps(dtype) × |max|``), so that keys whose scores are equal in exact arithmetic, and came out
    one or two roundings apart, are all marked, while 0.25091 and 0.25089 (both shown as 0.2509)
    are not tied: more ``--precision`` tells them apart. Rows whose maximum is not positive (every
    key masked) or NaN have no maximum to mark. The uniform row of the worked example (head 0,
    "on": five weights of 0.2) marks all five.
    """
    values = np.asarray(values)
    if values.size == 0:
        return np.zeros(values.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        top = values.max(axis=-1, keepdims=True)
        room = TIE_ULPS * np.finfo(values.dtype if values.dtype.kind == "f" else np.float64).eps * np.abs(top)
        return (values >= top - room) & (top > 0)
