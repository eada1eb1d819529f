"""Problems alike computed together (attnx/engines/alike.py, ``compute_many``): each result equals its ``compute``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.positions import Rotary
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec, HeadNorm, Linear
from attnx.core.tensors import COMPUTED, INTACT_OUTPUT, INTACT_PROJECTED, PROJECTED, WEIGHTS
from attnx.engines import alike, compute, compute_copies, compute_many
from attnx.errors import LimitError, NumericError
from attnx.limits import Limits

N, D, HEADS = 6, 16, 4

# Settings of a layer, as model families give them: GQA with rotary positions and head norms (Qwen 3), a window
# with a soft cap (Gemma 2), learned sinks (gpt-oss), norms over the whole projection and interleaved columns.
LAYERS: dict[str, dict[str, Any]] = {
    "gqa, rotary, head norms": {"kv_heads": 2, "rotary": Rotary(theta=100.0), "qk_norm": "head"},
    "window, soft cap": {"window": 3, "softcap": 5.0},
    "sinks": {"kv_heads": 1, "sink_logits": (0.5, -1.0, 2.0, 0.0)},
    "projection norms, interleaved, biases": {"qk_norm": "projection", "layout": "interleaved", "bias": True},
}


def layer(rng: np.random.Generator, kv_heads: int = HEADS, qk_norm: str | None = None, bias: bool = False,
          **settings: Any) -> dict[str, Any]:  # fmt: skip
    """One layer's weights (shared by every copy) and settings, as ``AttentionSpec.build`` keywords."""
    d_k = D // HEADS

    def linear(d_in: int, d_out: int) -> Linear:
        return Linear.of(rng.standard_normal((d_in, d_out)) / 3, rng.standard_normal(d_out) if bias else None)

    norms: dict[str, Any] = {}
    if qk_norm is not None:
        widths = (d_k, d_k) if qk_norm == "head" else (D, kv_heads * d_k)
        norms = {name: HeadNorm.of(1 + rng.random(width), 1e-6, qk_norm) for name, width in zip(("q_norm", "k_norm"), widths, strict=True)}  # fmt: skip
    return {
        "heads": HEADS, "kv_heads": kv_heads, "w_q": linear(D, D), "w_k": linear(D, kv_heads * d_k),
        "w_v": linear(D, kv_heads * d_k), "w_o": linear(D, D), "causal": True, **norms, **settings,
    }  # fmt: skip


def copies(weights: dict[str, Any], rng: np.random.Generator, drops: list[tuple[int, ...]]) -> list[AttentionSpec]:
    """One spec per copy of a text: its own X, its own dropped heads, the layer's weights."""
    tokens = tuple(f"t{i}" for i in range(N))
    return [
        AttentionSpec.build(
            **weights, x=rng.standard_normal((N, D)), tokens=tokens, key_tokens=tokens, dropped_heads=drop
        )
        for drop in drops
    ]


def assert_same(found: AttentionResult, alone: AttentionResult, rtol: float = 1e-12) -> None:
    """Every array and fact of ``found`` equals ``alone``'s (arrays to ``rtol``, and as much times their largest
    value: a taller matmul may round the last bit otherwise)."""
    for name in COMPUTED:
        mine, theirs = getattr(found, name), getattr(alone, name)
        assert (mine is None) == (theirs is None), name
        if mine is not None:
            atol = rtol * max(1.0, float(np.abs(theirs).max(initial=0)))
            np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol, err_msg=name)
    for fact in ("dropped_heads", "fully_masked_rows", "blocked_pairs", "settings", "tokens", "scale", "dtype"):
        assert getattr(found, fact) == getattr(alone, fact), fact


DROPS = [(), (0,), (3,), (1, 2), (0,)]


