"""AttentionSpec: the validated, immutable description of one multi-head attention problem."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attnx.errors import ConfigError
from attnx.limits import Limits

SCALE_MODES = ("sqrt_dk", "sqrt_d_model", "none")
LAYOUTS = ("contiguous", "interleaved")


def divisors(n: int) -> list[int]:
    """Return the head counts that split ``n`` columns evenly, in increasing order."""
    return [h for h in range(1, n + 1) if n % h == 0]


def largest_abs(array: np.ndarray) -> float:
    """max |value| of ``array``, as max and min: two reductions, no temporary |array| as large as it."""
    return max(float(array.max()), -float(array.min()))


def _frozen(array: np.ndarray, dtype: type | None = None) -> np.ndarray:
    """A read-only copy of ``array`` as ``dtype``; by default float32 stays float32 (widening it
    would only cost a conversion back for float32 engines) and other numbers become float64."""
    if dtype is None:
        dtype = np.float32 if np.asarray(array).dtype == np.float32 else np.float64
    array = np.array(array, dtype=dtype, copy=True)
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class Linear:
    """One learned projection ``x @ weight + bias`` (``weight`` is ``[in, out]``, as the paper's W)."""

    weight: np.ndarray
    bias: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", _frozen(self.weight))
        if self.bias is not None:
            object.__setattr__(self, "bias", _frozen(self.bias))

    @property
    def d_in(self) -> int:
        """Width of what the projection reads."""
        return int(self.weight.shape[0])

    @property
    def d_out(self) -> int:
        """Width of what the projection writes."""
        return int(self.weight.shape[1])

    @property
    def parameters(self) -> int:
        """Number of weights and biases."""
        return int(self.weight.size + (0 if self.bias is None else self.bias.size))


@dataclass(frozen=True, eq=False)
class AttentionSpec:
    """Everything one multi-head attention computation needs, checked to be mutually consistent.

    Inputs come in one of two forms:

    - direct: ``q`` is ``[query, d_model]``; ``k`` and ``v`` are ``[key, kv_heads * d_k]``;
    - projected: ``x`` is ``[query, d_in]`` and ``x_kv`` (default ``x``) is ``[key, d_in]``;
      then Q = x W_q + b_q, K = x_kv W_k + b_k, V = x_kv W_v + b_v.

    Head ``h`` of ``heads`` reads the columns ``head_columns(h)`` of Q (contiguous blocks, or every
    H-th column with the ``interleaved`` layout) and K/V head ``h // (heads / kv_heads)``. ``w_o``
    projects the concatenated heads. ``mask`` (``[query, key]``, True = may attend), ``padding``
    (``[key]``, True = padding) and ``causal`` combine into ``allowed()``. ``dropped_heads`` (0-based)
    are zeroed before concatenation. ``query_positions[i]`` is the original position of query row
    ``i`` (see ``select_queries``). ``kv_pooled_from`` is the number of K/V heads the input had
    before ``with_kv_heads`` mean-pooled them (None: not pooled). Arrays are read-only copies:
    float64, or float32 when given float32 (bool for masks). ``source`` names where the problem
    came from, for messages.
    ``limits`` are the caps the input was read under; ``compute`` checks the arrays it is about to
    build against them (no caps when None, as for a spec built in code).
    """

    q: np.ndarray | None
    k: np.ndarray | None
    v: np.ndarray | None
    heads: int
    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    source: str = "<input>"
    query_positions: tuple[int, ...] | None = None
    x: np.ndarray | None = None
    x_kv: np.ndarray | None = None
    w_q: Linear | None = None
    w_k: Linear | None = None
    w_v: Linear | None = None
    w_o: Linear | None = None
    kv_heads: int | None = None
    scale: str | float = "sqrt_dk"
    layout: str = "contiguous"
    causal: bool = False
    mask: np.ndarray | None = None
    padding: np.ndarray | None = None
    dropped_heads: tuple[int, ...] = field(default=())
    limits: Limits | None = field(default=None, repr=False)
    kv_pooled_from: int | None = None

    def __post_init__(self) -> None:
        where = self.source
        projected = self.x is not None
        for name in ("q", "k", "v", "x", "x_kv"):
            array = getattr(self, name)
            if array is None:
                continue
            if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
                raise ConfigError(f"{where}: {name} must be a non-empty matrix, got shape {array.shape}")
            object.__setattr__(self, name, _frozen(array))
        if projected:
            self._check_projected(where)
        else:
            self._check_direct(where)
        self._check_heads(where)
        n, m = self.n_queries, self.n_keys
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "key_tokens", tuple(self.key_tokens))
        if len(self.tokens) != n:
            raise ConfigError(f"{where}: {len(self.tokens)} query tokens given but there are {n} queries")
        if len(self.key_tokens) != m:
            raise ConfigError(f"{where}: {len(self.key_tokens)} key tokens given but there are {m} keys")
        positions = tuple(range(n)) if self.query_positions is None else tuple(self.query_positions)
        if len(positions) != n:
            raise ConfigError(f"{where}: {len(positions)} query positions given but there are {n} queries")
        object.__setattr__(self, "query_positions", positions)
        self._check_masks(where, n, m)
        self._check_scale_layout(where)
        if self.w_o is not None and self.w_o.d_in != self.d_model:
            raise ConfigError(
                f"{where}: w_o must have {self.d_model} rows (the concatenated heads), got {self.w_o.d_in}"
            )
        dropped = tuple(sorted(set(self.dropped_heads)))
        bad = [h for h in dropped if not 0 <= h < self.heads]
        if bad:
            raise ConfigError(f"{where}: cannot drop head {bad[0]}: heads are numbered 0..{self.heads - 1}")
        object.__setattr__(self, "dropped_heads", dropped)
        pooled, kv_heads = self.kv_pooled_from, self.kv_heads
        assert kv_heads is not None  # set by _check_heads
        if pooled is not None and (
            isinstance(pooled, bool) or not isinstance(pooled, int) or pooled <= kv_heads or pooled % kv_heads
        ):
            raise ConfigError(
                f"{where}: kv_pooled_from must be a multiple of kv_heads {self.kv_heads} larger than it, got {pooled!r}"
            )

    def _check_direct(self, where: str) -> None:
        missing = [name for name in ("q", "k", "v") if getattr(self, name) is None]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        if any(w is not None for w in (self.w_q, self.w_k, self.w_v)) or self.x_kv is not None:
            raise ConfigError(f"{where}: w_q, w_k, w_v and x_kv need x; with direct q, k, v leave them out")
        assert self.q is not None and self.k is not None and self.v is not None  # for type checkers
        if self.k.shape != self.v.shape:
            raise ConfigError(f"{where}: k and v must have the same shape, got k {_shape(self.k)}, v {_shape(self.v)}")

    def _check_projected(self, where: str) -> None:
        if any(getattr(self, name) is not None for name in ("q", "k", "v")):
            raise ConfigError(f"{where}: give either x with w_q, w_k, w_v or direct q, k, v, not both")
        missing = [name for name in ("w_q", "w_k", "w_v") if getattr(self, name) is None]
        if missing:
            raise ConfigError(f"{where}: x needs w_q, w_k and w_v; missing {', '.join(missing)}")
        assert self.x is not None and self.w_q and self.w_k and self.w_v  # for type checkers
        for name, source, w in (("w_q", self.x, self.w_q), ("w_k", self.kv_source, self.w_k),
                                ("w_v", self.kv_source, self.w_v)):  # fmt: skip
            if w.d_in != source.shape[1]:
                reads = "x" if name == "w_q" or self.x_kv is None else "x_kv"
                raise ConfigError(
                    f"{where}: {name} must have {source.shape[1]} rows ({reads} has {source.shape[1]} columns), "
                    f"got {w.d_in}"
                )
            if w.bias is not None and w.bias.shape != (w.d_out,):
                raise ConfigError(f"{where}: b_{name[2]} must have {w.d_out} values, got {w.bias.size}")
        if self.w_k.d_out != self.w_v.d_out:
            raise ConfigError(f"{where}: w_k and w_v must have the same number of columns")

    def _check_heads(self, where: str) -> None:
        for name in ("heads", "kv_heads"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: {name} must be a positive whole number, got {value!r}")
        d_model = self.d_model
        if d_model % self.heads:
            raise ConfigError(
                f"{where}: d_model {d_model} is not divisible by heads {self.heads}; "
                f"head counts that work: {', '.join(map(str, divisors(d_model)))}"
            )
        kv = self.kv_heads if self.kv_heads is not None else self.heads
        object.__setattr__(self, "kv_heads", kv)
        if self.heads % kv:
            raise ConfigError(
                f"{where}: heads {self.heads} is not divisible by kv_heads {kv}; "
                f"kv_heads that work: {', '.join(map(str, divisors(self.heads)))}"
            )
        if self.kv_width != kv * self.d_k:
            raise ConfigError(
                f"{where}: keys and values must have kv_heads × d_k = {kv} × {self.d_k} = {kv * self.d_k} "
                f"columns, got {self.kv_width}"
            )

    def _check_masks(self, where: str, n: int, m: int) -> None:
        if self.mask is not None:
            mask = np.asarray(self.mask)
            if mask.shape != (n, m):
                raise ConfigError(f"{where}: mask must be {n} × {m} (queries × keys), got {_shape(mask)}")
            object.__setattr__(self, "mask", _frozen(mask, bool))
        if self.padding is not None:
            padding = np.asarray(self.padding)
            if padding.shape != (m,):
                raise ConfigError(f"{where}: padding must have one flag per key ({m}), got {padding.size}")
            object.__setattr__(self, "padding", _frozen(padding, bool))

    def _check_scale_layout(self, where: str) -> None:
        if isinstance(self.scale, str):
            if self.scale not in SCALE_MODES:
                raise ConfigError(f"{where}: scale must be a number or one of {', '.join(SCALE_MODES)}")
        elif isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
            raise ConfigError(f"{where}: scale must be a finite number or one of {', '.join(SCALE_MODES)}")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"{where}: layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")

    def number_arrays(self) -> dict[str, np.ndarray]:
        """The input's arrays of numbers, by the names messages use: q, k, v, x, x_kv, w_* and b_*."""
        linears = {name: getattr(self, name) for name in ("w_q", "w_k", "w_v", "w_o")}
        arrays = {name: getattr(self, name) for name in ("q", "k", "v", "x", "x_kv")}
        arrays.update({name: w.weight for name, w in linears.items() if w is not None})
        arrays.update({f"b_{name[2]}": w.bias for name, w in linears.items() if w is not None})
        return {name: array for name, array in arrays.items() if array is not None}

    @functools.cached_property
    def magnitude(self) -> float:
        """The largest absolute value in ``number_arrays()`` (NaN if any value is NaN): found once, since the
        arrays cannot change."""
        values = [largest_abs(array) for array in self.number_arrays().values()]
        return math.nan if any(map(math.isnan, values)) else max(values)

    @functools.cached_property
    def positions(self) -> np.ndarray:
        """``query_positions`` as a read-only array (N,), made once: masks are made from it block by block."""
        positions = np.asarray(self.query_positions)
        positions.flags.writeable = False
        return positions

    @property
    def kv_source(self) -> np.ndarray:
        """What keys and values are projected from: ``x_kv``, else ``x``."""
        source = self.x_kv if self.x_kv is not None else self.x
        assert source is not None
        return source

    @property
    def d_model(self) -> int:
        """Width of Q (all heads together)."""
        if self.w_q is not None:
            return self.w_q.d_out
        assert self.q is not None  # a direct spec: q was checked first
        return int(self.q.shape[1])

    @property
    def kv_width(self) -> int:
        """Width of K and V (all K/V heads together)."""
        if self.w_k is not None:
            return self.w_k.d_out
        assert self.k is not None  # a direct spec: k was checked first
        return int(self.k.shape[1])

    @property
    def d_k(self) -> int:
        """Width of one head's slice of Q, K and V."""
        return self.d_model // self.heads

    @property
    def n_queries(self) -> int:
        """Number of query rows (N)."""
        rows = self.x if self.x is not None else self.q
        assert rows is not None  # x, or a direct spec's q
        return int(rows.shape[0])

    @property
    def n_keys(self) -> int:
        """Number of key and value rows (M)."""
        rows = self.kv_source if self.x is not None else self.k
        assert rows is not None  # x_kv or x, or a direct spec's k
        return int(rows.shape[0])

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without GQA)."""
        return self.heads // int(self.kv_heads or self.heads)

    @property
    def multiplier(self) -> float:
        """The number the raw scores are multiplied by."""
        if self.scale == "sqrt_dk":
            return 1.0 / math.sqrt(self.d_k)
        if self.scale == "sqrt_d_model":
            return 1.0 / math.sqrt(self.d_model)
        if self.scale == "none":
            return 1.0
        return float(self.scale)

    @property
    def parameters(self) -> int:
        """Learned projection weights and biases of the layer described (0 for direct Q, K, V)."""
        return sum(w.parameters for w in (self.w_q, self.w_k, self.w_v, self.w_o) if w is not None)

    def head_columns(self, head: int) -> range:
        """Columns of Q that head ``head`` (0-based) reads."""
        return columns_of(head, self.heads, self.d_k, self.layout)

    def kv_head(self, head: int) -> int:
        """The K/V head that query head ``head`` reads (both 0-based)."""
        return head // self.group_size

    @property
    def masked(self) -> bool:
        """True when some query-key pair may be blocked (causal, mask or padding)."""
        return self.causal or self.mask is not None or self.padding is not None

    def allowed(self, rows: slice = slice(None)) -> np.ndarray | None:
        """``[query, key]`` booleans for query ``rows``, True where a query may attend a key; None when all may.

        Engines that work in query blocks ask for one block of rows at a time, so a causal mask is
        never built whole for long inputs.
        """
        if not self.masked:
            return None
        positions = self.positions[rows]
        allowed = np.ones((len(positions), self.n_keys), dtype=bool)
        if self.causal:  # aligned to the top-left corner, as PyTorch's is_causal
            allowed &= np.arange(self.n_keys)[None, :] <= positions[:, None]
        if self.mask is not None:
            allowed &= self.mask[rows]
        if self.padding is not None:
            allowed &= ~self.padding[None, :]
        return allowed

    def mask_census(self, block: int = 4096) -> tuple[tuple[int, ...], int]:
        """The original positions of queries whose keys are all blocked, and how many query-key pairs are
        blocked, found block by block (the mask is never built whole)."""
        if not self.masked:
            return (), 0
        found: list[int] = []
        blocked = 0
        positions = self.query_positions
        assert positions is not None  # a tuple once __post_init__ has run
        for start in range(0, self.n_queries, block):
            allowed = self.allowed(slice(start, start + block))
            assert allowed is not None  # masked, so allowed() builds the block
            found.extend(positions[start + i] for i in np.flatnonzero(~allowed.any(axis=1)))
            blocked += allowed.size - int(np.count_nonzero(allowed))
        return tuple(found), blocked

    def key_limit(self, rows: slice = slice(None)) -> int:
        """Keys past this index are blocked for every query in ``rows`` (causal masks end early)."""
        if not self.causal:
            return self.n_keys
        return min(self.n_keys, int(self.positions[rows].max()) + 1)

    def with_heads(self, heads: int) -> AttentionSpec:
        """The same problem split into a different number of heads (validated again).

        Without grouped K/V heads the K/V heads follow (every head keeps its own); with them,
        ``kv_heads`` stays as it was.
        """
        return replace(self, heads=heads, kv_heads=None if self.kv_heads == self.heads else self.kv_heads)

    def with_kv_heads(self, kv_heads: int) -> AttentionSpec:
        """The same problem with ``kv_heads`` K/V heads, made by mean-pooling the K/V heads it has.

        As grouped-query attention is made from a multi-head checkpoint (Ainslie et al., 2023): with
        ``r = self.kv_heads / kv_heads``, new K/V head ``g`` is the mean of heads ``g·r … g·r + r − 1``
        (the heads whose query heads it now serves), for K and for V, each head's columns found by the
        layout. A projected input pools the head columns of ``w_k``, ``w_v`` and their biases instead:
        projection is linear, so the mean of the weights gives the mean of the projections.
        ``kv_pooled_from`` keeps the count before the first pooling. The same count returns ``self``;
        more heads than the input has, or a count that does not divide it, is a ConfigError.
        """
        current = int(self.kv_heads or self.heads)
        if kv_heads == current:
            return self
        if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1 or current % kv_heads:
            if isinstance(kv_heads, int) and kv_heads > current:
                why = f"the input has {current} K/V heads, fewer than {kv_heads} (pooling only merges heads)"
            else:
                why = f"the input's {current} K/V heads do not pool evenly into {kv_heads!r}"
            raise ConfigError(f"{self.source}: {why}; kv_heads that work: {', '.join(map(str, divisors(current)))}")
        pooled: dict[str, Any] = {"kv_heads": kv_heads, "kv_pooled_from": self.kv_pooled_from or current}
        if self.x is not None:
            for name in ("w_k", "w_v"):
                w: Linear = getattr(self, name)
                bias = None if w.bias is None else pool_heads(w.bias, current, kv_heads, self.layout)
                pooled[name] = Linear(pool_heads(w.weight, current, kv_heads, self.layout), bias)
        else:
            assert self.k is not None and self.v is not None  # a direct spec
            pooled["k"] = pool_heads(self.k, current, kv_heads, self.layout)
            pooled["v"] = pool_heads(self.v, current, kv_heads, self.layout)
        return replace(self, **pooled)

    def select_queries(self, rows: Sequence[int]) -> AttentionSpec:
        """The same problem restricted to some query rows (0-based), all keys kept.

        An engine then computes only those rows: tracing one token of a long input costs one row
        of each head's weights, not the whole matrix.
        """
        index = list(rows)
        bad = [i for i in index if not 0 <= i < self.n_queries]
        if bad:
            raise ConfigError(f"{self.source}: query {bad[0]} is out of range 0..{self.n_queries - 1}")
        positions = self.query_positions
        assert positions is not None  # a tuple once __post_init__ has run
        narrowed: dict[str, Any] = {
            "tokens": tuple(self.tokens[i] for i in index),
            "query_positions": tuple(positions[i] for i in index),
        }
        if self.x is not None:
            narrowed["x"] = self.x[index]
            if self.x_kv is None:  # keys and values keep reading every row of x
                narrowed["x_kv"] = self.x
        else:
            assert self.q is not None  # a direct spec
            narrowed["q"] = self.q[index]
        if self.mask is not None:
            narrowed["mask"] = self.mask[index]
        return replace(self, **narrowed)


def pool_heads(array: np.ndarray, heads: int, into: int, layout: str = "contiguous") -> np.ndarray:
    """``array`` (``[..., heads·d_k]``) with its ``heads`` column heads mean-pooled into ``into`` heads.

    New head ``g`` is the mean of old heads ``g·r … g·r + r − 1`` (``r = heads / into``); a head's
    columns are a block (contiguous) or every ``heads``-th column (interleaved), before and after.
    """
    *lead, width = array.shape
    d_k, r = width // heads, heads // into
    if layout == "interleaved":  # column j belongs to head j mod heads
        split = np.swapaxes(array.reshape(*lead, d_k, heads), -1, -2)  # (..., heads, d_k)
    else:
        split = array.reshape(*lead, heads, d_k)  # (..., heads, d_k)
    means = split.reshape(*lead, into, r, d_k).mean(axis=-2)  # (..., into, d_k)
    if layout == "interleaved":
        means = np.swapaxes(means, -1, -2)  # (..., d_k, into)
    return means.reshape(*lead, into * d_k)


def columns_of(head: int, heads: int, d_k: int, layout: str) -> range:
    """Columns of a ``heads × d_k`` wide array that head ``head`` (0-based) owns under ``layout``."""
    if layout == "interleaved":  # column j belongs to head j mod H
        return range(head, heads * d_k, heads)
    return range(head * d_k, (head + 1) * d_k)


def _shape(array: np.ndarray) -> str:
    return " × ".join(map(str, array.shape))
