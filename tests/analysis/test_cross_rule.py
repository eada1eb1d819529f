"""The cross rule: a cross-attention's heads scored by how they read the source (monotonicity, coverage, the weight on
the source's end token, entropy), on heads built to walk the source in order or to park on its end token."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.detect import Detector
from attnx.analysis.heads import head_stats, pick_label, whole_scores
from attnx.core.measures import CROSS
from attnx.core.spec import AttentionSpec
from attnx.engines import compute

TARGETS, SOURCES = 4, 5
END = SOURCES - 1  # the source's end token, its one special token here


def cross_spec() -> AttentionSpec:
    """Four target queries over five source keys, one-hot and 20 units above the rest: head 0 at source position i
    from target position i (in order), head 1 at the end token from every target position."""
    q = np.zeros((TARGETS, 2 * SOURCES))
    for i in range(TARGETS):
        q[i, i] = 20.0 * np.sqrt(SOURCES)
        q[i, SOURCES + END] = 20.0 * np.sqrt(SOURCES)
    k = np.hstack([np.eye(SOURCES)] * 2)
    source = (*(f"s{j}" for j in range(SOURCES - 1)), "</s>")
    return AttentionSpec.build(q=q, k=k, v=k, heads=2, tokens=tuple(f"t{i}" for i in range(TARGETS)),
                               key_tokens=source)  # fmt: skip


class TestWholeScores:
    def test_in_order_and_parked(self) -> None:
        """Monotonicity 1 and coverage 4/5 for the head in order; none (NaN) and 1/5 for the parked head."""
        weights = np.asarray(compute(cross_spec()).weights)
        monotonicity, coverage = whole_scores(weights, "monotonicity"), whole_scores(weights, "coverage")
        assert monotonicity[0, 0] == pytest.approx(1.0) and np.isnan(monotonicity[1, 0])
        assert coverage[:, 0].tolist() == [0.8, 0.2]

    def test_no_query(self) -> None:
        """No query: undefined, NaN for every head."""
        assert np.isnan(whole_scores(np.zeros((3, 0, 5)), "coverage")).all()


class TestHeadStats:
    def test_labels(self) -> None:
        """The head in order is `monotonic`; the parked head `end-sink` (its sinks: the source's end token); scores
        are keyed as the registry keys them, an undefined one None."""
        first, second = head_stats(compute(cross_spec()), (END,), CROSS)
        assert (first.label, second.label) == ("monotonic", "end-sink")
        assert first.scores["monotonic"] == pytest.approx(1.0) and second.scores["monotonic"] is None
        assert second.scores["end-sink"] == pytest.approx(1.0, abs=1e-6)
        assert first.scores["end-sink"] == pytest.approx(0.0, abs=1e-6) and first.scores["coverage"] == 0.8
        assert first.scores["uniform"] == pytest.approx(0.0, abs=1e-6)
        assert set(first.scores) == {"monotonic", "coverage", "end-sink", "uniform", "focused"}

    @pytest.mark.parametrize(
        ("scores", "label"),
        [({"monotonic": 0.9, "end-sink": 0.95}, "end-sink"), ({"monotonic": 0.9, "end-sink": 0.2}, "monotonic"),
         ({"monotonic": None, "end-sink": 0.1, "uniform": 0.97}, "uniform"),
         ({"monotonic": 0.5, "end-sink": 0.1, "uniform": 0.2, "focused": 0.9}, "focused"),
         ({"monotonic": 0.69, "end-sink": 0.49, "uniform": 0.9, "focused": 0.5}, None)],
    )  # fmt: skip
    def test_rule(self, scores: dict[str, float | None], label: str | None) -> None:
        """monotonic or end-sink, the higher reaching its threshold, else uniform, else focused, else none."""
        assert pick_label(scores, CROSS)[0] == label


class TestDetector:
    def test_pooled_over_sequences(self) -> None:
        """Over two sequences: monotonicity and coverage count one value a sequence, the per-position measures one a
        target position; the parked head's monotonicity has none (undefined) and no label from it."""
        detector = Detector(CROSS)
        for _ in range(2):
            detector.add(0, compute(cross_spec()), list(range(TARGETS)), (END,))
        found = detector.done(model="m", architecture="a", source="s", stack="decoder", kind="cross", stacks=2)
        in_order, parked = found.tallies[0]
        assert (in_order["monotonicity"].mean, in_order["monotonicity"].count) == (pytest.approx(1.0), 2)
        assert (parked["monotonicity"].mean, parked["monotonicity"].count) == (None, 0)
        assert in_order["coverage"].count == 2 and in_order["entropy"].count == 2 * TARGETS
        assert found.label(0, 0)[0] == "monotonic" and found.label(0, 1)[0] == "end-sink"
        assert found.label_count(0, 0) == 2 and found.label_count(0, 1) == 2 * TARGETS
