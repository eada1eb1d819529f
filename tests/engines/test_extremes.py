"""At the edges of the dtypes: whether a representable result is computed does not depend on the engine, the path
(one-piece or tiled) or which tensors are asked for; an overflow is refused everywhere, never hidden."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import NumericError

RNG = np.random.default_rng(21)
SIZES = [64, 1100]  # one piece; tiles (the output path takes tiles from 1024 tokens on)
NEEDS = [None, {"output"}]  # every tensor (one piece, or the tiled weights path); the output alone


def problem(n: int, v_scale: float, *, causal: bool = True, mask: bool = False) -> AttentionSpec:
    q, k, v = RNG.standard_normal((3, n, 32))
    tokens = tuple(map(str, range(n)))
    allowed = None
    if mask:
        allowed = RNG.random((n, n)) > 0.2
        allowed[:, 0] = True
    return AttentionSpec.build(q=q, k=k, v=v * v_scale, heads=4, tokens=tokens, key_tokens=tokens, causal=causal,
                               mask=allowed)  # fmt: skip


def exact(spec: AttentionSpec) -> np.ndarray:
    """The output by hand in float64: softmax of each row, then its weighted mean of V."""
    n, h, d = spec.n_queries, spec.settings.heads, spec.d_k
    q, k, v = (
        np.asarray(x, dtype=np.float64).reshape(n, h, d).transpose(1, 0, 2) for x in spec.inputs.arrays().values()
    )
    scores = q @ k.transpose(0, 2, 1) * spec.multiplier
    allowed = spec.allowed()
    scores = np.where(allowed, scores, -np.inf) if allowed is not None else scores
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ v).transpose(1, 0, 2).reshape(n, h * d)


def close(result: np.ndarray, expected: np.ndarray, dtype: str) -> bool:
    """Within the dtype's rounding of a weighted mean: a few thousand epsilons of the output's magnitude."""
    bound = {"float32": 1e-4, "float64": 1e-9}[dtype] * np.abs(expected).max()
    return bool(np.isfinite(result).all() and np.abs(result - expected).max() <= bound)


class TestValuesAtTheEdges:
    """V near the dtype's largest number, or tiny: the output (a weighted mean of V's rows) fits, so every
    engine and path computes it, to the dtype's precision."""

    @pytest.mark.parametrize("n", SIZES)
    @pytest.mark.parametrize("needs", NEEDS)
    @pytest.mark.parametrize(("dtype", "v_scale"), [("float32", 1e37), ("float64", 1e305), ("float32", 1e-30),
                                                    ("float64", 1e-60)])  # fmt: skip
    def test_computed_everywhere(self, engine: str, n: int, needs: set | None, dtype: str, v_scale: float) -> None:
        spec = problem(n, v_scale, mask=n == 64)
        result = compute(spec, engine, dtype=dtype, needs=needs).output
        assert close(result, exact(spec), dtype)


class TestOverflowIsRefusedEverywhere:
    """Scores that overflow the dtype are refused on every engine and path, never turned into the largest
    number (torch's nan_to_num did that to the output-only path with a mask)."""

    @pytest.mark.parametrize("n", SIZES)
    @pytest.mark.parametrize("needs", NEEDS)
    @pytest.mark.parametrize("mask", [False, True])
    def test_refused(self, engine: str, n: int, needs: set | None, mask: bool) -> None:
        q, k, v = RNG.standard_normal((3, n, 8))
        tokens = tuple(map(str, range(n)))
        allowed = np.ones((n, n), dtype=bool) if mask else None
        spec = AttentionSpec.build(q=q * 1e19, k=k * 1e19, v=v, heads=2, tokens=tokens, key_tokens=tokens,
                                   mask=allowed)  # fmt: skip
        with pytest.raises(NumericError, match="overflows float32"):
            compute(spec, engine, dtype="float32", needs=needs)

    def test_masked_rows_are_still_zeros(self, engine: str) -> None:
        """The torch path zeroes exactly the rows that see no key, and nothing else."""
        spec = problem(6, 1.0, causal=False, mask=False)
        allowed = np.ones((6, 6), dtype=bool)
        allowed[2] = False
        masked = AttentionSpec.build(q=spec.inputs.q, k=spec.inputs.k, v=spec.inputs.v, heads=4, tokens=spec.tokens,
                                     key_tokens=spec.tokens, mask=allowed)  # fmt: skip
        out = compute(masked, engine, needs={"output"}).output
        assert (out[2] == 0).all() and (out[[0, 1, 3, 4, 5]] != 0).all()
