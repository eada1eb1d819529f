"""The inputs of an attention problem, in one of two forms: Q, K and V as given, or X with the projections."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from attnx.errors import ConfigError


def frozen(array: np.ndarray, dtype: type | None = None) -> np.ndarray:
    """A read-only copy of ``array`` as ``dtype``; by default float32 stays float32 (widening it
    would only cost a conversion back for float32 engines) and other numbers become float64."""
    if dtype is None:
        dtype = np.float32 if np.asarray(array).dtype == np.float32 else np.float64
    array = np.array(array, dtype=dtype, copy=True)
    array.flags.writeable = False
    return array


def _matrix(array: np.ndarray, name: str, where: str) -> np.ndarray:
    """``array`` as a read-only matrix, or a ConfigError naming ``name`` when it is not a non-empty one."""
    array = np.asarray(array)
    if array.ndim != 2 or 0 in array.shape:
        raise ConfigError(f"{where}: {name} must be a non-empty matrix, got shape {array.shape}")
    return frozen(array)


def shape_text(array: np.ndarray) -> str:
    """``2 × 3``: an array's shape as messages write it."""
    return " × ".join(map(str, array.shape))


@dataclass(frozen=True, eq=False)
class Linear:
    """One learned projection ``x @ weight + bias`` (``weight`` is ``[in, out]``, as the paper's W).

    Made with ``Linear.of``, its arrays are read-only copies.
    """

    weight: np.ndarray
    bias: np.ndarray | None = None

    @classmethod
    def of(cls, weight: np.ndarray, bias: np.ndarray | None = None) -> Linear:
        """A projection holding read-only copies of ``weight`` and ``bias``."""
        return cls(frozen(weight), None if bias is None else frozen(bias))

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

    @functools.cached_property
    def magnitude(self) -> float:
        """The largest absolute weight or bias (NaN where one is NaN), found once: a model's projection is reused by
        every problem made of its layer (each token ``--generate`` writes)."""
        from attnx.core.heads import largest_abs

        values = [largest_abs(self.weight), *([] if self.bias is None else [largest_abs(self.bias)])]
        return math.nan if any(map(math.isnan, values)) else max(values)


# Where a QK-norm applies: to each head's vector once split (Qwen 3), or to the whole projection before the split
# (OLMo 2: one RMSNorm over all H · d_k columns of Q, another over the H_kv · d_k of K).
NORM_OVER = ("head", "projection")


@dataclass(frozen=True, eq=False)
class HeadNorm:
    """RMSNorm of Q or K (QK-norm), before rotary positions: ``x / sqrt(mean(x²) + eps) * weight``.

    ``over`` says where: ``head``, each head's vector (Qwen 3; ``weight`` ``[d_k]``), or ``projection``, each
    token's whole row of Q or K before the head split (OLMo 2; ``weight`` ``[H · d_k]`` for Q, ``[H_kv · d_k]``
    for K). Made with ``of``, its weight is a read-only copy.
    """

    weight: np.ndarray
    eps: float
    over: str = "head"

    @classmethod
    def of(cls, weight: np.ndarray, eps: float, over: str = "head") -> HeadNorm:
        """A norm holding a read-only copy of ``weight`` (a vector), a positive ``eps`` and where it applies."""
        weight = np.asarray(weight)
        if weight.ndim != 1 or weight.size == 0:
            raise ConfigError(f"a head norm's weight must be a non-empty vector, got shape {weight.shape}")
        if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps < 1):
            raise ConfigError(f"a head norm's eps must be a number in (0, 1), got {eps!r}")
        if over not in NORM_OVER:
            raise ConfigError(f"a head norm applies over {' or '.join(NORM_OVER)}, got {over!r}")
        return cls(frozen(weight), float(eps), over)

    @property
    def per_head(self) -> bool:
        """Whether it normalises each head's vector (else each token's whole projection)."""
        return self.over == "head"


@dataclass(frozen=True, eq=False)
class DirectInputs:
    """Q ``[query, d_model]``, K and V ``[key, kv_heads · d_k]``, as given (made with ``of``)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray

    @classmethod
    def of(cls, q: np.ndarray, k: np.ndarray, v: np.ndarray, where: str = "<input>") -> DirectInputs:
        """Checked, read-only copies of Q, K and V."""
        q, k, v = _matrix(q, "q", where), _matrix(k, "k", where), _matrix(v, "v", where)
        if k.shape != v.shape:
            raise ConfigError(f"{where}: k and v must have the same shape, got k {shape_text(k)}, v {shape_text(v)}")
        return cls(q, k, v)

    @property
    def shapes(self) -> tuple[int, int, int, int]:
        """N, M, the width of Q and the width of K and V."""
        return self.q.shape[0], self.k.shape[0], self.q.shape[1], self.k.shape[1]

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of numbers, by the names messages use."""
        return {"q": self.q, "k": self.k, "v": self.v}

    def projections(self) -> tuple[Linear, ...]:
        """The learned projections: none for given Q, K and V."""
        return ()

    def rows(self, index: list[int]) -> DirectInputs:
        """Only the query rows ``index``; keys and values stay whole."""
        return replace(self, q=self.q[index])


