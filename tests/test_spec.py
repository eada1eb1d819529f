"""Tests for attnx.spec: the arrays a spec exposes and what it remembers about them."""

from __future__ import annotations

import numpy as np

from attnx.spec import AttentionSpec, Linear


def direct_spec(scale: float = 1.0) -> AttentionSpec:
    q = np.array([[1.0, -2.0], [0.5, 0.0]]) * scale
    k = np.array([[3.0, 1.0], [-7.0, 2.0]])
    return AttentionSpec(q, k, k.copy(), 1, ("a", "b"), ("c", "d"))


class TestNumberArrays:
    def test_direct(self) -> None:
        """A direct spec exposes q, k and v by name."""
        spec = direct_spec()
        assert list(spec.number_arrays()) == ["q", "k", "v"]
        np.testing.assert_array_equal(spec.number_arrays()["k"], spec.k)

    def test_projected(self) -> None:
        """A projected spec exposes x, every weight and every bias, named as in messages."""
        x = np.ones((2, 2))
        w = Linear(np.eye(2), np.array([0.5, -9.0]))
        spec = AttentionSpec(None, None, None, 1, ("a", "b"), ("a", "b"), x=x, w_q=w, w_k=Linear(np.eye(2)), w_v=w)
        assert sorted(spec.number_arrays()) == ["b_q", "b_v", "w_k", "w_q", "w_v", "x"]
        assert spec.magnitude == 9.0


class TestMagnitude:
    def test_largest_absolute_value(self) -> None:
        """The magnitude is the largest |value| of any array, negative ones included."""
        assert direct_spec().magnitude == 7.0
        assert direct_spec(scale=10.0).magnitude == 20.0

    def test_found_once(self) -> None:
        """The magnitude is remembered; a spec made from it with other heads finds its own."""
        spec = direct_spec()
        assert spec.magnitude == 7.0
        assert spec.__dict__["magnitude"] == 7.0
        assert "magnitude" not in spec.with_heads(2).__dict__
        assert spec.with_heads(2).magnitude == 7.0

    def test_nan_anywhere_is_kept(self) -> None:
        """A NaN in a later array is not lost behind a larger finite value: the magnitude is NaN."""
        spec = AttentionSpec(np.array([[9.0]]), np.array([[1.0]]), np.array([[np.nan]]), 1, ("a",), ("a",))
        assert np.isnan(spec.magnitude)


class TestMaskCensus:
    def test_causal(self) -> None:
        """4 causal tokens block the 6 pairs above the diagonal, in blocks of any size; no row is fully masked."""
        x = np.ones((4, 2))
        spec = AttentionSpec(x, x, x, 1, tuple("abcd"), tuple("abcd"), causal=True)
        assert spec.mask_census() == ((), 6) and spec.mask_census(block=3) == ((), 6)

    def test_fully_masked_rows_keep_their_positions(self) -> None:
        """A mask blocking all of rows 1 and 3 (of the rows selected): their original positions, and the count."""
        x = np.ones((4, 2))
        mask = np.array([[1, 1], [0, 0], [1, 0], [0, 0]], dtype=bool)
        spec = AttentionSpec(x, x[:2], x[:2], 1, tuple("abcd"), ("k", "l"), mask=mask)
        assert spec.mask_census(block=2) == ((1, 3), 5)
        assert spec.select_queries([3, 0]).mask_census() == ((3,), 2)

    def test_no_mask(self) -> None:
        """Without a mask nothing is blocked."""
        assert direct_spec().mask_census() == ((), 0)


class TestDtypes:
    def test_float32_stays_float32(self) -> None:
        """float32 arrays are kept as float32, others become float64; every array is a read-only copy."""
        q = np.arange(4, dtype=np.float32).reshape(2, 2)
        k = np.arange(4, dtype=np.int64).reshape(2, 2)
        w = Linear(np.eye(2, dtype=np.float32), np.zeros(2, dtype=np.float16))
        spec = AttentionSpec(q, k, k.astype(np.float64), 1, ("a", "b"), ("c", "d"), w_o=w)
        assert (spec.q.dtype, spec.k.dtype, spec.v.dtype) == (np.float32, np.float64, np.float64)
        assert (spec.w_o.weight.dtype, spec.w_o.bias.dtype) == (np.float32, np.float64)
        assert spec.q is not q and not spec.q.flags.writeable
