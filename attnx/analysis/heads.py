"""Per-head statistics and every head measure, scored once for `heads`, the model view and `detect`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from attnx.core.measures import HEADS, MEASURES, WHOLE, Rule
from attnx.core.result import AttentionResult, row_maxima
from attnx.core.tensors import WEIGHTS

# The pattern labels, their scores and thresholds live in the measure registry (attnx/core/measures.py,
# rule HEADS). Every score is a mean over the queries that see at least two keys (a query with one
# visible key has no choice to make) and, for a target key, have one; ``counts`` says how many:
#   self            mean weight on the key at the query's own position (the diagonal)
#   previous-token  mean weight on the key just before the query (queries at position >= 1)
#   sink            mean weight on the sinks: key 0 and a model's special tokens (``first-token`` until 1.4)
#   induction       mean weight on the key right after the previous occurrence of the query's token
#                   (only queries whose token occurred before)
#   uniform         mean normalised entropy: entropy / log(visible keys)
#   focused         mean max weight
# A head gets the best-scoring positional label (self, previous-token, sink, induction) whose score
# reaches its threshold; failing that `uniform`, then `focused`; failing all, none.
THRESHOLDS: Mapping[str, float] = MappingProxyType(HEADS.thresholds())
LABELS = HEADS.labels
TARGETS = ("self", "previous-token", "duplicate-token", "induction")  # measures scored on one key per query
PER_ROW = ("sink", "source-end", "entropy", "max-weight")  # measures scored at every query with a choice
# WHOLE (monotonicity, coverage): one value per head of the whole sequence (attnx.analysis.alignment's), resting on
# every query with a choice.


@dataclass(frozen=True, eq=False)
class Saturation:
    """Per head, the numbers that show softmax saturation (``[head]`` each).

    ``scaled_std`` is the standard deviation (population, ddof 0) of the scaled scores a head may
    attend; ``mean_max_weight`` the mean over queries with a choice of the largest weight. Scores
    spread wide (std of several units) push the max weight towards 1: the softmax saturates.
    """

    scaled_std: np.ndarray
    mean_max_weight: np.ndarray


@dataclass(frozen=True, eq=False)
class HeadStats:
    """What one head does with its weights, per query (``[query]`` arrays) and as a label.

    ``entropy`` is in nats (NaN where no key is visible); ``normalized_entropy`` divides it by
    log(visible keys) (NaN where fewer than two keys are visible); ``effective_keys`` is
    exp(entropy); ``top_key`` the key of largest weight (-1 where none is visible; the first of
    tied keys) and ``top_ties`` how many keys tie it (``row_maxima``; 0 where none is visible, 5
    for a uniform row of five keys). ``scores`` holds every label's score, keyed as ``THRESHOLDS``
    (None where it is undefined, e.g. induction without repeated tokens), and ``counts`` the number
    of queries each score is the mean of; ``label`` is the chosen one (None: no rule fits),
    ``label_score`` its score.
    """

    head: int
    visible_keys: np.ndarray
    entropy: np.ndarray
    normalized_entropy: np.ndarray
    effective_keys: np.ndarray
    max_weight: np.ndarray
    top_key: np.ndarray
    top_ties: np.ndarray
    scaled_std: float
    mean_max_weight: float
    scores: Mapping[str, float | None]
    counts: Mapping[str, int]
    label: str | None
    label_score: float | None

    @property
    def label_count(self) -> int | None:
        """How many queries the label's score is the mean of (None without a label)."""
        return None if self.label is None else self.counts.get(self.label)

    @property
    def mean_entropy(self) -> float:
        """Mean entropy over the queries with a choice (NaN when none has one)."""
        return _mean(self.entropy[self.visible_keys >= 2])

    @property
    def mean_effective_keys(self) -> float:
        """Mean effective number of keys over the queries with a choice."""
        return _mean(self.effective_keys[self.visible_keys >= 2])


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else float("nan")


def visible_keys(result: AttentionResult) -> np.ndarray:
    """``[query, key]`` booleans: True where the query may attend the key (``result.mask``, or all)."""
    if result.mask is None:
        return np.ones((len(result.tokens), len(result.key_tokens)), dtype=bool)
    return np.asarray(result.mask, dtype=bool)


def chosen_queries(result: AttentionResult) -> np.ndarray:
    """``[query]`` booleans: True where the query sees two keys or more (has a choice to make)."""
    return np.asarray(visible_keys(result).sum(axis=1) >= 2)


def saturation(result: AttentionResult) -> Saturation:
    """Scaled-score spread and mean max weight of every head of ``result``."""
    allowed = visible_keys(result)
    chosen = chosen_queries(result)
    scaled = np.asarray(result.scaled, dtype=np.float64)  # (H, N, M)
    weights = np.asarray(result.weights, dtype=np.float64)  # (H, N, M)
    stds = np.array([scaled[h][allowed].std() if allowed.any() else np.nan for h in range(result.heads)])
    maxima = np.array([_mean(weights[h].max(axis=1)[chosen]) for h in range(result.heads)])
    return Saturation(stds, maxima)


