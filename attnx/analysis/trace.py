"""The trace of one query token: each head's arithmetic, read from a result and broken into terms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnx.core.counting import from_end, span
from attnx.core.masks import Masking
from attnx.core.positions import sequence_length
from attnx.core.result import AttentionResult, row_maxima
from attnx.core.settings import AttentionSettings
from attnx.core.tensors import HEAD_OUTPUTS, SCALED, SCORES, SINK_WEIGHTS, WEIGHTS, K, Q, V
from attnx.errors import AmbiguousError, ChoiceError
from attnx.io.messages import did_you_mean
from attnx.text import labels

DEFAULT_TERMS = 8
DEFAULT_KEYS = 10
# How many tokens an "unknown token" message lists before it says how many more there are.
LISTED_TOKENS = 20


@dataclass(frozen=True, eq=False)
class KeyLine:
    """One key as query ``Q_h[token]`` sees it in one head.

    ``products[i]`` is ``q[i] * key[i]``. ``terms`` are the indices of the products a reader is
    shown, in index order; ``remainder`` is the sum of the others (0.0 when all are shown), so the
    shown products plus ``remainder`` add up to ``raw``. ``exp`` is the softmax numerator
    ``exp(scaled − max)`` (0.0 for a masked key, which the softmax leaves out), so that ``weight``
    is ``exp / HeadTrace.exp_sum``. ``contribution`` is ``weight * value``. ``is_top`` marks every
    key whose weight ties the largest (``row_maxima``). With rotary positions, ``bands`` are the
    products summed per turned pair (pair 0 turns fastest), then under partial rotary the unturned
    columns' sum (``Rotary.bands``): which frequencies carry the score, and ``key_unturned`` the key's
    slice before rotary positions turned it (``key`` is after). Both None without rotary positions.
    ``bias`` is the spec's score bias for this head, query and key (None without one): ``scale · raw + bias``
    is ``scaled``, or what the soft cap bends into it (``unbent``).
    """

    index: int
    token: str
    key: np.ndarray
    value: np.ndarray
    products: np.ndarray
    terms: tuple[int, ...]
    remainder: float
    raw: float
    scaled: float
    exp: float
    weight: float
    contribution: np.ndarray
    masked: bool
    is_top: bool
    bands: np.ndarray | None = None
    key_unturned: np.ndarray | None = None
    bias: float | None = None

    @property
    def elided(self) -> int:
        """How many products ``remainder`` stands for."""
        return len(self.products) - len(self.terms)

    def unbent(self, scale: float) -> float:
        """``scale · raw + bias`` (the bias 0 without one): the scaled score before any soft cap bends it."""
        return scale * self.raw + (self.bias or 0.0)


@dataclass(frozen=True, eq=False)
class KeySummary:
    """The keys a trace does not show one by one, as one row: how many, and their totals (``exp``: their
    softmax numerators)."""

    count: int
    exp: float
    weight: float
    contribution: np.ndarray
    masked: int


@dataclass(frozen=True, eq=False)
class SinkTerm:
    """A head's learned sink in the softmax of the row: its ``logit``, its numerator ``exp(logit − max)`` and the
    ``weight`` it takes (the result's ``sink_weights``); it has no value, so it adds nothing to the output."""

    logit: float
    exp: float
    weight: float


@dataclass(frozen=True, eq=False)
class HeadTrace:
    """One head's part of a trace: the key lines shown, the rest summed up, and the head output.

    The contributions of ``keys`` plus ``rest.contribution`` add up to ``output``. ``kv_head`` is
    the K/V head read; ``shared_with`` the query heads sharing it (empty without GQA); ``dropped``
    says the head was zeroed before concatenation (ablation). The softmax of the row: ``exp_max``
    is the largest scaled score of the keys the query may attend (NaN when it may attend none),
    ``exp_sum`` the sum of ``exp(scaled − exp_max)`` over those keys (0.0 when none). With rotary
    positions, ``query_unturned`` is the query's slice before they turned it (``query`` is after). With a
    learned sink, ``sink`` is its term: the max and the sum then take its logit in too.
    """

    head: int
    kv_head: int
    shared_with: tuple[int, ...]
    dropped: bool
    columns: range
    d_k: int
    query: np.ndarray
    keys: tuple[KeyLine, ...]
    rest: KeySummary | None
    output: np.ndarray
    exp_max: float = float("nan")
    exp_sum: float = 0.0
    query_unturned: np.ndarray | None = None
    sink: SinkTerm | None = None


@dataclass(frozen=True, eq=False)
class Trace:
    """How the output of one query token was computed, head by head.

    ``query`` is the token's position in the input (0-based), ``heads`` the traced heads in order,
    ``output`` the concatenated output of all heads (``[d_model]``) and ``projected`` the output
    after the output projection W_o, where the input has one (else None). ``softcap`` is the cap
    the scaled scores were bent by, and ``rotary`` the rotary positions that turned Q and K (the
    traced slices are the turned ones); None for each when the settings have none. ``masking`` says what
    the mask hid (a sliding window the keys further back); ``written``, that the model wrote the query's token.
    """

    token: str
    query: int
    scale: float
    n_heads: int
    n_keys: int
    heads: tuple[HeadTrace, ...]
    output: np.ndarray
    settings: AttentionSettings
    masking: Masking
    projected: np.ndarray | None = None
    written: bool = False  # the model wrote the query's token itself (--generate)


def resolve_query(tokens: Sequence[str], token: str | None = None, query: int | None = None) -> int:
    """The query row (0-based) picked by ``token`` or by ``query``; exactly one must be given.

    A token is matched on its text as tables show it: exactly, or else with surrounding spaces
    stripped from both sides, so that ``cat`` finds the byte-level token shown as `` cat``.
    """
    if token is None and query is not None:
        row = from_end(query, len(tokens))
        if row is None:
            raise ChoiceError(f"query {query} is out of range; the input has queries {span(len(tokens))}")
        return row
    if token is None or query is not None:
        raise ChoiceError(f"pick one query, by its token or by its position; tokens: {listing(tokens)}")
    found = [i for i, t in enumerate(tokens) if t == token]
    if not found and token.strip():
        found = [i for i, t in enumerate(tokens) if t.strip() == token.strip()]
    if len(found) > 1:
        raise AmbiguousError(
            f"token {token!r} appears at queries {', '.join(map(str, found))}; pick one by its position"
        )
    if not found:
        raise ChoiceError(
            f"token {token!r} is not in the input{did_you_mean(token, tokens)}; tokens: {listing(tokens)}"
        )
    return found[0]


def listing(tokens: Sequence[str]) -> str:
    """The first tokens of an input, for a message (``LISTED_TOKENS`` of them, then how many more)."""
    shown = ", ".join(labels(tokens[:LISTED_TOKENS]))  # each cut: one long token must not hide the others
    more = len(tokens) - LISTED_TOKENS
    return f"{shown}, … ({more} more)" if more > 0 else shown


def resolve_head(head: int | None, n_heads: int) -> tuple[int, ...] | None:
    """The head picked by ``head``, counted from 0 as everywhere in attnx (-1: the last); None means every head."""
    if head is None:
        return None
    chosen = from_end(head, n_heads)
    if chosen is None:
        raise ChoiceError(f"head {head} is out of range; heads are numbered {span(n_heads)}")
    return (chosen,)


def select_terms(products: np.ndarray, limit: int | None) -> tuple[tuple[int, ...], float]:
    """Indices of the products to show (in index order) and the sum of the others.

    Up to ``limit`` products (None: no limit) all are shown; past it, the ``limit`` largest in
    absolute value, ties going to the lower index.
    """
    if limit is None or len(products) <= limit:
        return tuple(range(len(products))), 0.0
    largest = np.argsort(-np.abs(products), kind="stable")[:limit]
    rest = np.ones(len(products), dtype=bool)
    rest[largest] = False
    return tuple(sorted(int(i) for i in largest)), float(products[rest].sum())


def select_keys(weights: np.ndarray, limit: int | None) -> np.ndarray:
    """Indices of the ``limit`` keys of largest weight (None: all), in key order; ties to the lower index."""
    if limit is None or len(weights) <= limit:
        return np.arange(len(weights))
    return np.sort(np.argsort(-weights, kind="stable")[:limit])


def masked_keys(result: AttentionResult, row: int) -> np.ndarray:
    """Which keys the query in ``row`` may not attend to (True = masked; ``result.mask`` is True where allowed)."""
    if result.mask is None:
        return np.zeros(len(result.key_tokens), dtype=bool)
    return ~result.mask[row]


def softmax_terms(scaled: np.ndarray, masked: np.ndarray, sink: float | None = None) -> tuple[np.ndarray, float, float]:
    """The softmax of one row written out: each key's ``exp(scaled − max)`` (0 where masked), the max, the sum.

    The max is over the keys the query may attend and the learned ``sink`` logit, when there is one (NaN, and
    the sum 0, when there is nothing to attend); the sum takes the sink's term in too, so the weights are
    ``exp / sum``. In float64, whatever dtype the engine used.
    """
    row = np.asarray(scaled, dtype=np.float64)
    logits = [] if sink is None else [sink]
    if masked.all() and sink is None:
        return np.zeros(len(row)), float("nan"), 0.0
    top = max([*row[~masked].tolist(), *logits])
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(masked, 0.0, np.exp(row - top))
    return terms, top, float(terms.sum()) + sum(float(np.exp(x - top)) for x in logits)


def _trace_head(result: AttentionResult, head: int, row: int, terms: int | None, keys: int | None) -> HeadTrace:
    # A trace reads every intermediate, so the result was computed with all of them.
    q = result.tensor(Q)[head, row]  # (d_k,)
    kv = result.kv_head(head)
    k, v = result.tensor(K)[kv], result.tensor(V)[kv]  # (M, d_k)
    raw, scaled, weights = (result.tensor(name)[head, row] for name in (SCORES, SCALED, WEIGHTS))  # (M,) each
    bias = None if result.score_bias is None else result.score_bias[head, row]  # (M,), the rows the matrices hold
    masked = masked_keys(result, row)
    top = row_maxima(weights)
    logits = result.settings.sink_logits
    logit = None if logits is None else logits[head]
    exps, exp_max, exp_sum = softmax_terms(scaled, masked, logit)
    shown = select_keys(weights, keys)
    rotary = result.settings.rotary
    if rotary is not None:  # the slices before rotary positions turned them, each from its own position
        length = sequence_length(np.asarray(result.query_positions), len(result.key_tokens))  # the whole text's
        q_unturned = rotary.unturn(q[None, :], np.array([result.query_positions[row]]), length)[0]
        k_unturned = rotary.unturn(k[shown], np.asarray(shown), length)  # keys sit at positions 0 … M − 1
    lines = []
    for i, j in enumerate(shown):
        products = q * k[j]  # (d_k,)
        picked, remainder = select_terms(products, terms)
        lines.append(
            KeyLine(
                index=int(j),
                token=result.key_tokens[j],
                key=k[j],
                value=v[j],
                products=products,
                terms=picked,
                remainder=remainder,
                raw=float(raw[j]),
                scaled=float(scaled[j]),
                exp=float(exps[j]),
                weight=float(weights[j]),
                contribution=weights[j] * v[j],
                masked=bool(masked[j]),
                is_top=bool(top[j]),
                bands=None if rotary is None else rotary.bands(products),
                key_unturned=None if rotary is None else k_unturned[i],
                bias=None if bias is None else float(bias[j]),
            )
        )
    rest = None
    if len(shown) < len(weights):
        others = np.ones(len(weights), dtype=bool)
        others[shown] = False
        rest = KeySummary(
            count=int(others.sum()),
            exp=float(exps[others].sum()),
            weight=float(weights[others].sum()),
            contribution=weights[others] @ v[others],  # (d_k,)
            masked=int(masked[others].sum()),
        )
    group = result.group_of(kv)
    return HeadTrace(
        head=head,
        kv_head=kv,
        shared_with=tuple(group) if len(group) > 1 else (),
        dropped=head in result.dropped_heads,
        columns=result.head_columns(head),
        d_k=result.d_k,
        query=q,
        keys=tuple(lines),
        rest=rest,
        output=result.tensor(HEAD_OUTPUTS)[head, row],
        exp_max=exp_max,
        exp_sum=exp_sum,
        query_unturned=None if rotary is None else q_unturned,
        sink=None if logit is None else sink_term(result, head, row, logit, exp_max),
    )


def sink_term(result: AttentionResult, head: int, row: int, logit: float, exp_max: float) -> SinkTerm:
    """Head ``head``'s learned sink in the softmax of query ``row`` (see ``SinkTerm``)."""
    return SinkTerm(logit, float(np.exp(logit - exp_max)), float(result.tensor(SINK_WEIGHTS)[head, row]))


def build_trace(
    result: AttentionResult,
    row: int = 0,
    *,
    heads: Sequence[int] | None = None,
    terms: int | None = DEFAULT_TERMS,
    keys: int | None = DEFAULT_KEYS,
) -> Trace:
    """The trace of query ``row`` of ``result`` (row 0: a result computed for one selected query).

    Everything is read from ``result``; only the products ``q[i] * k[i]`` of each shown key and the
    contributions ``weight * value`` are derived. ``heads`` are 0-based (None: all). ``terms`` bounds
    the products shown per dot product and ``keys`` the keys shown per head (None: no bound).
    """
    chosen = range(result.heads) if heads is None else heads
    return Trace(
        token=result.tokens[row],
        query=result.query_positions[row],
        scale=result.scale,
        settings=result.settings,
        masking=result.masking,
        n_heads=result.heads,
        n_keys=len(result.key_tokens),
        heads=tuple(_trace_head(result, h, row, terms, keys) for h in chosen),
        output=result.output[row],
        projected=None if result.projected is None else result.projected[row],
        written=result.origin is not None and result.query_positions[row] in result.origin.written,
    )
