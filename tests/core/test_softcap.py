"""Soft-capped scores: cap · tanh(s / cap) on the scaled scores, before the mask, in every engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(5)


def problem(n: int, heads: int, d_k: int, **settings: Any) -> AttentionSpec:
    """Random Q, K and V (scaled up, so the cap bends the scores) of ``n`` tokens."""
    q, k, v = RNG.standard_normal((3, n, heads * d_k)) * 3.0
    tokens = tuple(f"t{i}" for i in range(n))
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=tokens, **settings)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, -inf for blocked keys."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class TestSoftcap:
    """The cap bends the scaled scores as Gemma 2 does, before the mask."""

    def test_scaled_scores_and_weights(self) -> None:
        """scaled = 5·tanh(scores·s / 5), causal blocks after the cap, and the weights are its softmax."""
        spec = problem(6, 2, 4, softcap=5.0, causal=True)
        result = compute(spec)
        expected = 5.0 * np.tanh(result.scores * spec.multiplier / 5.0)
        np.testing.assert_allclose(result.scaled, expected, rtol=1e-14, atol=1e-14)
        blocked = np.where(np.tril(np.ones((6, 6), dtype=bool)), expected, -np.inf)
        np.testing.assert_allclose(result.weights, softmax(blocked), rtol=1e-12, atol=1e-15)
        assert np.abs(result.scaled).max() < 5.0 < np.abs(result.scores * spec.multiplier).max()
        assert result.settings.softcap == 5.0

    def test_long_inputs_and_torch(self) -> None:
        """600 tokens × 4 heads with a cap: NumPy's output path and torch's equal the one-piece result."""
        spec = problem(600, 4, 16, softcap=2.0, window=100)
        whole = compute(spec)
        np.testing.assert_allclose(compute(spec, needs={"output"}).output, whole.output, rtol=1e-10, atol=1e-12)
        pytest.importorskip("torch")
        np.testing.assert_allclose(compute(spec, "torch", device="cpu").output, whole.output, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(
            compute(spec, "torch", device="cpu", needs={"output"}).output, whole.output, rtol=1e-10, atol=1e-12
        )

    @pytest.mark.parametrize("cap", [0.0, -1.0, float("inf"), True])
    def test_refused(self, cap: object) -> None:
        """A cap that is not a positive finite number is a ConfigError."""
        with pytest.raises(ConfigError, match=r"^<input>: softcap must be a positive finite number"):
            problem(3, 1, 2, softcap=cap)
