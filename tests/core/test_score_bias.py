"""The spec's score bias: its shape checked against heads, queries and keys, and carried by every copy of a spec."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError, NumericError

RNG = np.random.default_rng(48)


def spec_with(
    bias: np.ndarray | None, n: int = 3, m: int = 4, heads: int = 2, kv_heads: int | None = None, **settings: object
) -> AttentionSpec:
    """Q of ``n`` rows, K and V of ``m``, 2 columns per head, and ``bias``."""
    q = RNG.standard_normal((n, heads * 2))
    k, v = RNG.standard_normal((2, m, (kv_heads or heads) * 2))
    return AttentionSpec.build(
        q=q, k=k, v=v, heads=heads, tokens=[f"q{i}" for i in range(n)], key_tokens=[f"k{j}" for j in range(m)],
        kv_heads=kv_heads, score_bias=bias, **settings,
    )  # fmt: skip


class TestShape:
    """A bias is heads × queries × keys, finite, or refused."""

    def test_wrong_shape_names_the_expected_one(self) -> None:
        """A bias of keys × queries is a ConfigError that says the shape expected."""
        with pytest.raises(
            ConfigError, match=r"score_bias must be 2 × 3 × 4 \(heads × queries × keys\), got 2 × 4 × 3"
        ):
            spec_with(np.zeros((2, 4, 3)))

    def test_one_per_query_head_with_gqa(self) -> None:
        """With 4 query heads on 2 K/V heads the bias has 4 heads; 2 is refused."""
        assert spec_with(np.zeros((4, 3, 4)), heads=4, kv_heads=2).score_bias.shape == (4, 3, 4)
        with pytest.raises(ConfigError, match="must be 4 × 3 × 4"):
            spec_with(np.zeros((2, 3, 4)), heads=4, kv_heads=2)

    def test_not_finite_is_refused(self) -> None:
        """-inf is no bias (masks say what is blocked): a ConfigError."""
        bias = np.zeros((2, 3, 4))
        bias[0, 0, 0] = -np.inf
        with pytest.raises(ConfigError, match="score_bias must hold finite numbers"):
            spec_with(bias)

    def test_read_only_float(self) -> None:
        """Integers become a read-only float64 copy; a read-only float array is kept as it is."""
        spec = spec_with(np.ones((2, 3, 4), dtype=int))
        assert spec.score_bias.dtype == np.float64 and not spec.score_bias.flags.writeable
        assert spec_with(spec.score_bias).score_bias is spec.score_bias


class TestCarried:
    """Every copy of a spec keeps the bias; the one that changes the head count checks it again."""

    def test_settings_and_kv_pooling_keep_it(self) -> None:
        """with_settings and with_kv_heads keep the same bias; the bias makes the spec dense-only."""
        spec = spec_with(RNG.standard_normal((2, 3, 4)))
        assert spec.dense_only and not spec_with(None).dense_only
        assert spec.with_settings(causal=True).score_bias is spec.score_bias
        assert spec.with_kv_heads(1).score_bias is spec.score_bias

    def test_other_head_count_is_refused(self) -> None:
        """with_heads(1) leaves a bias of 2 heads over 1: a ConfigError naming the shape."""
        with pytest.raises(ConfigError, match="must be 1 × 3 × 4"):
            spec_with(np.zeros((2, 3, 4))).with_heads(1)

    def test_select_queries_slices_rows(self) -> None:
        """Selected rows keep their rows of the bias, in the order chosen."""
        bias = np.arange(24.0).reshape(2, 3, 4)
        chosen = spec_with(bias).select_queries([2, 0])
        np.testing.assert_array_equal(chosen.score_bias, bias[:, [2, 0]])
        assert not chosen.score_bias.flags.writeable

    def test_result_carries_it(self) -> None:
        """The result holds the spec's bias, and scaled = scale · scores + bias."""
        spec = spec_with(RNG.standard_normal((2, 3, 4)))
        result = compute(spec)
        assert result.score_bias is spec.score_bias
        np.testing.assert_allclose(result.scaled, result.scores * spec.multiplier + spec.score_bias, rtol=1e-15)


class TestNumbers:
    """The bias is one of the input's arrays of numbers: the magnitude and the dtype's range read it."""

    def test_number_arrays_and_magnitude(self) -> None:
        """number_arrays names it, and its largest value counts in the magnitude."""
        bias = np.zeros((2, 3, 4))
        bias[1, 2, 3] = -1e6
        spec = spec_with(bias)
        assert list(spec.number_arrays()) == ["q", "k", "v", "score_bias"]
        assert spec.magnitude == 1e6

    def test_beyond_float32_is_refused(self) -> None:
        """A bias beyond float32's range is refused in float32, as any input is, saying where."""
        bias = np.zeros((2, 3, 4))
        bias[0, 1, 2] = 1e39
        with pytest.raises(NumericError, match=r"score_bias\[0\]\[1\]\[2\] = 1e\+39 is beyond the largest float32"):
            compute(spec_with(bias), dtype="float32")
