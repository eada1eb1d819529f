"""The NumPy parts of a transformer block besides attention: LayerNorm, erf and the GELUs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnx.models.nn import erf, gelu, gelu_tanh, layer_norm


class TestErf:
    def test_matches_math_erf_to_the_last_bits(self) -> None:
        """erf agrees with math.erf within 2.3e-16 from -9 to 9, tails and grid midpoints included."""
        x = np.concatenate([np.linspace(-9, 9, 100_001), np.arange(-200, 201) / 32 + 1 / 64, [0.0, 1e-300, -1e-8]])
        expected = np.array([math.erf(v) for v in x])
        assert np.abs(erf(x) - expected).max() <= 2.3e-16

    def test_odd_and_saturating(self) -> None:
        """erf(-x) = -erf(x) exactly, erf(0) = 0 and erf(±inf) = ±1."""
        x = np.array([0.3, 1.7, 4.2])
        np.testing.assert_array_equal(erf(-x), -erf(x))
        np.testing.assert_array_equal(erf(np.array([0.0, np.inf, -np.inf])), [0.0, 1.0, -1.0])


class TestActivations:
    def test_gelu_is_x_times_normal_cdf(self) -> None:
        """gelu(x) = x·Φ(x) with Φ from math.erf (to |x| times erf's last bit), and keeps float32 as float32."""
        x = np.linspace(-6, 6, 1001)
        expected = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
        np.testing.assert_allclose(gelu(x), expected, rtol=1e-15, atol=6 * 2.3e-16)
        assert gelu(x.astype(np.float32)).dtype == np.float32

    def test_gelu_tanh_known_value(self) -> None:
        """The tanh approximation at 1 is 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.8411920..."""
        assert gelu_tanh(np.array([1.0]))[0] == pytest.approx(0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * 1.044715)))
        assert gelu_tanh(np.array([1.0]))[0] == pytest.approx(0.841192, abs=1e-6)


class TestLayerNorm:
    def test_normalises_each_row(self) -> None:
        """Each row gets mean 0 and (biased) variance 1 before the affine map."""
        x = np.array([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 1.0, -1.0]])
        out = layer_norm(x, np.ones(4), np.zeros(4), eps=0.0)
        np.testing.assert_allclose(out.mean(axis=1), 0, atol=1e-15)
        np.testing.assert_allclose(out.var(axis=1), 1, rtol=1e-14)
        np.testing.assert_allclose(layer_norm(x, np.full(4, 2.0), np.full(4, 1.0), 0.0), 2 * out + 1)
