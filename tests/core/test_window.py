"""Sliding windows: each query sees itself and the window − 1 keys before it, in every engine and path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(11)


def problem(n: int, heads: int, d_k: int, **settings: Any) -> AttentionSpec:
    """Random Q, K and V of ``n`` tokens, ``heads`` heads of width ``d_k``."""
    q, k, v = RNG.standard_normal((3, n, heads * d_k))
    tokens = tuple(f"t{i}" for i in range(n))
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=tokens, **settings)


class TestWindow:
    """A window is a mask any input can use: i − W < j ≤ i."""

    def test_allowed_keys_and_weights(self) -> None:
        """Window 3 on 6 tokens allows exactly i − 3 < j ≤ i, and computes as that explicit mask does."""
        windowed = problem(6, 2, 4, window=3)
        i, j = np.indices((6, 6))
        expected = (j <= i) & (j > i - 3)
        np.testing.assert_array_equal(windowed.allowed(), expected)
        explicit = AttentionSpec.build(q=windowed.inputs.q, k=windowed.inputs.k, v=windowed.inputs.v, heads=2,
                                       tokens=windowed.tokens, key_tokens=windowed.key_tokens, mask=expected)  # fmt: skip
        np.testing.assert_array_equal(compute(windowed).weights, compute(explicit).weights)
        assert compute(windowed).settings.window == 3 and compute(windowed).blocked_pairs == 36 - 15

    def test_a_window_as_long_as_the_input_is_causal(self) -> None:
        """A window of N keys or more blocks only what the causal mask blocks."""
        spec = problem(5, 1, 4, window=5)
        np.testing.assert_array_equal(spec.allowed(), np.tril(np.ones((5, 5), dtype=bool)))

    def test_a_selected_row_keeps_its_window(self) -> None:
        """Query 4 computed alone sees keys 3 and 4, as in the whole problem."""
        spec = problem(6, 2, 4, window=2)
        row = compute(spec.select_queries([4])).weights[:, 0]
        np.testing.assert_allclose(row, compute(spec).weights[:, 4], rtol=1e-13, atol=1e-15)
        assert np.count_nonzero(row[0]) == 2

    def test_tiled_output_and_torch(self) -> None:
        """600 tokens × 4 heads take the tiled output path; with a window of 50 it equals the one-piece path, and torch."""
        spec = problem(600, 4, 16, window=50)
        whole = compute(spec)
        np.testing.assert_allclose(compute(spec, needs={"output"}).output, whole.output, rtol=1e-10, atol=1e-12)
        pytest.importorskip("torch")
        np.testing.assert_allclose(compute(spec, "torch", device="cpu").output, whole.output, rtol=1e-10, atol=1e-12)

    @pytest.mark.parametrize("window", [0, -2, True, 2.5])
    def test_refused(self, window: object) -> None:
        """A window that is not a positive whole number is a ConfigError."""
        with pytest.raises(ConfigError, match=r"^<input>: window must be a positive whole number of keys"):
            problem(3, 1, 2, window=window)
