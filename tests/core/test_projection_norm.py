"""QK-norm over the whole projection (OLMo 2): each token's row of Q (H·d_k wide) and of K (H_kv·d_k) normalised
before the head split and rotary positions, in every engine and path."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.inputs import HeadNorm, Linear
from attnx.core.positions import Rotary
from attnx.core.spec import AttentionSpec
from attnx.engines import compute, numpy_engine
from attnx.errors import ConfigError

RNG = np.random.default_rng(36)
ROTARY = Rotary(theta=100.0)


def problem(n: int = 5, q_width: int = 8, k_width: int = 4) -> AttentionSpec:
    """Random X (n, 6) projected to 2 query heads and 1 K/V head of d_k 4, norms over the whole projections."""
    x = RNG.standard_normal((n, 6))
    w_q, w_k, w_v = (Linear.of(RNG.standard_normal((6, width))) for width in (8, 4, 4))
    q_norm, k_norm = (HeadNorm.of(1 + 0.3 * RNG.standard_normal(w), 1e-6, "projection") for w in (q_width, k_width))
    tokens = tuple(f"t{i}" for i in range(n))
    return AttentionSpec.build(x=x, w_q=w_q, w_k=w_k, w_v=w_v, q_norm=q_norm, k_norm=k_norm, heads=2, kv_heads=1,
                               tokens=tokens, key_tokens=tokens, rotary=ROTARY, causal=True)  # fmt: skip


def by_hand(spec: AttentionSpec) -> tuple[np.ndarray, np.ndarray]:
    """Q and K ``[head, token, d_k]``: each token's whole row normalised (x / sqrt(mean(x²) + eps) * w), then split
    into heads of 4 and turned."""
    inputs, out = spec.inputs, []
    cos, sin, turn = ROTARY.tables(np.arange(spec.n_queries), 4)
    for w, norm in ((inputs.w_q, inputs.q_norm), (inputs.w_k, inputs.k_norm)):
        assert norm is not None  # problem() gives both
        y = inputs.x @ w.weight
        y = y / np.sqrt((y * y).mean(axis=-1, keepdims=True) + norm.eps) * norm.weight
        heads = y.reshape(spec.n_queries, -1, 4).transpose(1, 0, 2)
        out.append(heads * cos + (heads @ turn) * sin)
    return out[0], out[1]


class TestProjectionNorm:
    """The core normalises whole projections before splitting them; widths are checked when the spec is made."""

    def test_equals_the_hand_computation(self) -> None:
        """result.q and result.k (normed, turned) and the weights equal the computation by hand."""
        spec = problem()
        result = compute(spec)
        q, k = by_hand(spec)
        np.testing.assert_allclose(result.q, q, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(result.k, k, rtol=1e-12, atol=1e-14)
        scores = np.where(np.tril(np.ones((5, 5), bool)), q @ k.transpose(0, 2, 1) / 2.0, -np.inf)
        expected = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(result.weights, expected / expected.sum(-1, keepdims=True), rtol=1e-12)

    def test_every_engine_and_path(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The tiled NumPy path and torch (float64 and float32) equal the one-piece NumPy path."""
        spec = problem(40)
        whole = compute(spec)
        with monkeypatch.context() as patch:
            patch.setattr(numpy_engine, "DENSE_LIMIT", 0)
            tiled = compute(spec, needs={"output"}).output
        np.testing.assert_allclose(tiled, whole.output, rtol=1e-10, atol=1e-12)
        pytest.importorskip("torch")
        torch64 = compute(spec, "torch", device="cpu")
        np.testing.assert_allclose(torch64.q, whole.q, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(torch64.output, whole.output, rtol=1e-10, atol=1e-12)
        torch32 = compute(spec, "torch", device="cpu", dtype="float32")
        np.testing.assert_allclose(torch32.output, whole.output, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize(
        ("q_width", "k_width", "message"),
        [(4, 4, "q_norm over the whole projection must have w_q's 8 values, got 4"),
         (8, 8, "k_norm over the whole projection must have w_k's 4 values, got 8")],
    )  # fmt: skip
    def test_widths(self, q_width: int, k_width: int, message: str) -> None:
        """A norm over the projection as wide as a head (q) or as Q (k) is a ConfigError naming the width it needs."""
        with pytest.raises(ConfigError, match=message):
            problem(3, q_width, k_width)

    def test_where_it_applies_is_checked(self) -> None:
        """A norm over anything but a head or the projection is refused when made."""
        with pytest.raises(ConfigError, match="applies over head or projection, got 'token'"):
            HeadNorm.of(np.ones(4), 1e-6, "token")
