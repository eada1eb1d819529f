"""Rows: the query rows a command shows, and an engine that computes the matrices of those rows alone."""

from __future__ import annotations

import numpy as np

from attnx.core.rows import Rows
from attnx.engines import compute
from attnx.io import load_spec
from tests.specs import loaded


class TestRowsComputed:
    """compute(..., rows=...) holds the matrices of some rows and says which."""

    def test_matrices_of_the_shown_rows_equal_the_whole(self) -> None:
        """Rows 0, 1 and 9 of 10 (causal): their weights and mask equal those rows of the whole result; output whole."""
        spec = loaded(seed=3, tokens=tuple("abcdefghij"), d_model=8, heads=2, causal=True)
        rows = Rows.ends(10, 3)
        assert rows.shown == (0, 1, 9) and rows.hidden == 7 and not rows.complete
        part, whole = compute(spec, rows=rows), compute(spec)
        assert part.matrix_rows == (0, 1, 9) and whole.matrix_rows is None
        np.testing.assert_array_equal(part.weights, whole.weights[:, [0, 1, 9]])
        np.testing.assert_array_equal(part.mask, whole.mask[[0, 1, 9]])
        np.testing.assert_allclose(part.output, whole.output, rtol=1e-13, atol=0)
        assert part.matrix_row(9) == 2 and whole.matrix_row(9) == 9

    def test_all_rows_is_one_computation(self) -> None:
        """Rows that leave nothing out change nothing: the result holds every row."""
        spec = load_spec()
        assert compute(spec, rows=Rows.ends(spec.n_queries, None)).matrix_rows is None
