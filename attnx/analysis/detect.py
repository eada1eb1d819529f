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

A decoder's cross-attention is scored by the CROSS rule instead (its keys are the source: the positional
detectors mean nothing there): monotonicity and coverage, one value per sequence (``attnx align``'s), the
weight on the source's special tokens and the entropy at each target position, and the max weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnx.analysis.heads import query_scores, target_keys
from attnx.core.measures import DETECT, WHOLE, Rule, by_label
from attnx.core.result import AttentionResult

# The detectors, the measures and the label rule live in the measure registry (rule DETECT): a head is
# labelled with the detector of highest mean score that reaches its threshold, else `sink`.
DETECTORS = DETECT.tiers[0]
MEASURES = DETECT.measures


def detection_targets(ids: Sequence[int]) -> dict[str, np.ndarray]:
    """Per detector, the key each query position is scored on (-1: none), from the sequence's token ids."""
    targets = target_keys(ids, ids, range(len(ids)))
    return {name: targets[name] for name in DETECTORS}


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
    scored = query_scores(result, MEASURES, sinks=sinks, ids=ids).scored
    return {name: scored[name].values for name in MEASURES}


@dataclass(frozen=True, eq=False)
class Detection:
    """Every layer's heads over many sequences: ``tallies[l][h][measure]`` (layers and heads from 0), scored and
    labelled by ``rule`` (DETECT; CROSS for a cross-attention); ``stack`` and ``kind`` say which attention of the
    model (``AttentionKind``'s value: ``self``, ``causal self``, ``cross``), ``stacks`` how many stacks it has."""

    model: str
    architecture: str
    source: str  # what the sequences were: "8 random sequences of 20 tokens, repeated" or the texts' file
    sequences: int
    tokens: int  # in all the sequences together (a decoder's: the tokens it read)
    tallies: tuple[tuple[dict[str, Tally], ...], ...]
    rule: Rule = DETECT
    stack: str = ""
    kind: str = ""
    stacks: int = 1

    @property
    def layers(self) -> int:
        """Number of layers."""
        return len(self.tallies)

    @property
    def heads(self) -> int:
        """Heads per layer."""
        return len(self.tallies[0]) if self.tallies else 0

    def label(self, layer: int, head: int) -> tuple[str | None, float | None]:
        """The head's label and its mean score, by the rule (DETECT: the best detector reaching its threshold, else
        ``sink``)."""
        tally = self.tallies[layer][head]
        found, score = self.rule.pick(lambda m: tally[m.name].mean)
        return (None, None) if found is None else (found.label, score)

    def label_tally(self, layer: int, head: int) -> Tally | None:
        """The tally of the measure that gives the head its label (None without a label)."""
        label, _ = self.label(layer, head)
        return None if label is None else self.tallies[layer][head][by_label(label).name]

    def label_count(self, layer: int, head: int) -> int | None:
        """How many positions the head's label rests on (None without a label; a whole-sequence measure's: the
        sequences)."""
        tally = self.label_tally(layer, head)
        return None if tally is None else tally.count

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
    """Collects the scores of ``rule``'s measures of each layer of each sequence into a ``Detection``."""

    def __init__(self, rule: Rule = DETECT) -> None:
        self.rule = rule
        self.measures = rule.measures
        self.tallies: list[list[dict[str, Tally]]] = []
        self.sequences = 0
        self.tokens = 0

    def add(self, layer: int, result: AttentionResult, ids: Sequence[int], sinks: Sequence[int] = (0,)) -> list[
        dict[str, float | None]
    ]:  # fmt: skip
        """Layer ``layer`` of one sequence (the layers of each sequence come in order, from 0; the sequences in the
        same order at every layer); returns its own per-head means (for JSONL). A sequence counts once its layer 0
        is added."""
        scored = query_scores(result, self.measures, sinks=sinks, ids=ids).scored
        if layer == len(self.tallies):
            self.tallies.append([{name: Tally() for name in self.measures} for _ in range(result.heads)])
        if layer == 0:
            self.sequences += 1
            self.tokens += len(ids)
        row = []
        for h, tallies in enumerate(self.tallies[layer]):
            for name in self.measures:
                values = scored[name].values[h]
                tallies[name].add(values[~np.isnan(values)] if name in WHOLE else values)  # NaN: undefined there
            row.append({name: scored[name].mean(h) for name in self.measures})
        return row

    def done(self, *, model: str, architecture: str, source: str, stack: str = "", kind: str = "",
             stacks: int = 1) -> Detection:  # fmt: skip
        """The detection over every sequence added (``stack``, ``kind``, ``stacks``: as ``Detection``'s)."""
        frozen = tuple(tuple(layer) for layer in self.tallies)
        return Detection(model, architecture, source, self.sequences, self.tokens, frozen, self.rule, stack, kind,
                         stacks)  # fmt: skip
