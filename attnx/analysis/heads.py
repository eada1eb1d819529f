"""Per-head statistics: entropy, focus, softmax saturation, and a pattern label with its score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from attnx.core.result import AttentionResult, row_maxima

# The pattern labels and the one place their rules live. Every score is a mean over the queries
# that see at least two keys (a query with one visible key has no choice to make):
#   self            mean weight on the key at the query's own position (the diagonal)
#   previous-token  mean weight on the key just before the query (queries at position >= 1)
#   first-token     mean weight on key 0 (an attention sink)
#   induction       mean weight on the key right after the previous occurrence of the query's token
#                   (only queries whose token occurred before)
#   uniform         mean normalised entropy: entropy / log(visible keys)
#   focused         mean max weight
# A head gets the best-scoring positional label (self, previous-token, first-token, induction)
# whose score reaches its threshold; failing that `uniform`, then `focused`; failing all, none.
THRESHOLDS: Mapping[str, float] = MappingProxyType(
    {
        "self": 0.5,
        "previous-token": 0.5,
        "first-token": 0.5,
        "induction": 0.5,
        "uniform": 0.95,
        "focused": 0.8,
    }
)
POSITIONAL = ("self", "previous-token", "first-token", "induction")
LABELS = (*POSITIONAL, "uniform", "focused")


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
    for a uniform row of five keys). ``scores`` holds
    every label's score (None where it is undefined, e.g. induction without repeated tokens);
    ``label`` is the chosen one (None: no rule fits) and ``label_score`` its score.
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
    label: str | None
    label_score: float | None

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


def saturation(result: AttentionResult) -> Saturation:
    """Scaled-score spread and mean max weight of every head of ``result``."""
    allowed = visible_keys(result)
    chosen = allowed.sum(axis=1) >= 2
    scaled = np.asarray(result.scaled, dtype=np.float64)  # (H, N, M)
    weights = np.asarray(result.weights, dtype=np.float64)  # (H, N, M)
    stds = np.array([scaled[h][allowed].std() if allowed.any() else np.nan for h in range(result.heads)])
    maxima = np.array([_mean(weights[h].max(axis=1)[chosen]) for h in range(result.heads)])
    return Saturation(stds, maxima)


def induction_targets(tokens: Sequence[str], key_tokens: Sequence[str], positions: Sequence[int]) -> np.ndarray:
    """Per query, the key right after the latest earlier occurrence of its token (-1: none).

    Query ``i`` sits at ``positions[i]``; an occurrence is a key ``j < positions[i]`` with
    ``key_tokens[j] == tokens[i]``, and its target ``j + 1`` must be a key.
    """
    targets = np.full(len(tokens), -1)
    for i, (token, position) in enumerate(zip(tokens, positions, strict=True)):
        earlier = [j for j in range(min(position, len(key_tokens))) if key_tokens[j] == token]
        if earlier and earlier[-1] + 1 < len(key_tokens):
            targets[i] = earlier[-1] + 1
    return targets


def positional_targets(result: AttentionResult) -> dict[str, np.ndarray]:
    """Per positional label, the key each query would attend to (-1 where the label says nothing)."""
    positions = np.asarray(result.query_positions)
    m = len(result.key_tokens)
    return {
        "self": np.where(positions < m, positions, -1),
        "previous-token": np.where((positions >= 1) & (positions <= m), positions - 1, -1),
        "first-token": np.zeros(len(positions), dtype=int),
        "induction": induction_targets(result.tokens, result.key_tokens, result.query_positions),
    }


def _target_score(weights: np.ndarray, targets: np.ndarray, chosen: np.ndarray) -> float | None:
    rows = np.flatnonzero(chosen & (targets >= 0))
    return float(weights[rows, targets[rows]].mean()) if rows.size else None


def pick_label(scores: Mapping[str, float | None]) -> tuple[str | None, float | None]:
    """The label ``THRESHOLDS`` gives a head with ``scores`` (see the comment above it)."""
    passing = {name: s for name in POSITIONAL if (s := scores.get(name)) is not None and s >= THRESHOLDS[name]}
    if passing:
        best = max(passing, key=lambda name: passing[name])  # ties go to the earlier label
        return best, passing[best]
    for name in ("uniform", "focused"):
        score = scores.get(name)
        if score is not None and score >= THRESHOLDS[name]:
            return name, score
    return None, None


def _entropy(weights: np.ndarray) -> np.ndarray:
    safe = np.where(weights > 0, weights, 1.0)
    return -(weights * np.log(safe)).sum(axis=-1)  # 0 log 0 = 0


def head_stats(result: AttentionResult) -> tuple[HeadStats, ...]:
    """The statistics and label of every head of ``result`` (heads 0-based)."""
    allowed = visible_keys(result)
    visible = allowed.sum(axis=1)  # (N,)
    chosen = visible >= 2
    log_visible = np.log(np.where(chosen, visible, 2))  # guards log(1) = 0 and log(0)
    targets = positional_targets(result)
    spread = saturation(result)
    stats = []
    assert result.weights is not None  # head statistics are computed from the weights
    for h in range(result.heads):
        weights = np.asarray(result.weights[h], dtype=np.float64)  # (N, M)
        entropy = np.where(visible > 0, _entropy(weights), np.nan)
        normalized = np.where(chosen, entropy / log_visible, np.nan)
        max_weight = weights.max(axis=1)
        scores: dict[str, float | None] = {name: _target_score(weights, targets[name], chosen) for name in POSITIONAL}
        scores["uniform"] = _mean(normalized[chosen]) if chosen.any() else None
        scores["focused"] = _mean(max_weight[chosen]) if chosen.any() else None
        label, score = pick_label(scores)
        stats.append(
            HeadStats(
                head=h,
                visible_keys=visible,
                entropy=entropy,
                normalized_entropy=normalized,
                effective_keys=np.exp(entropy),
                max_weight=max_weight,
                top_key=np.where(visible > 0, weights.argmax(axis=1), -1),
                top_ties=np.where(visible > 0, row_maxima(weights).sum(axis=1), 0),
                scaled_std=float(spread.scaled_std[h]),
                mean_max_weight=float(spread.mean_max_weight[h]),
                scores=MappingProxyType(scores),
                label=label,
                label_score=score,
            )
        )
    return tuple(stats)