class TestComputeMany:
    """``compute_many`` on copies of one layer's problem, each dropping other heads."""

    @pytest.mark.parametrize("name", list(LAYERS))
    def test_every_array_equals_compute(self, name: str) -> None:
        """With every array asked for, each copy's result equals ``compute`` of its spec, intact arrays included."""
        rng = np.random.default_rng(len(name))
        specs = copies(layer(rng, **LAYERS[name]), rng, DROPS)
        assert len(list(alike.groups(specs))) == 1  # all alike: computed together
        for found, spec in zip(compute_many(specs), specs, strict=True):
            assert_same(found, compute(spec))

    def test_a_model_pass_needs_no_intact_arrays(self) -> None:
        """Asked for the projected output and weights (what a forward pass asks), each result equals compute's in
        them; the intact output and projection, which compute makes for dropped heads, are left out."""
        rng = np.random.default_rng(7)
        specs = copies(layer(rng, **LAYERS["gqa, rotary, head norms"]), rng, DROPS)
        needs = {PROJECTED, WEIGHTS}
        for found, spec in zip(compute_many(specs, needs=needs), specs, strict=True):
            alone = compute(spec, needs=needs)
            np.testing.assert_allclose(found.projected, alone.projected, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(found.weights, alone.weights, rtol=1e-12, atol=1e-14)
            assert found.intact_output is None and found.intact_projected is None
            assert (alone.intact_projected is None) == (not spec.settings.dropped_heads)
        asked = compute_many(specs, needs={PROJECTED, INTACT_OUTPUT, INTACT_PROJECTED})
        np.testing.assert_allclose(asked[1].intact_projected, compute(specs[1]).intact_projected, rtol=1e-12)

    def test_problems_not_alike_keep_their_order(self) -> None:
        """Two layers' copies interleaved, one of another length and float32: grouped by what they share, each
        result in its spec's place and equal to its compute."""
        rng = np.random.default_rng(3)
        first, second = (copies(layer(rng), rng, [(0,), (1,), (2,)]) for _ in range(2))
        tokens = tuple(f"t{i}" for i in range(N + 1))
        longer = AttentionSpec.build(**layer(rng), x=rng.standard_normal((N + 1, D)), tokens=tokens, key_tokens=tokens)
        specs = [first[0], second[0], first[1], longer, second[1], first[2], second[2]]
        assert sorted(map(len, alike.groups(specs))) == [1, 3, 3]
        for dtype, rtol in (("float64", 1e-12), ("float32", 1e-5)):
            for found, spec in zip(compute_many(specs, dtype=dtype), specs, strict=True):
                assert_same(found, compute(spec, dtype=dtype), rtol)

    def test_a_small_element_cap_computes_them_one_by_one(self) -> None:
        """Under a cap that holds one copy's arrays and no more, the copies are never stacked, and the answers hold;
        under one smaller still, the cap is refused as compute refuses it."""
        rng = np.random.default_rng(5)
        weights = layer(rng)
        specs = copies(weights, rng, DROPS)
        capped = [AttentionSpec.of(s.inputs, s.settings, s.tokens, s.key_tokens, w_o=s.w_o,
                                   limits=Limits(max_elements=alike.footprint(s))) for s in specs]  # fmt: skip
        assert all(map(lambda group: len(group) == 1, alike.groups(capped)))
        for found, spec in zip(compute_many(capped), specs, strict=True):
            assert_same(found, compute(spec))
        tiny = [AttentionSpec.of(s.inputs, s.settings, s.tokens, s.key_tokens, limits=Limits(max_elements=20))
                for s in specs]  # fmt: skip
        with pytest.raises(LimitError):
            compute_many(tiny)

    def test_an_overflow_names_its_copy(self) -> None:
        """In float32, one copy whose X overflows the scores: the same NumericError as its compute, naming it."""
        rng = np.random.default_rng(11)
        weights = layer(rng)
        specs = copies(weights, rng, DROPS)
        big = AttentionSpec.build(**weights, x=np.full((N, D), 1e25), tokens=specs[0].tokens,
                                  key_tokens=specs[0].tokens, source="copy 2")  # fmt: skip
        specs[2] = big
        assert len(list(alike.groups(specs))) == 1
        with pytest.raises(NumericError) as alone:
            compute(big, dtype="float32")
        with pytest.raises(NumericError) as together:
            compute_many(specs, dtype="float32")
        assert str(together.value) == str(alone.value) and "copy 2" in str(together.value)


class TestComputeCopies:
    """``compute_copies``: one problem's projected output for each copy of its input X, each dropping its heads."""

    @pytest.mark.parametrize("name", list(LAYERS))
    def test_each_copy_equals_compute_alone(self, name: str) -> None:
        """Copy c's projected output equals ``compute``'s for the spec with X = xs[c] and heads dropped[c]."""
        rng = np.random.default_rng(len(name) + 1)
        specs = copies(layer(rng, **LAYERS[name]), rng, DROPS)
        xs = np.stack([spec.inputs.x for spec in specs])
        found = compute_copies(specs[0], xs, DROPS)
        assert found.shape == (len(DROPS), N, D)
        for rows, spec in zip(found, specs, strict=True):
            np.testing.assert_allclose(rows, compute(spec).projected, rtol=1e-12, atol=1e-14)

    def test_parts_within_the_cap_and_problems_too_large_to_stack(self) -> None:
        """Under a cap that holds two copies' arrays, they go in parts of two; a problem the NumPy engine tiles
        (over ``DENSE_LIMIT``) is computed copy by copy. Either way each copy equals its compute."""
        rng = np.random.default_rng(13)
        specs = copies(layer(rng), rng, DROPS)
        capped = AttentionSpec.of(specs[0].inputs, specs[0].settings, specs[0].tokens, specs[0].key_tokens,
                                  w_o=specs[0].w_o, limits=Limits(max_elements=2 * alike.footprint(specs[0])))  # fmt: skip
        xs = np.stack([spec.inputs.x for spec in specs])
        for rows, spec in zip(compute_copies(capped, xs, DROPS), specs, strict=True):
            np.testing.assert_allclose(rows, compute(spec).projected, rtol=1e-12, atol=1e-14)
        n = int((alike.DENSE_LIMIT // HEADS) ** 0.5) + 1  # H · n · n just over the limit
        tokens = tuple(map(str, range(n)))
        weights = layer(rng)
        big = [AttentionSpec.build(**weights, x=rng.standard_normal((n, D)), tokens=tokens, key_tokens=tokens,
                                   dropped_heads=drop) for drop in [(0,), (2,)]]  # fmt: skip
        assert alike.key(big[0]) is None
        found = compute_copies(big[0], np.stack([spec.inputs.x for spec in big]), [(0,), (2,)])
        np.testing.assert_allclose(found[1], compute(big[1]).projected, rtol=1e-12, atol=1e-12)

    def test_an_overflow_raises_what_compute_raises(self) -> None:
        """In float32, a copy whose X overflows the scores raises the NumericError its compute raises; an X beyond
        float32's range, the range error."""
        rng = np.random.default_rng(17)
        weights = layer(rng)
        specs = copies(weights, rng, DROPS)
        xs = np.stack([spec.inputs.x for spec in specs])
        for value in (1e25, 1e39):
            xs[2] = value
            alone = AttentionSpec.build(**weights, x=xs[2], tokens=specs[0].tokens, key_tokens=specs[0].tokens,
                                        dropped_heads=DROPS[2])  # fmt: skip
            with pytest.raises(NumericError) as expected:
                compute(alone, dtype="float32", needs={PROJECTED})
            with pytest.raises(NumericError) as found:
                compute_copies(specs[0], xs, DROPS, dtype="float32")
            assert str(found.value) == str(expected.value)
