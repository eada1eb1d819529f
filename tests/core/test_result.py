"""AttentionResult: row maxima with ties, columns, and tensors by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnx.core.result import TIE_ULPS, row_maxima
from attnx.core.tensors import OUTPUT, PROJECTED, WEIGHTS
from attnx.engines import compute
from attnx.errors import AttnxError, NotComputedError
from attnx.io import load_spec

GQA = str(Path(__file__).parents[2] / "configs" / "gqa.yaml")


class TestRowMaxima:
    """Which cells are their row's maximum, ties included: what tables highlight."""

    def test_uniform_row_of_the_worked_example(self) -> None:
        """Head 0, "on": five weights of 0.2, all marked; "sat" marks its one maximum, "The" its three."""
        weights = compute(load_spec()).weights[0]
        top = row_maxima(weights)
        assert top[3].tolist() == [True] * 5
        assert top[2].tolist() == [False, False, True, False, False]
        assert top[0].tolist() == [False, True, True, False, True]

    def test_a_few_ulps_apart_tie(self) -> None:
        """Values within TIE_ULPS units in the last place of the max tie; twice as far apart do not."""
        top = 0.25
        ulp = np.finfo(np.float64).eps * top
        row = np.array([top, top - TIE_ULPS * ulp, top - 2 * TIE_ULPS * ulp])
        assert row_maxima(row).tolist() == [True, True, False]

    def test_equal_when_shown_is_not_a_tie(self) -> None:
        """0.25091 and 0.25089 both read 0.2509 at four decimals but are not tied."""
        assert row_maxima(np.array([0.25089, 0.25091])).tolist() == [False, True]

    def test_float32_uses_its_own_epsilon(self) -> None:
        """In float32 one ulp of 0.25 (1.5e-8) is within the tie; 1e-6 below the max is not."""
        row = np.array([0.25, np.nextafter(np.float32(0.25), np.float32(0)), 0.25 - 1e-6], dtype=np.float32)
        assert row_maxima(row).tolist() == [True, True, False]

    @pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [np.nan, 0.5, 0.5]])
    def test_rows_without_a_maximum(self, row: list[float]) -> None:
        """A row of zeros (every key masked) or with NaN marks nothing."""
        assert not row_maxima(np.array([row])).any()


class TestColumns:
    """The columns each head and each K/V head owns."""

    def test_kv_columns_and_groups(self) -> None:
        """gqa.yaml: 4 heads on 2 K/V heads of d_k 2: K/V head 1 owns K's columns 2-3 and serves heads 2-3."""
        result = compute(load_spec(GQA))
        assert (result.heads, result.kv_heads, result.d_k) == (4, 2, 2)
        assert result.kv_columns(1) == range(2, 4) and result.group_of(1) == range(2, 4)
        assert [result.kv_head(h) for h in range(4)] == [0, 0, 1, 1]
        np.testing.assert_array_equal(result.k[1], load_spec(GQA).inputs.k[:, 2:4])


class TestTensor:
    """``AttentionResult.tensor``: an array by its registry name, or a domain error for one not computed."""

    def test_returns_the_array(self) -> None:
        """The worked example's weights are the result's own array."""
        result = compute(load_spec())
        assert result.tensor(WEIGHTS) is result.weights

    def test_left_out_by_needs(self) -> None:
        """An array ``needs`` left out is a NotComputedError (an AttnxError) that says so."""
        result = compute(load_spec(), needs={OUTPUT})
        with pytest.raises(
            NotComputedError,
            match=r"^this result was computed without weights \(compute\(\.\.\., "
            r"needs=\.\.\.\) left it out\)$",
        ):
            result.tensor(WEIGHTS)
        assert issubclass(NotComputedError, AttnxError)

    def test_absent_from_the_input(self) -> None:
        """An array the input gives no way to compute says when a result holds it."""
        with pytest.raises(
            NotComputedError,
            match=r"without projected \(a result holds it when the input has w_o, unless compute\(\.\.\., needs=\.\.\.\) left",
        ):
            compute(load_spec()).tensor(PROJECTED)
