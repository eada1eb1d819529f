"""How each cross-attention head aligns: monotonicity (Spearman), coverage and entropy, on weights made to show them."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.alignment import head_alignments, spearman


class TestSpearman:
    def test_in_order_and_reversed(self) -> None:
        """A rank correlation of 1 for the same order, −1 for the reverse, and ties share their mean rank."""
        assert spearman(np.arange(5), np.arange(5)) == pytest.approx(1.0)
        assert spearman(np.arange(5), np.arange(5)[::-1]) == pytest.approx(-1.0)
        assert spearman(np.arange(4), np.array([0, 0, 1, 1])) == pytest.approx(np.sqrt(0.8))

    def test_constant_is_none(self) -> None:
        """A side that never moves has no correlation: None, not NaN."""
        assert spearman(np.arange(4), np.zeros(4)) is None


class TestHeadAlignments:
    def test_a_diagonal_head_and_a_sink(self) -> None:
        """A head on the diagonal is monotonic 1, covers every source token, and has entropy 0; a head that weighs
        one source token from every row has no monotonicity, covers one in four, and entropy 0 too."""
        diagonal = np.eye(4)
        sink = np.zeros((4, 4))
        sink[:, 3] = 1.0
        (first, second) = head_alignments([np.stack([diagonal, sink])])
        assert (first.layer, first.head, first.coverage, first.entropy) == (0, 0, 1.0, 0.0)
        assert first.monotonicity == pytest.approx(1.0)
        assert (second.head, second.monotonicity, second.coverage, second.entropy) == (1, None, 0.25, 0.0)

    def test_uniform_rows_have_entropy_one(self) -> None:
        """Uniform rows over S source tokens have entropy log S, 1 once divided by it."""
        (found,) = head_alignments([np.full((1, 3, 5), 0.2)])
        assert found.entropy == pytest.approx(1.0)
