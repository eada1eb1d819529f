"""Head detection over many token sequences: previous-token, duplicate-token and induction scores, sinks, entropy.

Scores are computed the way the literature does (Olsson et al., 2022; TransformerLens' head detector):
for each query position that has a target key, the weight the head puts on that key, then averaged
over every such position of every sequence (``mean``; ``count`` says how many positions it rests on).

- previous-token: the key just before the query (positions ≥ 1);
- duplicate-token: the latest earlier key holding the query's token;
- induction: the key right after that earlier occurrence. On a sequence of random tokens repeated, every
  query of the repeat has one, and an induction head puts its weight there.

Beside them, per head and text: the mean weight on the sinks (key 0 and special tokens) and the mean
normalised entropy (entropy ÷ log of the visible keys). ``spread`` is the standard deviation of the
per-sequence means: how much a head's score moves from text to text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from attnx.analysis.heads import visible_keys
from attnx.core.result import AttentionResult

if TYPE_CHECKING:  # pragma: no cover
    from attnx.models import Model
    from attnx.models.tokenize import Encoded

DETECTORS = ("previous-token", "duplicate-token", "induction")
MEASURES = (*DETECTORS, "sink", "entropy")
# A head is labelled with the detector of highest mean score that reaches its threshold, else `sink`.
THRESHOLDS = MappingProxyType({"previous-token": 0.5, "duplicate-token": 0.5, "induction": 0.5, "sink": 0.5})


def detection_targets(ids: Sequence[int]) -> dict[str, np.ndarray]:
    """Per detector, the key each query position is scored on (-1: none), from the sequence's token ids."""
    n = len(ids)
    previous = np.arange(n) - 1
    duplicate = np.full(n, -1)
    last: dict[int, int] = {}
    for i, token in enumerate(ids):
        duplicate[i] = last.get(int(token), -1)
        last[int(token)] = i
    induction = np.where(duplicate >= 0, duplicate + 1, -1)
    return {"previous-token": previous, "duplicate-token": duplicate, "induction": induction}


@dataclass
class Tally:
    """One head's running sums for one measure: the pooled sum and count, and each sequence's mean."""

    total: float = 0.0
    count: int = 0
    per_text: list[float] = field(default_factory=list)

    def add(self, values: np.ndarray) -> None:
        """The measure at each scored position of one sequence (none: the sequence adds nothing)."""
        if values.size:
            self.total += float(values.sum())
            self.count += int(values.size)
            self.per_text.append(float(values.mean()))

    @property
    def mean(self) -> float | None:
        """The mean over every scored position of every sequence (None: no position had a target)."""
        return self.total / self.count if self.count else None

    @property
    def spread(self) -> float | None:
        """The standard deviation of the per-sequence means (None with fewer than two sequences scored)."""
        return float(np.std(self.per_text)) if len(self.per_text) >= 2 else None


def text_scores(result: AttentionResult, ids: Sequence[int], sinks: Sequence[int] = (0,)) -> dict[str, np.ndarray]:
    """Per measure, ``[head, position]`` of one layer on one sequence: the target's weight at each scored
    position (detectors), the weight on the sinks and the normalised entropy at each query with a choice."""
    assert result.weights is not None  # computed with the weights
    weights = np.asarray(result.weights, dtype=np.float64)  # (H, N, M)
    allowed = visible_keys(result)
    visible = allowed.sum(axis=1)
    chosen = visible >= 2
    out: dict[str, np.ndarray] = {}
    for name, targets in detection_targets(ids).items():
        rows = np.flatnonzero(chosen & (targets >= 0) & (targets < weights.shape[2]))
        out[name] = weights[:, rows, targets[rows]]  # (H, scored)
    keys = [k for k in sorted(set(sinks)) if k < weights.shape[2]]
    out["sink"] = weights[:, chosen][:, :, keys].sum(axis=2)  # (H, chosen)
    safe = np.where(weights > 0, weights, 1.0)
    entropy = -(weights * np.log(safe)).sum(axis=2)  # (H, N)
    out["entropy"] = entropy[:, chosen] / np.log(visible[chosen])
    return out


