"""QK-norm: each head of Q and K normalised (RMSNorm over d_k) before rotary positions, in every engine and path."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.inputs import HeadNorm, Linear
from attnx.core.positions import Rotary
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(5)


def problem(n: int, heads: int, d_k: int, *, rotary: Rotary | None = None, causal: bool = False) -> AttentionSpec:
    """Random X (n, 12) projected to ``heads`` heads of ``d_k``, with random head norms on Q and K."""
    x = RNG.standard_normal((n, 12))
    w_q, w_k, w_v = (Linear.of(RNG.standard_normal((12, heads * d_k))) for _ in range(3))
    q_norm, k_norm = (HeadNorm.of(1 + 0.3 * RNG.standard_normal(d_k), 1e-6) for _ in range(2))
    tokens = tuple(f"t{i}" for i in range(n))
    return AttentionSpec.build(x=x, w_q=w_q, w_k=w_k, w_v=w_v, q_norm=q_norm, k_norm=k_norm, heads=heads,
                               tokens=tokens, key_tokens=tokens, rotary=rotary, causal=causal)  # fmt: skip


def by_hand(spec: AttentionSpec) -> tuple[np.ndarray, np.ndarray]:
    """Q and K per head ``[head, token, d_k]``, normalised as Qwen 3 does: x / sqrt(mean(x²) + eps) * w."""
    inputs = spec.inputs
    out = []
    for w, norm in ((inputs.w_q, inputs.q_norm), (inputs.w_k, inputs.k_norm)):
        y = (inputs.x @ w.weight).reshape(spec.n_queries, spec.settings.heads, spec.d_k).transpose(1, 0, 2)
        out.append(y / np.sqrt((y * y).mean(axis=-1, keepdims=True) + norm.eps) * norm.weight)
    return out[0], out[1]


class TestHeadNorm:
    """The core normalises each head of Q and K when the inputs carry head norms."""

    def test_q_and_k_are_normalised_per_head(self) -> None:
        """result.q and result.k equal the norm by hand; the weights are softmax of their scaled products."""
        spec = problem(5, 2, 4)
        result = compute(spec)
        q, k = by_hand(spec)
        np.testing.assert_allclose(result.q, q, rtol=1e-13)
        np.testing.assert_allclose(result.k, k, rtol=1e-13)
        scores = q @ k.transpose(0, 2, 1) / 2.0
        expected = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(result.weights, expected / expected.sum(-1, keepdims=True), rtol=1e-12)

    def test_before_rotary_positions(self) -> None:
        """With RoPE, Q and K are normalised first, then turned: result.q is the turned normalised Q."""
        spec = problem(5, 2, 4, rotary=Rotary(theta=100.0))
        q, _ = by_hand(spec)
        cos, sin, turn = Rotary(theta=100.0).tables(np.arange(5), 4)
        np.testing.assert_allclose(compute(spec).q, q * cos + (q @ turn) * sin, rtol=1e-12, atol=1e-14)

    def test_every_engine_and_path(self) -> None:
        """600 causal tokens: the tiled output path and torch equal the one-piece path."""
        spec = problem(600, 4, 8, rotary=Rotary(), causal=True)
        whole = compute(spec)
        np.testing.assert_allclose(compute(spec, needs={"output"}).output, whole.output, rtol=1e-10, atol=1e-12)
        pytest.importorskip("torch")
        np.testing.assert_allclose(compute(spec, "torch", device="cpu").output, whole.output, rtol=1e-10, atol=1e-12)

    def test_width_must_be_d_k(self) -> None:
        """A norm of 3 values on heads of d_k 4 is a ConfigError naming both."""
        spec = problem(3, 2, 4)
        with pytest.raises(ConfigError, match="q_norm must have d_k = 4 values, got 3"):
            AttentionSpec.build(x=spec.inputs.x, w_q=spec.inputs.w_q, w_k=spec.inputs.w_k, w_v=spec.inputs.w_v,
                                q_norm=HeadNorm.of(np.ones(3), 1e-6), heads=2, tokens=spec.tokens,
                                key_tokens=spec.tokens)  # fmt: skip

    @pytest.mark.parametrize(("weight", "eps"), [(np.ones((2, 2)), 1e-6), (np.ones(4), 0.0), (np.ones(4), True)])
    def test_bad_norms(self, weight: np.ndarray, eps: float) -> None:
        """A weight that is not a vector, or an eps outside (0, 1), is refused."""
        with pytest.raises(ConfigError, match="head norm"):
            HeadNorm.of(weight, eps)