@dataclass(frozen=True, eq=False)
class ProjectedInputs:
    """X ``[query, d_in]`` and, for cross-attention, ``x_kv`` ``[key, d_in]`` (default X), with the
    projections that make Q = X W_q + b_q, K = x_kv W_k + b_k and V = x_kv W_v + b_v (made with ``of``).

    ``q_norm`` and ``k_norm``, when given, normalise Q and K (QK-norm): each head once it is split, or each
    token's whole projection before the split (``HeadNorm.over``; then as wide as W_q's or W_k's output).
    """

    x: np.ndarray
    x_kv: np.ndarray | None
    w_q: Linear
    w_k: Linear
    w_v: Linear
    q_norm: HeadNorm | None = None
    k_norm: HeadNorm | None = None

    @classmethod
    def of(
        cls,
        x: np.ndarray,
        w_q: Linear,
        w_k: Linear,
        w_v: Linear,
        x_kv: np.ndarray | None = None,
        where: str = "<input>",
        q_norm: HeadNorm | None = None,
        k_norm: HeadNorm | None = None,
    ) -> ProjectedInputs:
        """Checked, read-only copies of X (and ``x_kv``), with projections whose widths fit them."""
        x = _matrix(x, "x", where)
        kv_source = x if x_kv is None else _matrix(x_kv, "x_kv", where)
        for name, w, reads in (("w_q", w_q, x), ("w_k", w_k, kv_source), ("w_v", w_v, kv_source)):
            if w.d_in != reads.shape[1]:
                what = "x" if name == "w_q" or x_kv is None else "x_kv"
                raise ConfigError(
                    f"{where}: {name} must have {reads.shape[1]} rows ({what} has "
                    f"{reads.shape[1]} columns), got {w.d_in}"
                )
            if w.bias is not None and w.bias.shape != (w.d_out,):
                raise ConfigError(f"{where}: b_{name[2]} must have {w.d_out} values, got {w.bias.size}")
        if w_k.d_out != w_v.d_out:
            raise ConfigError(f"{where}: w_k and w_v must have the same number of columns")
        for name, norm, w in (("q_norm", q_norm, w_q), ("k_norm", k_norm, w_k)):
            if norm is not None and not norm.per_head and norm.weight.shape != (w.d_out,):
                raise ConfigError(
                    f"{where}: {name} over the whole projection must have w_{name[0]}'s {w.d_out} values, "
                    f"got {norm.weight.size}"
                )
        return cls(x, None if x_kv is None else kv_source, w_q, w_k, w_v, q_norm, k_norm)

    @property
    def kv_source(self) -> np.ndarray:
        """What keys and values are projected from: ``x_kv``, else ``x``."""
        return self.x if self.x_kv is None else self.x_kv

    @property
    def shapes(self) -> tuple[int, int, int, int]:
        """N, M, the width of Q and the width of K and V."""
        return self.x.shape[0], self.kv_source.shape[0], self.w_q.d_out, self.w_k.d_out

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of numbers, by the names messages use: x, x_kv, w_* and b_*."""
        out = {"x": self.x} | ({} if self.x_kv is None else {"x_kv": self.x_kv})
        for name, w in (("q", self.w_q), ("k", self.w_k), ("v", self.w_v)):
            out[f"w_{name}"] = w.weight
            if w.bias is not None:
                out[f"b_{name}"] = w.bias
        for name, norm in (("q_norm", self.q_norm), ("k_norm", self.k_norm)):
            if norm is not None:
                out[name] = norm.weight
        return out

    def projections(self) -> tuple[Linear, ...]:
        """W_q, W_k and W_v (with their biases)."""
        return self.w_q, self.w_k, self.w_v

    def rows(self, index: list[int]) -> ProjectedInputs:
        """Only the query rows ``index``; keys and values keep reading every row of X."""
        return replace(self, x=self.x[index], x_kv=self.kv_source)


Inputs = DirectInputs | ProjectedInputs
