"""Tests for attnx.core.spec: the arrays a spec exposes and what it remembers about them."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec, Linear, pool_heads
from attnx.errors import ConfigError
from tests.specs import spec_of


def direct_spec(scale: float = 1.0) -> AttentionSpec:
    q = np.array([[1.0, -2.0], [0.5, 0.0]]) * scale
    k = np.array([[3.0, 1.0], [-7.0, 2.0]])
    return spec_of(q, k, k.copy(), 1, ("a", "b"), ("c", "d"))


class TestNumberArrays:
    def test_direct(self) -> None:
        """A direct spec exposes q, k and v by name."""
        spec = direct_spec()
        assert list(spec.number_arrays()) == ["q", "k", "v"]
        np.testing.assert_array_equal(spec.number_arrays()["k"], spec.inputs.k)

    def test_projected(self) -> None:
        """A projected spec exposes x, every weight and every bias, named as in messages."""
        x = np.ones((2, 2))
        w = Linear.of(np.eye(2), np.array([0.5, -9.0]))
        spec = spec_of(None, None, None, 1, ("a", "b"), ("a", "b"), x=x, w_q=w, w_k=Linear.of(np.eye(2)), w_v=w)
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
        spec = spec_of(np.array([[9.0]]), np.array([[1.0]]), np.array([[np.nan]]), 1, ("a",), ("a",))
        assert np.isnan(spec.magnitude)


class TestMaskCensus:
    def test_causal(self) -> None:
        """4 causal tokens block the 6 pairs above the diagonal, in blocks of any size; no row is fully masked."""
        x = np.ones((4, 2))
        spec = spec_of(x, x, x, 1, tuple("abcd"), tuple("abcd"), causal=True)
        assert spec.mask_census() == ((), 6) and spec.mask_census(block=3) == ((), 6)

    def test_fully_masked_rows_keep_their_positions(self) -> None:
        """A mask blocking all of rows 1 and 3 (of the rows selected): their original positions, and the count."""
        x = np.ones((4, 2))
        mask = np.array([[1, 1], [0, 0], [1, 0], [0, 0]], dtype=bool)
        spec = spec_of(x, x[:2], x[:2], 1, tuple("abcd"), ("k", "l"), mask=mask)
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
        w = Linear.of(np.eye(2, dtype=np.float32), np.zeros(2, dtype=np.float16))
        spec = spec_of(q, k, k.astype(np.float64), 1, ("a", "b"), ("c", "d"), w_o=w)
        assert (spec.inputs.q.dtype, spec.inputs.k.dtype, spec.inputs.v.dtype) == (np.float32, np.float64, np.float64)
        assert (spec.w_o.weight.dtype, spec.w_o.bias.dtype) == (np.float32, np.float64)
        assert spec.inputs.q is not q and not spec.inputs.q.flags.writeable


ROW = np.arange(8.0)  # 4 heads of d_k 2


class TestPoolHeads:
    """pool_heads averages whole heads, found by the layout, into fewer heads."""

    def test_contiguous(self) -> None:
        """4 → 2: heads [0 1] [2 3] [4 5] [6 7] become [1 2] [5 6]."""
        np.testing.assert_array_equal(pool_heads(ROW, 4, 2), [1, 2, 5, 6])

    def test_interleaved(self) -> None:
        """4 → 2 interleaved: head h is columns (h, h + 4); the pooled heads 0 and 1 are columns (0, 2) and (1, 3)."""
        np.testing.assert_array_equal(pool_heads(ROW, 4, 2, "interleaved"), [0.5, 2.5, 4.5, 6.5])

    def test_leading_axes_kept(self) -> None:
        """A [rows, columns] weight pools each row; 4 → 1 averages every head."""
        weight = np.stack([ROW, 10 * ROW])
        np.testing.assert_array_equal(pool_heads(weight, 4, 1), [[3, 4], [30, 40]])

    def test_same_count_is_identity(self) -> None:
        """Pooling 4 heads into 4 leaves every column where it was."""
        np.testing.assert_array_equal(pool_heads(ROW, 4, 4, "interleaved"), ROW)


def mha_spec(layout: str = "contiguous") -> AttentionSpec:
    """Four heads of d_k 2 over three tokens, K and V of four heads, drawn from seed 1."""
    q, k, v = np.random.default_rng(1).standard_normal((3, 3, 8))
    return spec_of(q, k, v, 4, ("a", "b", "c"), ("a", "b", "c"), layout=layout)


class TestWithKvHeads:
    """with_kv_heads makes GQA/MQA from multi-head attention by mean-pooling K/V heads (Ainslie et al., 2023)."""

    @pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
    def test_computes_as_the_pooled_inputs_do(self, layout: str) -> None:
        """The pooled spec's weights equal those of a GQA spec given the hand-pooled K and V."""
        from attnx.engines import compute

        spec = mha_spec(layout)
        pooled = spec.with_kv_heads(2)
        k = np.array(spec.inputs.k)
        by_head = k.reshape(3, 4, 2) if layout == "contiguous" else k.reshape(3, 2, 4).transpose(0, 2, 1)  # (N, H, d_k)
        means = (by_head[:, 0::2] + by_head[:, 1::2]) / 2  # heads (0, 1) and (2, 3): (N, 2, d_k)
        hand_k = means.reshape(3, 4) if layout == "contiguous" else means.transpose(0, 2, 1).reshape(3, 4)
        np.testing.assert_allclose(pooled.inputs.k, hand_k, rtol=0, atol=1e-15)
        grouped = spec_of(
            spec.inputs.q, hand_k, pooled.inputs.v, 4, spec.tokens, spec.key_tokens, kv_heads=2, layout=layout
        )
        np.testing.assert_allclose(compute(pooled).weights, compute(grouped).weights, rtol=0, atol=1e-15)
        assert compute(pooled).kv_pooled_from == 4

    def test_chained_pooling_remembers_the_first_count(self) -> None:
        """4 → 2 → 1 says pooled from 4, and equals 4 → 1."""
        spec = mha_spec()
        twice, once = spec.with_kv_heads(2).with_kv_heads(1), spec.with_kv_heads(1)
        assert (twice.settings.kv_heads, twice.kv_pooled_from) == (1, 4)
        np.testing.assert_allclose(twice.inputs.k, once.inputs.k, rtol=0, atol=1e-15)

    def test_same_count_returns_the_spec(self) -> None:
        """Asking for the K/V heads the spec has changes nothing."""
        spec = mha_spec()
        assert spec.with_kv_heads(4) is spec and spec.kv_pooled_from is None

    @pytest.mark.parametrize(
        ("kv_heads", "message"),
        [
            (8, "s: the input has 4 K/V heads, fewer than 8 (pooling only merges heads); kv_heads that work: 1, 2, 4"),
            (3, "s: the input's 4 K/V heads do not pool evenly into 3; kv_heads that work: 1, 2, 4"),
            (0, "s: the input's 4 K/V heads do not pool evenly into 0; kv_heads that work: 1, 2, 4"),
        ],
    )
    def test_refused_counts(self, kv_heads: int, message: str) -> None:
        """More heads than there are, a count that does not divide them, or none: the valid choices are named."""
        spec = spec_of(np.ones((1, 8)), np.ones((1, 8)), np.ones((1, 8)), 4, ("a",), ("a",), source="s")
        with pytest.raises(ConfigError) as info:
            spec.with_kv_heads(kv_heads)
        assert str(info.value) == message

    def test_kv_pooled_from_is_checked(self) -> None:
        """kv_pooled_from must be a larger multiple of kv_heads."""
        with pytest.raises(
            ConfigError, match=r"kv_pooled_from must be a multiple of kv_heads 4 larger than it, got 2$"
        ):
            spec_of(np.ones((1, 8)), np.ones((1, 8)), np.ones((1, 8)), 4, ("a",), ("a",), kv_pooled_from=2)


class TestDroppedHeads:
    """Dropped heads count from 0, as every table and the JSON do."""

    def test_out_of_range(self) -> None:
        """Dropping head 4 of four is refused with the range 0..3."""
        with pytest.raises(ConfigError, match=r"^s: cannot drop head 4: heads are numbered 0\.\.3 \(or -4\.\.-1\)$"):
            spec_of(
                np.ones((1, 8)), np.ones((1, 8)), np.ones((1, 8)), 4, ("a",), ("a",), source="s", dropped_heads=(4,)
            )

    def test_kept_sorted_and_unique(self) -> None:
        """Heads 3, 0, 3 are kept as (0, 3)."""
        spec = spec_of(np.ones((1, 8)), np.ones((1, 8)), np.ones((1, 8)), 4, ("a",), ("a",), dropped_heads=(3, 0, 3))
        assert spec.settings.dropped_heads == (0, 3)
