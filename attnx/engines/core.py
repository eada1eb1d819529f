"""Multi-head attention written once, over the array primitives of one small class per framework (``Engine``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import numpy as np

from attnx.core.positions import Rotary, sequence_length
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec, DirectInputs, HeadNorm, Inputs, Linear, ProjectedInputs
from attnx.core.tensors import (
    AVERAGE_WEIGHTS,
    COMPUTED,
    HEAD_OUTPUTS,
    INTACT_OUTPUT,
    INTACT_PROJECTED,
    OUTPUT,
    PROJECTED,
    SCALED,
    SCORES,
    SINK_WEIGHTS,
    WEIGHTS,
    K,
    Q,
    TensorName,
    V,
)

Array = Any  # a numpy.ndarray or a torch.Tensor, depending on the engine

# When no H × N × M array (``MATRICES``) is asked for, an engine may take a path that never holds one whole.
EVERYTHING = frozenset(COMPUTED)

# V's largest magnitude outside [2^-SCALE_FROM, 2^SCALE_FROM] is scaled to [1, 2) (by a power of two).
SCALE_FROM = 16


class Engine(Protocol):
    """One framework's engine (``NumpyEngine``, ``TorchEngine``; its framework is imported by its module alone): what
    ``compute`` asks of it, the primitives the algorithm below is written over, and those of a model's forward pass
    (``attnx.engines.arrays``). Everything else is shared arithmetic (``@``, ``*``, ``.mean(0)``, indexing, ...).
    The primitives work in one dtype on one device: the registry's engine in its defaults, ``on`` in any other."""

    @property
    def name(self) -> str:
        """The name ``compute`` and ``--engine`` take (``numpy``, ``torch``)."""

    @property
    def stacks(self) -> bool:
        """True when problems alike (``attnx.engines.alike``) are computed together, each projection one matmul
        over all their tokens (``compute_many``, ``compute_copies``); else one by one."""

    @property
    def traced(self) -> bool:
        """True when tracemalloc sees the memory its arrays take (NumPy's arrays; not torch's tensors)."""

    def version(self) -> str:
        """Version of the library behind the engine."""

    def devices(self) -> list[str]:
        """Devices present here that the engine can run on, in the order ``auto`` prefers them."""

    def dtypes(self, device: str) -> tuple[str, ...]:
        """Dtypes supported on ``device``, the default first."""

    def resolve_device(self, requested: str) -> str:
        """The device ``requested`` (``auto`` or a name) resolves to; EngineUnavailableError when it is absent."""

    def on(self, dtype: str, device: str) -> Engine:
        """This engine in ``dtype`` on ``device`` (``auto`` or a name): one object for each."""

    def attend(
        self, spec: AttentionSpec, dtype: str, device: str, needs: Collection[TensorName] | None
    ) -> AttentionResult:
        """Attention for ``spec`` in ``dtype`` on the resolved ``device``: the arrays in ``needs`` (None: all)."""

    def attend_heads(
        self, q: Array, k: Array, v: Array, spec: AttentionSpec, keep: frozenset[TensorName]
    ) -> dict[TensorName, Array]:
        """Head outputs (and the matrices in ``keep``) from split heads; ``dense`` is always correct."""

    def array(self, values: np.ndarray) -> Array:
        """A spec's ``values`` in the engine's dtype and device (booleans stay boolean)."""

    def like(self, values: np.ndarray) -> Array:
        """Any ``values`` as this engine's array, in its dtype, on its device."""

    def indices(self, values: np.ndarray) -> Array:
        """Integer positions, as this engine indexes with them."""

    def host(self, x: Array) -> np.ndarray:
        """``x`` as a NumPy array on the host."""

    def permute(self, x: Array, axes: tuple[int, ...]) -> Array:
        """Reorder the axes of ``x``."""

    def softmax_masked(self, x: Array, allowed: Array | None, *, reuse: bool = False) -> Array:
        """Softmax over the last axis where ``allowed``; rows with no allowed key become zeros.

        With ``reuse``, the result may be written over ``x``.
        """

    def join(self, x: Array, column: Array) -> Array:
        """``x`` with ``column`` (the same shape but 1 on the last axis) appended on its last axis."""

    def mean(self, x: Array) -> Array:
        """The mean over the last axis, kept as an axis of 1."""

    def sqrt(self, x: Array) -> Array:
        """Square root, elementwise."""

    def tanh(self, x: Array) -> Array:
        """Hyperbolic tangent, elementwise."""

    def exp(self, x: Array) -> Array:
        """Exponential, elementwise."""

    def erf(self, x: Array) -> Array:
        """The error function, elementwise."""

    def maximum(self, x: Array, low: float) -> Array:
        """``max(x, low)``, elementwise."""

    def minimum(self, x: Array, high: float) -> Array:
        """``min(x, high)``, elementwise."""

    def clip(self, x: Array, low: float, high: float) -> Array:
        """``x`` clamped to ``[low, high]``."""

    def zeros_like(self, x: Array) -> Array:
        """Zeros of ``x``'s shape and dtype (and device)."""

    def concatenate(self, parts: Sequence[Array]) -> Array:
        """``parts`` one under another (along the first axis)."""

    def split(self, x: Array, sizes: Sequence[int]) -> list[Array]:
        """``x`` cut along its first axis into consecutive parts of ``sizes`` rows."""