@dataclass(frozen=True, eq=False)
class Detection:
    """Every layer's heads over many sequences: ``tallies[l][h][measure]`` (layers and heads from 0)."""

    model: str
    architecture: str
    source: str  # what the sequences were: "8 random sequences of 20 tokens, repeated" or the texts' file
    sequences: int
    tokens: int  # in all the sequences together
    tallies: tuple[tuple[dict[str, Tally], ...], ...]

    @property
    def layers(self) -> int:
        """Number of layers."""
        return len(self.tallies)

    @property
    def heads(self) -> int:
        """Heads per layer."""
        return len(self.tallies[0]) if self.tallies else 0

    def label(self, layer: int, head: int) -> tuple[str | None, float | None]:
        """The head's label and its mean score: the best detector reaching its threshold, else ``sink``."""
        tally = self.tallies[layer][head]
        passing = {name: m for name in DETECTORS if (m := tally[name].mean) is not None and m >= THRESHOLDS[name]}
        if passing:
            best = max(passing, key=lambda name: passing[name])
            return best, passing[best]
        sink = tally["sink"].mean
        if sink is not None and sink >= THRESHOLDS["sink"]:
            return "sink", sink
        return None, None

    def grid(self, measure: str) -> np.ndarray:
        """``[layer, head]`` of ``measure``'s mean (NaN where no position was scored)."""
        return np.array(
            [[np.nan if (m := t[measure].mean) is None else m for t in layer] for layer in self.tallies]
        ).reshape(self.layers, self.heads)


@dataclass(frozen=True)
class TextRecord:
    """One sequence's own scores: ``layers[l][h][measure]`` means over its positions (None: none scored)."""

    index: int  # from 0, in the order the texts were given
    tokens: tuple[str, ...]
    layers: list[list[dict[str, float | None]]]


class Detector:
    """Collects ``text_scores`` of each layer of each sequence into a ``Detection``."""

    def __init__(self) -> None:
        self.tallies: list[list[dict[str, Tally]]] = []
        self.sequences = 0
        self.tokens = 0

    def add(self, results: Iterable[AttentionResult], ids: Sequence[int], sinks: Sequence[int] = (0,)) -> list[
        list[dict[str, float | None]]
    ]:  # fmt: skip
        """One sequence's layers, in order; returns its own per layer and head means (for JSONL)."""
        mine: list[list[dict[str, float | None]]] = []
        for layer, result in enumerate(results):
            scores = text_scores(result, ids, sinks)
            if layer == len(self.tallies):
                self.tallies.append([{name: Tally() for name in MEASURES} for _ in range(result.heads)])
            row = []
            for h, tallies in enumerate(self.tallies[layer]):
                for name in MEASURES:
                    tallies[name].add(scores[name][h])
                row.append({name: float(s[h].mean()) if s.shape[1] else None for name, s in scores.items()})
            mine.append(row)
        self.sequences += 1
        self.tokens += len(ids)
        return mine

    def done(self, *, model: str, architecture: str, source: str) -> Detection:
        """The detection over every sequence added."""
        frozen = tuple(tuple(layer) for layer in self.tallies)
        return Detection(model, architecture, source, self.sequences, self.tokens, frozen)


def detect_heads(
    model: Model,
    sequences: Iterable[Encoded],
    *,
    count: int,
    source: str,
    engine: str = "numpy",
    device: str = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Every layer's heads of ``model`` over ``sequences`` (``count`` of them, for the progress), each run once
    through every layer; with each sequence's own record. Sinks: key 0 and each sequence's special tokens."""
    detector, records = Detector(), []
    for index, encoded in enumerate(sequences):
        forward = model.run(encoded, engine=engine, device=device, layer=model.layers - 1)
        results = (forward.step(("weights", "mask")) for _ in range(model.layers))
        own = detector.add(results, [int(i) for i in encoded.ids], (0, *forward.special_keys))
        records.append(TextRecord(index, encoded.tokens, own))
        if progress is not None:
            progress(index + 1, count)
    return detector.done(model=model.checkpoint.name, architecture=model.architecture.name, source=source), records