def entropy(weights: np.ndarray) -> np.ndarray:
    """The entropy in nats of each row of ``weights`` (over the last axis; 0 log 0 = 0)."""
    safe = np.where(weights > 0, weights, 1.0)
    return np.asarray(-(weights * np.log(safe)).sum(axis=-1))


def normalized_entropy(nats: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Entropy ``nats`` ``[..., query]`` ÷ log(visible keys) ``[query]``: 0 one key, 1 uniform (NaN where a query
    sees fewer than two keys)."""
    chosen = visible >= 2
    return np.where(chosen, nats / np.log(np.where(chosen, visible, 2)), np.nan)  # guards log(1) = 0 and log(0)


def earlier_copies(tokens: Sequence[Hashable], key_tokens: Sequence[Hashable], positions: Sequence[int]) -> np.ndarray:
    """Per query, the latest key before its position holding its token (-1: none).

    Query ``i`` sits at ``positions[i]``; an earlier copy is a key ``j < positions[i]`` with
    ``key_tokens[j] == tokens[i]``. Tokens may be strings (a table's) or ids (a model's).
    """
    copies = np.full(len(tokens), -1)
    latest: dict[Hashable, int] = {}
    seen = 0  # keys 0 .. seen - 1 are in ``latest``
    for i in sorted(range(len(tokens)), key=lambda i: positions[i]):
        while seen < min(positions[i], len(key_tokens)):
            latest[key_tokens[seen]] = seen
            seen += 1
        copies[i] = latest.get(tokens[i], -1)
    return copies


def target_keys(
    tokens: Sequence[Hashable], key_tokens: Sequence[Hashable], positions: Sequence[int]
) -> dict[str, np.ndarray]:
    """Per target measure (``TARGETS``), the key each query is scored on (-1 where it has none)."""
    at = np.asarray(positions, dtype=int).reshape(-1)
    m = len(key_tokens)
    copies = earlier_copies(tokens, key_tokens, positions)
    return {
        "self": np.where(at < m, at, -1),
        "previous-token": np.where((at >= 1) & (at <= m), at - 1, -1),
        "duplicate-token": copies,
        "induction": np.where((copies >= 0) & (copies + 1 < m), copies + 1, -1),
    }


def sink_keys(sinks: Sequence[int], keys: int) -> list[int]:
    """The keys of ``sinks`` that exist among ``keys`` keys, once each, in order."""
    return sorted({k for k in sinks if 0 <= k < keys})


def on_sinks(weights: np.ndarray, rows: np.ndarray, keys: Sequence[int]) -> np.ndarray:
    """``[head, rows]``: what each head's rows ``rows`` of ``weights`` ``[head, query, key]`` put on the keys
    ``keys`` together (the sink measure; with value shares for weights, the sink by value)."""
    return np.asarray(weights[:, rows][:, :, list(keys)].sum(axis=2))


def sink_mass(result: AttentionResult, weights: np.ndarray, rows: np.ndarray, keys: Sequence[int]) -> np.ndarray:
    """``[head, rows]``: the weight each head's rows ``rows`` put on the sink keys ``keys`` and on the head's learned
    sink, where the result has one (the sink measure)."""
    mass = on_sinks(weights, rows, keys)
    if result.sink_weights is not None:
        mass = mass + np.asarray(result.sink_weights, dtype=np.float64)[:, rows]
    return mass


@dataclass(frozen=True, eq=False)
class Scored:
    """One measure at the queries it scores: ``rows`` (their indices) and ``values`` ``[head, rows]``."""

    rows: np.ndarray
    values: np.ndarray

    @property
    def count(self) -> int:
        """How many queries a head's score is the mean of."""
        return int(self.rows.size)

    def mean(self, head: int) -> float | None:
        """Head ``head``'s score: the mean over the scored queries (None when there is none, or the score is
        undefined: a whole-sequence measure's NaN)."""
        if not self.rows.size:
            return None
        value = float(self.values[head].mean())
        return None if np.isnan(value) else value


@dataclass(frozen=True, eq=False)
class QueryScores:
    """Every head's measures at each query of one result: per query (``[query]``, ``[head, query]``) and, per
    measure name, at the queries it scores (``scored``).

    ``entropy`` is in nats (NaN where no key is visible); ``normalized`` divides it by log(visible keys)
    (NaN where fewer than two are visible); a learned sink counts in both as one more key; ``max_weight`` is each
    row's largest weight.
    """

    visible: np.ndarray
    entropy: np.ndarray
    normalized: np.ndarray
    max_weight: np.ndarray
    scored: Mapping[str, Scored]


def query_scores(
    result: AttentionResult,
    names: Sequence[str],
    *,
    sinks: Sequence[int] = (0,),
    ids: Sequence[int] | None = None,
) -> QueryScores:
    """The measures ``names`` (registry names: targets, ``sink``, ``entropy``, ``max-weight``) of every head of
    ``result``, each at the queries with a choice (and, for a target, one); ``sinks`` are the keys that count
    as sinks (for ``source-end``, a cross-attention's: the source's special tokens); a whole-sequence measure
    (``WHOLE``: monotonicity, coverage) is one value per head, ``[head, 1]`` (NaN: undefined); ``ids`` (the key
    tokens' ids, for a model's whole sequence) find repeated tokens instead of the token strings."""
    weights = np.asarray(result.tensor(WEIGHTS), dtype=np.float64)  # (H, N, M): the measures read the weights
    visible = visible_keys(result).sum(axis=1)  # (N,)
    chosen = visible >= 2
    nats = np.where(visible > 0, entropy(weights), np.nan)  # (H, N)
    outcomes = visible
    if result.sink_weights is not None:  # a learned sink is one more outcome of each row's softmax
        nats = nats + entropy(np.asarray(result.sink_weights, dtype=np.float64)[..., None])
        outcomes = visible + 1
    normalized = normalized_entropy(nats, outcomes)
    max_weight = weights.max(axis=2)  # (H, N)
    if ids is None:
        targets = target_keys(result.tokens, result.key_tokens, result.query_positions)
    else:
        targets = target_keys([ids[p] for p in result.query_positions], ids, result.query_positions)
    every = np.flatnonzero(chosen)
    scored: dict[str, Scored] = {}
    for name in names:
        if name in TARGETS:
            keys = targets[name]
            rows = np.flatnonzero(chosen & (keys >= 0) & (keys < weights.shape[2]))
            scored[name] = Scored(rows, weights[:, rows, keys[rows]])  # (H, scored)
        elif name == "sink":
            scored[name] = Scored(every, sink_mass(result, weights, every, sink_keys(sinks, weights.shape[2])))
        elif name == "source-end":
            scored[name] = Scored(every, on_sinks(weights, every, sink_keys(sinks, weights.shape[2])))
        elif name in WHOLE:
            scored[name] = Scored(every, whole_scores(weights[:, every], name))
        elif name == "entropy":
            scored[name] = Scored(every, normalized[:, every])
        elif name == "max-weight":
            scored[name] = Scored(every, max_weight[:, every])
        else:
            raise ValueError(f"{name!r} is not a measure scored here: {', '.join((*TARGETS, *PER_ROW, *WHOLE))}")
    return QueryScores(visible, nats, normalized, max_weight, MappingProxyType(scored))


def whole_scores(weights: np.ndarray, name: str) -> np.ndarray:
    """``[head, 1]``: the whole-sequence measure ``name`` (monotonicity or coverage, as `attnx align` has them:
    ``attnx.analysis.alignment.head_alignments``) of each head of ``weights`` ``[head, query, key]``; NaN where it
    is undefined (no query, or a side that never moves)."""
    from attnx.analysis.alignment import head_alignments

    if weights.shape[1] == 0:
        return np.full((weights.shape[0], 1), np.nan)
    found = [getattr(aligned, name) for aligned in head_alignments([weights])]
    return np.array([[np.nan if value is None else value] for value in found], dtype=np.float64)


def pick_label(scores: Mapping[str, float | None], rule: Rule = HEADS) -> tuple[str | None, float | None]:
    """The label ``rule`` (HEADS: see the comment above it) gives a head with ``scores`` (keyed as the measures'
    keys)."""
    found, score = rule.pick(lambda m: scores.get(m.key))
    return (None, None) if found is None else (found.label, score)


def head_stats(result: AttentionResult, sinks: Sequence[int] = (0,), rule: Rule = HEADS) -> tuple[HeadStats, ...]:
    """The statistics, label and counts of every head of ``result`` (heads 0-based; ``sinks``: the keys whose
    weight counts as a sink's, key 0 by default; for a cross-attention, the source's special tokens), scored and
    labelled by ``rule`` (HEADS; CROSS for a cross-attention)."""
    scored = query_scores(result, rule.measures, sinks=sinks)
    spread = saturation(result)
    counts = MappingProxyType({MEASURES[name].key: scored.scored[name].count for name in rule.measures})
    every = result.tensor(WEIGHTS)  # head statistics are computed from the weights
    stats = []
    for h in range(result.heads):
        weights = np.asarray(every[h], dtype=np.float64)  # (N, M)
        scores = {MEASURES[name].key: scored.scored[name].mean(h) for name in rule.measures}
        label, score = pick_label(scores, rule)
        visible = scored.visible
        stats.append(
            HeadStats(
                head=h,
                visible_keys=visible,
                entropy=scored.entropy[h],
                normalized_entropy=scored.normalized[h],
                effective_keys=np.exp(scored.entropy[h]),
                max_weight=scored.max_weight[h],
                top_key=np.where(visible > 0, weights.argmax(axis=1), -1),
                top_ties=np.where(visible > 0, row_maxima(weights).sum(axis=1), 0),
                scaled_std=float(spread.scaled_std[h]),
                mean_max_weight=float(spread.mean_max_weight[h]),
                scores=MappingProxyType(scores),
                counts=counts,
                label=label,
                label_score=score,
            )
        )
    return tuple(stats)