def split_heads(ops: Engine, x: Array, heads: int, layout: str) -> Array:
    """``[token, heads*d_k]`` -> ``[head, token, d_k]`` with head h on ``head_columns(h)`` (leading axes, a copy's
    in ``attention_copies``, stay in front)."""
    *lead, n, width = x.shape
    front = tuple(range(len(lead)))
    a, b, c = (len(lead) + i for i in range(3))
    if layout == "interleaved":  # column j belongs to head j mod H
        return ops.permute(x.reshape(*lead, n, width // heads, heads), (*front, c, a, b))  # (…, H, n, d_k)
    return ops.permute(x.reshape(*lead, n, heads, width // heads), (*front, b, a, c))  # (…, H, n, d_k)


def merge_heads(ops: Engine, x: Array, layout: str) -> Array:
    """``[head, token, d_k]`` -> ``[token, heads*d_k]``: the inverse of ``split_heads`` (leading axes kept)."""
    *lead, h, n, d_k = x.shape
    front = tuple(range(len(lead)))
    a, b, c = (len(lead) + i for i in range(3))
    axes = (b, c, a) if layout == "interleaved" else (b, a, c)
    return ops.permute(x, (*front, *axes)).reshape(*lead, n, h * d_k)  # (…, n, H*d_k)


def linear(ops: Engine, x: Array, w: Linear) -> Array:
    """``x @ W + b`` for ``x`` ``[…, d_in]``: leading axes (copies, in ``attention_copies``) are stacked into one
    matmul, the weights read once for all of them."""
    rows = x if x.ndim <= 2 else x.reshape(-1, x.shape[-1])  # (Σ tokens, d_in)
    out = rows @ ops.array(w.weight)
    out = out + ops.array(w.bias) if w.bias is not None else out
    return out if x.ndim <= 2 else out.reshape(*x.shape[:-1], out.shape[-1])  # (…, tokens, d_out)


def project(ops: Engine, inputs: Inputs) -> tuple[Array, Array, Array]:
    """Q, K and V as the engine's arrays: as given, or ``X W + b`` for each."""
    if isinstance(inputs, DirectInputs):
        return ops.array(inputs.q), ops.array(inputs.k), ops.array(inputs.v)
    x = ops.array(inputs.x)
    x_kv = x if inputs.x_kv is None else ops.array(inputs.x_kv)
    return linear(ops, x, inputs.w_q), linear(ops, x_kv, inputs.w_k), linear(ops, x_kv, inputs.w_v)


def normalise(ops: Engine, heads: Array, norm: HeadNorm) -> Array:
    """RMSNorm over the last axis: ``x / sqrt(mean(x²) + eps) * weight`` (QK-norm), of every head's vector
    (over d_k) or of every token's whole projection (over H · d_k, before the head split)."""
    width = heads.shape[-1]
    mean_square = (heads * heads) @ ops.array(np.full((width, 1), 1.0 / width))  # (…, n, 1)
    return heads * (mean_square + norm.eps) ** -0.5 * ops.array(norm.weight)


def normed_projections(ops: Engine, inputs: Inputs, q: Array, k: Array) -> tuple[Array, Array]:
    """Q and K through the norms the inputs give over the whole projection (OLMo 2), before the head split."""
    if isinstance(inputs, ProjectedInputs):
        if inputs.q_norm is not None and not inputs.q_norm.per_head:
            q = normalise(ops, q, inputs.q_norm)  # (N, H·d_k)
        if inputs.k_norm is not None and not inputs.k_norm.per_head:
            k = normalise(ops, k, inputs.k_norm)  # (M, H_kv·d_k)
    return q, k


def normed_heads(ops: Engine, inputs: Inputs, q_heads: Array, k_heads: Array) -> tuple[Array, Array]:
    """Each head of Q and K through the norms the inputs give per head (Qwen 3), once split."""
    if isinstance(inputs, ProjectedInputs):
        if inputs.q_norm is not None and inputs.q_norm.per_head:
            q_heads = normalise(ops, q_heads, inputs.q_norm)  # (H, N, d_k)
        if inputs.k_norm is not None and inputs.k_norm.per_head:
            k_heads = normalise(ops, k_heads, inputs.k_norm)  # (H_kv, M, d_k)
    return q_heads, k_heads


def rotate(ops: Engine, heads: Array, rotary: Rotary, positions: np.ndarray, length: int) -> Array:
    """``heads`` ``[head, token, d_k]`` turned by ``rotary`` at the tokens' ``positions`` in a text of ``length``
    positions (see attnx.core.positions)."""
    key = (rotary, np.asarray(positions).tobytes(), heads.shape[-1], length)
    cos, sin, turn = _TABLES.get(key) or rotary.tables(positions, heads.shape[-1], length)  # (n, d_k), (d_k, d_k)
    if key not in _TABLES and cos.size <= TABLE_SIZE:  # a model's layers, and an ablation sweep's copies, turn alike
        if len(_TABLES) >= TABLES_KEPT:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[key] = (cos, sin, turn)
    rows = heads if heads.ndim <= 3 else heads.reshape(-1, heads.shape[-1])  # copies' heads: one matmul for all
    turned = (rows @ ops.array(turn)).reshape(heads.shape)  # R has one ±1 per column: exact in any order
    return heads * ops.array(cos) + turned * ops.array(sin)  # (…, H, n, d_k)


TABLES_KEPT = 8  # rotary tables kept, the oldest let go first
TABLE_SIZE = 1 << 16  # elements of a table worth keeping (64 tokens × 1024 columns): longer texts' compute dominates
_TABLES: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def dense(
    ops: Engine, q: Array, k: Array, v: Array, spec: AttentionSpec, keep: frozenset[TensorName]
) -> dict[TensorName, Array]:
    """The textbook computation on whole matrices: every intermediate, as arrays of the engine.

    With grouped K/V heads (GQA/MQA) the ``g = H / H_kv`` query heads of a group are stacked along
    the query axis and share one matmul with their K/V head, so K and V are never repeated. A
    matrix not in ``keep`` is overwritten by the next step: without ``scores`` and ``scaled``, one
    H × N × M array serves all three (fewer passes, and less new memory to fault in). The scaled scores are
    ``scale · scores + score_bias`` (the spec's bias, where it has one), then soft-capped. Leading axes
    (copies, in ``attention_copies``) stay in front of every array.
    """
    *lead, h, n, d_k = q.shape
    h_kv, m = k.shape[-3], k.shape[-2]
    g = h // h_kv
    scores = (q.reshape(*lead, h_kv, g * n, d_k) @ transposed(ops, k)).reshape(*lead, h, n, m)  # (…, H, N, M)
    if SCORES in keep:
        scaled = scores * spec.multiplier  # (…, H, N, M); a Python float keeps the array's dtype
    else:
        scaled = scores
        scaled *= spec.multiplier  # in place, in NumPy and in torch
    if spec.score_bias is not None:  # an additive bias per head (T5's relative positions, ALiBi), before the cap
        scaled += ops.array(spec.score_bias)  # (…, H, N, M); scaled is never scores itself when scores are kept
    cap = spec.settings.softcap
    if cap is not None:  # soft-capped logits (Gemma 2): cap · tanh(s / cap), before the mask
        scaled = ops.tanh(scaled * (1.0 / cap)) * cap
    allowed = spec.allowed()
    out: dict[TensorName, Array] = {SCORES: scores, SCALED: scaled}
    if spec.settings.sink_logits is None:
        mask = None if allowed is None else ops.array(allowed)
        weights = ops.softmax_masked(scaled, mask, reuse=SCALED not in keep)  # (…, H, N, M)
    else:
        weights, out[SINK_WEIGHTS] = softmax_with_sinks(ops, scaled, allowed, spec.settings.sink_logits)
    head_outputs = (weights.reshape(*lead, h_kv, g * n, m) @ v).reshape(*lead, h, n, d_k)  # (…, H, N, d_k)
    out |= {WEIGHTS: weights, HEAD_OUTPUTS: head_outputs}
    if AVERAGE_WEIGHTS in keep:
        out[AVERAGE_WEIGHTS] = weights.mean(-3)  # (…, N, M)
    return {name: array for name, array in out.items() if name in keep or name in (HEAD_OUTPUTS, SINK_WEIGHTS)}


def transposed(ops: Engine, x: Array) -> Array:
    """``x`` with its last two axes swapped (a view)."""
    axes = tuple(range(x.ndim))
    return ops.permute(x, (*axes[:-2], axes[-1], axes[-2]))


def softmax_with_sinks(
    ops: Engine, scaled: Array, allowed: np.ndarray | None, sinks: tuple[float, ...]
) -> tuple[Array, Array]:
    """The weights ``[head, query, key]`` and the sinks' shares ``[head, query]`` of a softmax over each row's
    allowed keys and its head's learned sink logit, which is always allowed: a row whose keys are all masked
    gives its sink everything (and its keys nothing, as without sinks). Leading axes stay in front."""
    *lead, h, n, m = scaled.shape
    logits = np.broadcast_to(np.asarray(sinks, dtype=np.float64)[:, None, None], (*lead, h, n, 1))
    joined = ops.join(scaled, ops.array(np.ascontiguousarray(logits)))  # (…, H, N, M + 1)
    mask = None
    if allowed is not None:
        rows = np.broadcast_to(allowed, (n, m))
        mask = ops.array(np.concatenate([rows, np.ones((n, 1), dtype=bool)], axis=1))  # (N, M + 1)
    shares = ops.softmax_masked(joined, mask, reuse=True)  # (…, H, N, M + 1)
    return shares[..., :m], shares[..., m]


Attend = Callable[[Array, Array, Array, AttentionSpec, frozenset[TensorName]], dict[TensorName, Array]]


def attention(ops: Engine, spec: AttentionSpec, needs: Collection[TensorName] | None = None) -> dict[TensorName, Array]:
    """The arrays named in ``needs`` (None: every one) for ``spec``, as the engine's arrays.

    Keys match ``AttentionResult`` fields. ``output`` and ``projected`` are always computed (they
    are N × d_model); H × N × M matrices only when asked for.
    """
    keep = EVERYTHING if needs is None else frozenset(needs)
    # 1. Project: Q, K and V as the input gives them, or made from X.
    q, k, v = project(ops, spec.inputs)  # (N, d_model), (M, H_kv·d_k), (M, H_kv·d_k)
    kept = heads_kept(spec.settings.heads, [spec.settings.dropped_heads])
    return attend_projected(
        ops, spec, (q, k, v), keep, None if kept is None else kept[0], ops.attend_heads, intact=True
    )


def attention_copies(
    ops: Engine,
    spec: AttentionSpec,
    xs: np.ndarray,
    dropped: Sequence[tuple[int, ...]],
    needs: Collection[TensorName] | None = None,
) -> dict[TensorName, Array]:
    """``attention`` of ``spec``'s problem on whole matrices (``dense``) for each copy of its input X in ``xs``
    (``[copy, query, d_in]``), copy c dropping the heads ``dropped[c]`` (in place of the spec's own): copies of a
    text in a model's layer, each with other heads dropped. They are computed together on the leading copy axis:
    each projection is one matmul over all their tokens (the weights read once), the scores, softmax and values
    one batched step. Every array comes back with that axis first (``[copy, …]``): copy c's is made by the same
    steps as alone, the same numbers to the rounding of a taller matmul. Unlike ``attention``, ``intact_output``
    and ``intact_projected`` only where ``needs`` (None: every array) names one of them (a model's forward pass
    never reads them; their second W_o would be a third of the projections' work), for every copy."""
    keep, inputs = EVERYTHING if needs is None else frozenset(needs), spec.inputs
    if not isinstance(inputs, ProjectedInputs) or inputs.x_kv is not None:
        raise TypeError("attention_copies takes a problem projected from X alone (no direct Q, K, V, no x_kv)")
    x = ops.array(xs)  # (P, N, d_in)
    q, k, v = (linear(ops, x, w) for w in (inputs.w_q, inputs.w_k, inputs.w_v))  # (P, N, H·d_k), (P, M, H_kv·d_k) ×2
    kept = heads_kept(spec.settings.heads, dropped)  # (P, H, 1, 1)
    intact = not keep.isdisjoint((INTACT_OUTPUT, INTACT_PROJECTED))
    return attend_projected(ops, spec, (q, k, v), keep, kept, functools.partial(dense, ops), intact=intact)


def heads_kept(heads: int, dropped: Sequence[tuple[int, ...]]) -> np.ndarray | None:
    """``[copy, head, 1, 1]``: 0 where a copy drops a head, else 1; None when no copy drops any."""
    if not any(dropped):
        return None
    kept = np.ones((len(dropped), heads, 1, 1))
    for copy, drop in enumerate(dropped):
        kept[copy, list(drop)] = 0.0
    return kept


def attend_projected(
    ops: Engine,
    spec: AttentionSpec,
    projected: tuple[Array, Array, Array],
    keep: frozenset[TensorName],
    kept: np.ndarray | None,
    attend: Attend,
    *,
    intact: bool,
) -> dict[TensorName, Array]:
    """``attention`` from Q, K and V made (``[…, token, width]``): heads split, normed and turned, ``attend``-ed,
    ``kept`` (``[…, head, 1, 1]``, 0 on a dropped head; None: none dropped) applied, merged and projected by W_o;
    with ``intact`` and heads dropped, also the output and projection without dropping them."""
    settings = spec.settings
    # 2. Normalise Q and K (QK-norm) over the whole projection, or split into heads and normalise each head; turn
    #    them by position (rotary positions), when the inputs and settings ask.
    q, k = normed_projections(ops, spec.inputs, *projected[:2])  # (…, N, d_model), (…, M, H_kv·d_k)
    q_heads = split_heads(ops, q, settings.heads, settings.layout)  # (…, H, N, d_k)
    k_heads = split_heads(ops, k, settings.kv_heads, settings.layout)  # (…, H_kv, M, d_k)
    v_heads = split_heads(ops, projected[2], settings.kv_heads, settings.layout)  # (…, H_kv, M, d_k)
    q_heads, k_heads = normed_heads(ops, spec.inputs, q_heads, k_heads)
    if settings.rotary is not None:
        length = sequence_length(spec.positions, spec.n_keys)  # what dynamic and longrope scaling read
        q_heads = rotate(ops, q_heads, settings.rotary, spec.positions, length)  # (…, H, N, d_k)
        k_heads = rotate(ops, k_heads, settings.rotary, np.arange(spec.n_keys), length)  # (…, H_kv, M, d_k)
    # 3. Attend: scores, softmax over the allowed keys, weighted values.
    out = attend(q_heads, k_heads, v_heads, spec, keep)
    for name, heads in ((Q, q_heads), (K, k_heads), (V, v_heads)):
        if name in keep:
            out[name] = heads
    head_outputs = out[HEAD_OUTPUTS]
    if kept is not None:
        if intact:
            out[INTACT_OUTPUT] = merge_heads(ops, head_outputs, settings.layout)
            if spec.w_o is not None:
                out[INTACT_PROJECTED] = linear(ops, out[INTACT_OUTPUT], spec.w_o)
        head_outputs = head_outputs * ops.array(kept)
    out[OUTPUT] = merge_heads(ops, head_outputs, settings.layout)  # (…, N, d_model)
    if spec.w_o is not None:
        out[PROJECTED] = linear(ops, out[OUTPUT], spec.w_o)  # (…, N, d_out)
    if HEAD_OUTPUTS not in keep:
        del out[HEAD_OUTPUTS]
    return out


def near_one_exponent(peak: float) -> int:
    """The power of two k that brings ``peak`` into [1, 2) (peak / 2^k), or 0 when ``peak`` is within
    [2^-SCALE_FROM, 2^SCALE_FROM] already, zero or not finite: the rule every engine scales V by.

    Paths that sum M terms of V before dividing by the softmax's sum (the tiled NumPy kernel, torch's
    SDPA) overflow or underflow for values near the dtype's limits although the output fits; scaled near
    1 they do neither, and scaling by a power of two is exact.
    """
    if not math.isfinite(peak) or peak == 0 or 2.0**-SCALE_FROM <= peak <= 2.0**SCALE_FROM:
        return 0
    return math.frexp(peak)[1] - 1  # peak = m · 2^(k + 1), m in [0.5, 1)
