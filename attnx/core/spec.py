"""AttentionSpec: the validated, immutable description of one multi-head attention problem.

A spec is its inputs, in one of two forms (``DirectInputs``: Q, K and V as given;
``ProjectedInputs``: X and the projections that make them), the attention settings
(``AttentionSettings``: heads, K/V heads, scale, layout, causal, dropped heads), the token labels
and masks, and an optional output projection. Each part checks itself when it is made; the spec
checks that the parts agree. Engines compute in three steps: project the inputs to Q, K and V,
split them into heads (and turn each head's Q and K by position, with rotary settings), then
attend (scores, softmax, values).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnx.core.heads import columns_of, divisors, largest_abs, pool_heads
from attnx.core.inputs import DirectInputs, HeadNorm, Inputs, Linear, ProjectedInputs, frozen, shape_text
from attnx.core.masks import Masking
from attnx.core.positions import Rotary
from attnx.core.settings import LAYOUTS, SCALE_MODES, AttentionSettings
from attnx.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.limits import Limits

__all__ = [
    "LAYOUTS",
    "SCALE_MODES",
    "AttentionSettings",
    "AttentionSpec",
    "DirectInputs",
    "HeadNorm",
    "Inputs",
    "Linear",
    "ProjectedInputs",
    "columns_of",
    "divisors",
    "frozen",
    "largest_abs",
    "pool_heads",
]


def read_only(array: np.ndarray) -> np.ndarray:
    """``array`` itself when it is a read-only float32 or float64 array already (specs alike share it: one bias of a
    model's stack serves its layers and copies), else a read-only copy (``frozen``)."""
    if isinstance(array, np.ndarray) and not array.flags.writeable and array.dtype in (np.float32, np.float64):
        return array
    return frozen(array)


@dataclass(frozen=True)
class Origin:
    """Where in a model a problem was taken: the checkpoint, its ``stack`` (``encoder``, ``decoder``), the ``layer``
    (from 0) and the ``attention``'s kind (``self``, ``causal self``, ``cross``), and the query positions the model
    wrote itself (``written``: ``--generate``); JSON says it as ``origin``."""

    model: str
    stack: str
    layer: int
    attention: str
    written: tuple[int, ...] = ()

    def to_json(self) -> dict[str, str | int | list[int]]:
        """``{"model": ..., "stack": ..., "layer": ..., "attention": ..., "written": [...]}``."""
        return {"model": self.model, "stack": self.stack, "layer": self.layer, "attention": self.attention,
                "written": list(self.written)}  # fmt: skip


@dataclass(frozen=True, eq=False)
class AttentionSpec:
    """One multi-head attention problem: inputs, settings, labels and masks, checked to agree.

    Head ``h`` reads the columns ``head_columns(h)`` of Q and K/V head ``h // group_size``.
    ``mask`` (``[query, key]``, True = may attend), ``padding`` (``[key]``, True = padding) and the
    causal and window settings combine into ``masking``, which says what the mask is and what it hides, and
    ``allowed()``. ``query_positions[i]`` is the original position of query row ``i`` (see
    ``select_queries``). ``w_o`` projects the concatenated heads. ``kv_pooled_from`` is the number of K/V heads
    the input had before ``with_kv_heads`` mean-pooled them (None: not pooled). ``source`` names where the
    problem came from, for messages. ``special_keys`` are the keys a model's tokenizer added around the text (``[CLS]``,
    ``<s>``): with key 0, where heads park attention (sinks). ``limits`` are the caps of the run that read
    the problem (a file's, a model's): ``attnx.engines.compute`` checks what it builds against them (None:
    ``Limits.from_env()``). ``score_bias`` (``[head, query, key]``, one per query head: H × N × M, finite) is added to
    the scaled scores before the soft cap, the mask and the softmax: ``s = scale · q·k + score_bias`` (T5's relative
    position bias, ALiBi); None: no bias. ``origin`` says where in a model the problem was taken (None: not from a
    model). Make one with ``build`` (flat keywords) or from its parts with ``of``.
    """

    inputs: Inputs
    settings: AttentionSettings
    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    query_positions: tuple[int, ...]
    source: str = "<input>"
    mask: np.ndarray | None = None
    padding: np.ndarray | None = None
    w_o: Linear | None = None
    kv_pooled_from: int | None = None
    special_keys: tuple[int, ...] = ()
    limits: Limits | None = None
    score_bias: np.ndarray | None = None
    origin: Origin | None = None

    @property
    def sinks(self) -> tuple[int, ...]:
        """The keys counted as attention sinks: key 0 and the special keys."""
        return tuple(sorted({0, *self.special_keys}))

    def __post_init__(self) -> None:
        where, settings = self.source, self.settings
        n, m, d_model, kv_width = self.inputs.shapes
        if d_model % settings.heads:
            raise ConfigError(
                f"{where}: d_model {d_model} is not divisible by heads {settings.heads}; "
                f"head counts that work: {', '.join(map(str, divisors(d_model)))}"
            )
        d_k = d_model // settings.heads
        if settings.rotary is not None and settings.rotary.width(d_k) < 2:
            raise ConfigError(
                f"{where}: rope turns pairs of columns: {settings.rotary.fraction} of d_k = {d_k} leaves none"
            )
        if isinstance(self.inputs, ProjectedInputs):
            for name, norm in (("q_norm", self.inputs.q_norm), ("k_norm", self.inputs.k_norm)):
                if norm is not None and norm.per_head and norm.weight.shape != (d_k,):
                    raise ConfigError(f"{where}: {name} must have d_k = {d_k} values, got {norm.weight.size}")
        if kv_width != settings.kv_heads * d_k:
            raise ConfigError(
                f"{where}: keys and values must have kv_heads × d_k = {settings.kv_heads} × {d_k} = "
                f"{settings.kv_heads * d_k} columns, got {kv_width}"
            )
        for what, count, expected in (
            ("query tokens", len(self.tokens), n),
            ("key tokens", len(self.key_tokens), m),
            ("query positions", len(self.query_positions), n),
        ):
            if count != expected:
                rows = "queries" if expected == n else "keys"
                raise ConfigError(f"{where}: {count} {what} given but there are {expected} {rows}")
        if self.mask is not None and self.mask.shape != (n, m):
            raise ConfigError(f"{where}: mask must be {n} × {m} (queries × keys), got {shape_text(self.mask)}")
        bias = self.score_bias
        if bias is not None and bias.shape != (settings.heads, n, m):
            raise ConfigError(
                f"{where}: score_bias must be {settings.heads} × {n} × {m} (heads × queries × keys), "
                f"got {shape_text(bias)}"
            )
        if bias is not None and not np.isfinite(bias).all():
            raise ConfigError(f"{where}: score_bias must hold finite numbers (mask keys with mask, not -inf)")
        if self.padding is not None and self.padding.shape != (m,):
            raise ConfigError(f"{where}: padding must have one flag per key ({m}), got {self.padding.size}")
        if self.w_o is not None and self.w_o.d_in != d_model:
            raise ConfigError(f"{where}: w_o must have {d_model} rows (the concatenated heads), got {self.w_o.d_in}")
        pooled, kv = self.kv_pooled_from, settings.kv_heads
        if pooled is not None and (
            isinstance(pooled, bool) or not isinstance(pooled, int) or pooled <= kv or pooled % kv
        ):
            raise ConfigError(
                f"{where}: kv_pooled_from must be a multiple of kv_heads {kv} larger than it, got {pooled!r}"
            )

    @classmethod
    def of(
        cls,
        inputs: Inputs,
        settings: AttentionSettings,
        tokens: Sequence[str],
        key_tokens: Sequence[str],
        *,
        query_positions: Sequence[int] | None = None,
        mask: np.ndarray | None = None,
        padding: np.ndarray | None = None,
        score_bias: np.ndarray | None = None,
        **rest: Any,
    ) -> AttentionSpec:
        """A spec from its parts: labels as tuples, positions 0..N-1 by default, masks as read-only booleans, the
        score bias as a read-only float array."""
        n = inputs.shapes[0]
        return cls(
            inputs,
            settings,
            tuple(tokens),
            tuple(key_tokens),
            tuple(range(n)) if query_positions is None else tuple(query_positions),
            mask=None if mask is None else frozen(mask, bool),
            padding=None if padding is None else frozen(padding, bool),
            score_bias=None if score_bias is None else read_only(score_bias),
            **rest,
        )

    @classmethod
    def build(
        cls,
        *,
        heads: int,
        tokens: Sequence[str],
        key_tokens: Sequence[str],
        source: str = "<input>",
        q: np.ndarray | None = None,
        k: np.ndarray | None = None,
        v: np.ndarray | None = None,
        x: np.ndarray | None = None,
        x_kv: np.ndarray | None = None,
        w_q: Linear | None = None,
        w_k: Linear | None = None,
        w_v: Linear | None = None,
        q_norm: HeadNorm | None = None,
        k_norm: HeadNorm | None = None,
        kv_heads: int | None = None,
        scale: str | float = "sqrt_dk",
        layout: str = "contiguous",
        causal: bool = False,
        dropped_heads: Sequence[int] = (),
        rotary: Rotary | None = None,
        window: int | None = None,
        softcap: float | None = None,
        sink_logits: tuple[float, ...] | None = None,
        **rest: Any,
    ) -> AttentionSpec:
        """A spec from flat keywords, as inputs are written: direct ``q``, ``k``, ``v``, or ``x`` with
        ``w_q``, ``w_k``, ``w_v`` (and ``x_kv``, ``q_norm``, ``k_norm``); the settings; then ``of``'s keywords
        (``mask``, ``padding``, ``score_bias``, ...)."""
        inputs: Inputs
        if x is not None:
            if any(a is not None for a in (q, k, v)):
                raise ConfigError(f"{source}: give either x with w_q, w_k, w_v or direct q, k, v, not both")
            missing = [name for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)) if w is None]
            if missing or w_q is None or w_k is None or w_v is None:
                raise ConfigError(f"{source}: x needs w_q, w_k and w_v; missing {', '.join(missing)}")
            inputs = ProjectedInputs.of(x, w_q, w_k, w_v, x_kv, where=source, q_norm=q_norm, k_norm=k_norm)
        else:
            missing = [name for name, a in (("q", q), ("k", k), ("v", v)) if a is None]
            if missing or q is None or k is None or v is None:
                raise ConfigError(f"{source}: missing {', '.join(missing)}")
            if any(w is not None for w in (w_q, w_k, w_v, q_norm, k_norm)) or x_kv is not None:
                raise ConfigError(
                    f"{source}: w_q, w_k, w_v, x_kv and head norms need x; with direct q, k, v leave them out"
                )
            inputs = DirectInputs.of(q, k, v, where=source)
        settings = AttentionSettings.of(
            heads,
            kv_heads,
            scale=scale,
            layout=layout,
            causal=causal,
            dropped_heads=dropped_heads,
            rotary=rotary,
            window=window,
            softcap=softcap,
            sink_logits=sink_logits,
            where=source,
        )
        return cls.of(inputs, settings, tokens, key_tokens, source=source, **rest)

    def number_arrays(self) -> dict[str, np.ndarray]:
        """The input's arrays of numbers, by the names messages use: q, k, v, x, x_kv, w_*, b_* and score_bias."""
        out = self.inputs.arrays()
        if self.score_bias is not None:
            out["score_bias"] = self.score_bias
        if self.w_o is not None:
            out["w_o"] = self.w_o.weight
            if self.w_o.bias is not None:
                out["b_o"] = self.w_o.bias
        return out

    @functools.cached_property
    def magnitude(self) -> float:
        """The largest absolute value in ``number_arrays()`` (NaN if any value is NaN), found once."""
        projections = [w for w in (*self.inputs.projections(), self.w_o) if w is not None]
        held = {id(array) for w in projections for array in (w.weight, w.bias) if array is not None}
        values = [largest_abs(array) for array in self.number_arrays().values() if id(array) not in held]
        values += [w.magnitude for w in projections]  # each found once per projection
        return math.nan if any(map(math.isnan, values)) else max(values)

    @functools.cached_property
    def positions(self) -> np.ndarray:
        """``query_positions`` as a read-only array (N,), made once: masks are made from it block by block."""
        positions = np.asarray(self.query_positions)
        positions.flags.writeable = False
        return positions

    @property
    def d_model(self) -> int:
        """Width of Q (all heads together)."""
        return self.inputs.shapes[2]

    @property
    def kv_width(self) -> int:
        """Width of K and V (all K/V heads together)."""
        return self.inputs.shapes[3]

    @property
    def d_k(self) -> int:
        """Width of one head's slice of Q, K and V."""
        return self.d_model // self.settings.heads

    @property
    def n_queries(self) -> int:
        """Number of query rows (N)."""
        return self.inputs.shapes[0]

    @property
    def n_keys(self) -> int:
        """Number of key and value rows (M)."""
        return self.inputs.shapes[1]

    @property
    def multiplier(self) -> float:
        """The number the raw scores are multiplied by."""
        scale = self.settings.scale
        if isinstance(scale, str):
            return {"sqrt_dk": 1.0 / math.sqrt(self.d_k), "sqrt_d_model": 1.0 / math.sqrt(self.d_model), "none": 1.0}[
                scale
            ]
        return float(scale)

    @property
    def parameters(self) -> int:
        """Learned projection weights and biases of the layer described (0 for direct Q, K, V)."""
        inputs = self.inputs
        linears = [inputs.w_q, inputs.w_k, inputs.w_v] if isinstance(inputs, ProjectedInputs) else []
        return sum(w.parameters for w in [*linears, self.w_o] if w is not None)

    def head_columns(self, head: int) -> range:
        """Columns of Q that head ``head`` (0-based) reads."""
        return columns_of(head, self.settings.heads, self.d_k, self.settings.layout)

    @functools.cached_property
    def masking(self) -> Masking:
        """What the mask is and what it hides (causal, a window, the input's mask and padding), made once."""
        return Masking.of(self.settings, self.mask, self.padding)

    @property
    def dense_only(self) -> bool:
        """True when the softmax is more than one over ``scale · q·k``: a setting says so (``dense_only``: a soft
        cap, learned sinks) or a score bias is added. Fused kernels and the NumPy tiles then stand aside."""
        return self.settings.dense_only or self.score_bias is not None

    def causal_only(self) -> bool:
        """True when the only mask is causal, on queries in their original order: a fused causal kernel's (the
        positions, a tuple to build, are compared only when the rest holds)."""
        return self.masking.causal_only and self.query_positions == tuple(range(self.n_queries))

    def allowed(self, rows: slice = slice(None)) -> np.ndarray | None:
        """``[query, key]`` booleans for query ``rows``, True where a query may attend a key; None when all may.

        Engines that work in query blocks ask for one block of rows at a time, so a causal mask is
        never built whole for long inputs.
        """
        return self.masking.allowed(self.positions, self.n_keys, rows)

    def mask_census(self, block: int = 4096) -> tuple[tuple[int, ...], int]:
        """The original positions of queries whose keys are all blocked, and how many query-key pairs are
        blocked, found block by block (the mask is never built whole)."""
        found: list[int] = []
        blocked = 0
        for start in range(0, self.n_queries, block):
            allowed = self.allowed(slice(start, start + block))
            if allowed is None:
                return (), 0
            found.extend(self.query_positions[start + i] for i in np.flatnonzero(~allowed.any(axis=1)))
            blocked += allowed.size - int(np.count_nonzero(allowed))
        return tuple(found), blocked

    def key_limit(self, rows: slice = slice(None)) -> int:
        """Keys past this index are blocked for every query in ``rows`` (causal masks end early)."""
        return self.masking.key_limit(self.positions, self.n_keys, rows)

    def with_heads(self, heads: int) -> AttentionSpec:
        """The same problem split into a different number of heads (validated again).

        Without grouped K/V heads the K/V heads follow (every head keeps its own); with them,
        ``kv_heads`` stays as it was.
        """
        settings = self.settings
        kv_heads = heads if settings.kv_heads == settings.heads else settings.kv_heads
        return self.with_settings(heads=heads, kv_heads=kv_heads)

    def with_settings(self, **changes: Any) -> AttentionSpec:
        """The same inputs with some settings changed (``heads``, ``scale``, ``causal``, ...), validated again."""
        values = {field.name: getattr(self.settings, field.name) for field in fields(self.settings)} | changes
        return replace(self, settings=AttentionSettings.of(where=self.source, **values))

    def with_kv_heads(self, kv_heads: int) -> AttentionSpec:
        """The same problem with ``kv_heads`` K/V heads, made by mean-pooling the K/V heads it has.

        As grouped-query attention is made from a multi-head checkpoint (Ainslie et al., 2023): with
        ``r = current / kv_heads``, new K/V head ``g`` is the mean of heads ``g·r … g·r + r − 1``
        (the heads whose query heads it now serves), for K and for V, each head's columns found by the
        layout. A projected input pools the head columns of ``w_k``, ``w_v`` and their biases instead:
        projection is linear, so the mean of the weights gives the mean of the projections.
        ``kv_pooled_from`` keeps the count before the first pooling. The same count returns ``self``;
        more heads than the input has, or a count that does not divide it, is a ConfigError.
        """
        current, layout = self.settings.kv_heads, self.settings.layout
        if kv_heads == current:
            return self
        if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1 or current % kv_heads:
            if isinstance(kv_heads, int) and kv_heads > current:
                why = f"the input has {current} K/V heads, fewer than {kv_heads} (pooling only merges heads)"
            else:
                why = f"the input's {current} K/V heads do not pool evenly into {kv_heads!r}"
            raise ConfigError(f"{self.source}: {why}; kv_heads that work: {', '.join(map(str, divisors(current)))}")

        def pool(array: np.ndarray) -> np.ndarray:
            return frozen(pool_heads(array, current, kv_heads, layout))

        inputs: Inputs
        if isinstance(self.inputs, ProjectedInputs):
            w_k, w_v = self.inputs.w_k, self.inputs.w_v
            inputs = replace(
                self.inputs,
                w_k=Linear(pool(w_k.weight), None if w_k.bias is None else pool(w_k.bias)),
                w_v=Linear(pool(w_v.weight), None if w_v.bias is None else pool(w_v.bias)),
            )
        else:
            inputs = replace(self.inputs, k=pool(self.inputs.k), v=pool(self.inputs.v))
        settings = replace(self.settings, kv_heads=kv_heads)
        return replace(self, inputs=inputs, settings=settings, kv_pooled_from=self.kv_pooled_from or current)

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
            inputs=self.inputs.rows(index),
            tokens=tuple(self.tokens[i] for i in index),
            query_positions=tuple(self.query_positions[i] for i in index),
            mask=None if self.mask is None else self.mask[index],
            score_bias=None if self.score_bias is None else frozen(self.score_bias[:, index]),  # (H, n, M)
        )
