"""Learned sinks: one logit per head that joins each row's softmax as a key without a value, in every engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(7)
SINKS = (1.5, -0.5)


def problem(n: int, heads: int, d_k: int, **settings: Any) -> AttentionSpec:
    """Random Q, K and V of ``n`` tokens, with a sink logit per head (SINKS, or ``sink_logits``)."""
    q, k, v = RNG.standard_normal((3, n, heads * d_k))
    tokens = tuple(f"t{i}" for i in range(n))
    settings = {"sink_logits": SINKS[:heads], **settings}
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=tokens, **settings)


def with_sink(scaled: np.ndarray, allowed: np.ndarray, sinks: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The reference: the softmax of each row's allowed scaled scores beside its head's sink logit, written out."""
    h, n, m = scaled.shape
    logits = np.concatenate([np.where(allowed, scaled, -np.inf), np.broadcast_to(np.array(sinks)[:, None, None],
                                                                                 (h, n, 1))], axis=2)  # fmt: skip
    e = np.exp(logits - logits.max(axis=2, keepdims=True))
    p = e / e.sum(axis=2, keepdims=True)
    return p[..., :m], p[..., m]


class TestSinks:
    def test_weights_and_shares(self) -> None:
        """The weights and the sinks' shares are the softmax over the keys and the sink; rows sum to 1 with it."""
        spec = problem(5, 2, 3, causal=True)
        result = compute(spec)
        weights, shares = with_sink(result.scaled, np.tril(np.ones((5, 5), dtype=bool)), SINKS)
        np.testing.assert_allclose(result.weights, weights, rtol=1e-13, atol=1e-16)
        assert result.sink_weights is not None
        np.testing.assert_allclose(result.sink_weights, shares, rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(result.weights.sum(axis=2) + result.sink_weights, 1.0, rtol=1e-14)

    def test_a_row_with_every_key_masked_gives_its_sink_everything(self) -> None:
        """Query 0 sees no key: its weights and head output are 0 (attnx's rule), its sink takes all."""
        mask = np.ones((3, 3), dtype=bool)
        mask[0] = False
        result = compute(problem(3, 2, 2, mask=mask))
        assert result.sink_weights is not None and result.sink_weights[:, 0].tolist() == [1.0, 1.0]
        assert not result.weights[:, 0].any() and not result.head_outputs[:, 0].any()
        assert result.fully_masked_rows == (0,)

    def test_long_inputs_and_torch(self) -> None:
        """600 tokens × 2 heads: the output alone (no tiles: they take no sinks) and torch equal the whole result."""
        spec = problem(600, 2, 8, window=50)
        whole = compute(spec)
        alone = compute(spec, needs={"output"})
        np.testing.assert_allclose(alone.output, whole.output, rtol=1e-12, atol=1e-14)
        assert alone.sink_weights is not None and whole.sink_weights is not None
        np.testing.assert_array_equal(alone.sink_weights, whole.sink_weights)
        pytest.importorskip("torch")
        for needs in (None, {"output"}):
            theirs = compute(spec, "torch", device="cpu", needs=needs)
            np.testing.assert_allclose(theirs.output, whole.output, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(theirs.sink_weights, whole.sink_weights, rtol=1e-10)

    def test_settings(self) -> None:
        """The summary words, the JSON value, and None without sinks."""
        spec = problem(3, 2, 2)
        assert "a learned sink per head" in spec.settings.described()
        assert spec.settings.optional_json()["sink_logits"] == list(SINKS)
        assert compute(problem(3, 2, 2, sink_logits=None)).sink_weights is None

    @pytest.mark.parametrize("sinks", [(1.0,), (1.0, float("nan")), (1.0, float("inf")), [1.0, 2.0], (1, 2)])
    def test_refused(self, sinks: object) -> None:
        """Not one finite float per head is a ConfigError naming the setting."""
        with pytest.raises(ConfigError, match=r"^<input>: sink_logits must be 2 finite numbers, one per head"):
            problem(3, 2, 2, sink_logits=sinks)
