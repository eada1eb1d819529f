"""An additive score bias per head (T5's relative positions, ALiBi): every engine and path adds it the same way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec, Linear
from attnx.core.tensors import OUTPUT, PROJECTED
from attnx.engines import alike, compute, compute_many, numpy_engine
from attnx.errors import LimitError
from attnx.limits import Limits

ENGINES = ["numpy", "torch"]
# One layer's weights, shared by the copies of ``TestAlike`` (problems alike share their objects).
WEIGHTS = np.random.default_rng(0).standard_normal((4, 8, 8)) / 3
LINEARS = {name: Linear.of(w) for name, w in zip(("w_q", "w_k", "w_v", "w_o"), WEIGHTS, strict=True)}


def problem(n: int, m: int, heads: int, d_k: int, kv_heads: int | None = None, seed: int = 0,
            **settings: Any) -> AttentionSpec:  # fmt: skip
    """Random Q, K, V and a random bias of ``heads`` × ``n`` × ``m``."""
    rng = np.random.default_rng(seed)
    width = (kv_heads or heads) * d_k
    q = rng.standard_normal((n, heads * d_k))
    k, v = rng.standard_normal((2, m, width))
    bias = rng.standard_normal((heads, n, m)) * 2.0
    return AttentionSpec.build(
        q=q, k=k, v=v, heads=heads, kv_heads=kv_heads, tokens=tuple(f"q{i}" for i in range(n)),
        key_tokens=tuple(f"k{j}" for j in range(m)), score_bias=bias, **settings,
    )  # fmt: skip


def reference(spec: AttentionSpec) -> tuple[np.ndarray, np.ndarray]:
    """The weights and head outputs written out in float64: softmax(scale·q·kᵀ + bias, capped, masked) · v."""
    h, h_kv, d_k = spec.settings.heads, spec.settings.kv_heads, spec.d_k
    q = spec.inputs.q.reshape(spec.n_queries, h, d_k).transpose(1, 0, 2)  # (H, N, d_k)
    k, v = (
        x.reshape(spec.n_keys, h_kv, d_k).transpose(1, 0, 2) for x in (spec.inputs.k, spec.inputs.v)
    )  # (H_kv, M, d_k)
    kv_of = np.arange(h) // (h // h_kv)  # query head h reads K/V head h // group
    s = spec.multiplier * q @ k[kv_of].transpose(0, 2, 1) + spec.score_bias  # (H, N, M)
    cap = spec.settings.softcap
    if cap is not None:
        s = cap * np.tanh(s / cap)
    allowed = spec.allowed()
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights, weights @ v[kv_of]


def assert_reference(spec: AttentionSpec, engine: str, *, matrices: bool = True) -> None:
    """The engine's weights (when asked) and head outputs equal ``reference`` within 1e-12 in float64."""
    pytest.importorskip(engine)
    weights, outputs = reference(spec)
    if matrices:
        result = compute(spec, engine, dtype="float64")
        np.testing.assert_allclose(result.weights, weights, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(result.head_outputs, outputs, rtol=1e-12, atol=1e-12)
        scaled = spec.multiplier * result.scores + spec.score_bias
        if spec.settings.softcap is not None:
            scaled = spec.settings.softcap * np.tanh(scaled / spec.settings.softcap)
        np.testing.assert_allclose(result.scaled, scaled, rtol=1e-13, atol=1e-13)
    h, n, d_k = outputs.shape
    merged = outputs.transpose(1, 0, 2).reshape(n, h * d_k)  # (N, d_model)
    output = compute(spec, engine, dtype="float64", needs=(OUTPUT,)).output
    np.testing.assert_allclose(output, merged, rtol=1e-12, atol=1e-12)


class TestEveryEngine:
    """Each engine adds the bias to the scaled scores, before the cap, the mask and the softmax."""

    @pytest.mark.parametrize("engine", ENGINES)
    def test_plain(self, engine: str) -> None:
        """Without a mask: softmax(scale·q·kᵀ + bias)."""
        assert_reference(problem(5, 7, 2, 4), engine)

    @pytest.mark.parametrize("engine", ENGINES)
    def test_causal(self, engine: str) -> None:
        """With a causal mask, the bias of a blocked key takes no weight."""
        spec = problem(6, 6, 3, 2, causal=True, seed=1)
        assert_reference(spec, engine)
        assert compute(spec, engine, dtype="float64").weights[:, 0, 1:].max() == 0.0

    @pytest.mark.parametrize("engine", ENGINES)
    def test_gqa(self, engine: str) -> None:
        """With fewer K/V heads, each query head has its own bias."""
        spec = problem(5, 5, 4, 3, kv_heads=2, causal=True, seed=2)
        assert_reference(spec, engine)
        weights = compute(spec, engine, dtype="float64").weights
        assert not np.allclose(weights[0], weights[1])  # the heads of a group differ by their biases

    @pytest.mark.parametrize("engine", ENGINES)
    def test_softcap(self, engine: str) -> None:
        """The bias is added before the cap: scaled = C·tanh((scale·q·k + bias) / C)."""
        spec = problem(5, 6, 2, 4, softcap=1.5, seed=3)
        assert_reference(spec, engine)
        assert np.abs(compute(spec, engine, dtype="float64").scaled).max() < 1.5

    @pytest.mark.parametrize("engine", ENGINES)
    def test_select_queries(self, engine: str) -> None:
        """Selected query rows keep their own rows of the bias, and their results equal the whole problem's."""
        spec = problem(6, 6, 2, 4, causal=True, seed=4)
        chosen = spec.select_queries([4, 1])
        np.testing.assert_array_equal(chosen.score_bias, spec.score_bias[:, [4, 1]])
        assert_reference(chosen, engine)
        whole = compute(spec, engine, dtype="float64").weights
        np.testing.assert_allclose(compute(chosen, engine, dtype="float64").weights, whole[:, [4, 1]], rtol=1e-13)

    @pytest.mark.parametrize("engine", ENGINES)
    def test_sinks_join_after_the_bias(self, engine: str) -> None:
        """With learned sinks, the softmax runs over scale·q·kᵀ + bias and the head's sink logit."""
        pytest.importorskip(engine)
        spec = problem(5, 5, 2, 4, causal=True, sink_logits=(0.5, -1.0), seed=11)
        s = spec.multiplier * np.einsum("hnd,hmd->hnm", *(x.reshape(5, 2, 4).transpose(1, 0, 2) for x in
                                        (spec.inputs.q, spec.inputs.k))) + spec.score_bias  # fmt: skip
        e = np.where(np.tril(np.ones((5, 5), dtype=bool)), np.exp(s), 0.0)  # (H, N, M)
        sink = np.exp(np.array([0.5, -1.0]))[:, None]  # (H, 1)
        total = e.sum(axis=-1) + sink  # (H, N)
        result = compute(spec, engine, dtype="float64")
        np.testing.assert_allclose(result.weights, e / total[..., None], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(result.sink_weights, sink / total, rtol=1e-12, atol=1e-12)

    def test_float32_engines_agree(self) -> None:
        """In float32 both engines stay within float32 rounding of the float64 reference."""
        pytest.importorskip("torch")
        spec = problem(8, 8, 2, 4, causal=True, seed=5)
        weights, _ = reference(spec)
        for engine in ENGINES:
            found = compute(spec, engine, dtype="float32").weights
            np.testing.assert_allclose(found, weights, rtol=1.3e-6, atol=1e-5)


class TestPaths:
    """The fast paths that cannot add a bias stand aside: the tiles and torch's SDPA."""

    def test_long_numpy_input_is_not_tiled(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past DENSE_LIMIT a spec with a bias still takes the whole-array path, and equals the reference."""

        def refuse(*args: object) -> None:
            raise AssertionError("tiled with a bias")

        monkeypatch.setattr(numpy_engine, "attend_tiled", refuse)
        spec = problem(520, 520, 4, 2, causal=True, seed=6)
        assert numpy_engine.DENSE_LIMIT < 4 * 520 * 520 and spec.dense_only
        assert_reference(spec, "numpy", matrices=False)

    def test_torch_output_only_bypasses_sdpa(self) -> None:
        """Asked for the output alone, torch computes it densely with the bias (SDPA would drop it)."""
        pytest.importorskip("torch")
        spec = problem(7, 9, 2, 4, seed=7)
        found = compute(spec, "torch", dtype="float64", needs=(OUTPUT,)).output
        without = compute(AttentionSpec.build(q=spec.inputs.q, k=spec.inputs.k, v=spec.inputs.v, heads=2,
                                              tokens=spec.tokens, key_tokens=spec.key_tokens), "torch",
                          dtype="float64", needs=(OUTPUT,)).output  # fmt: skip
        assert not np.allclose(found, without)
        assert_reference(spec, "torch", matrices=False)

    def test_caps_count_the_matrices_a_bias_builds(self) -> None:
        """Without a matrix asked for, a spec with a bias is still held to the H × N × M cap (it is dense)."""
        spec = problem(6, 6, 2, 2, seed=8)
        small = Limits(max_elements=6 * 6)
        with pytest.raises(LimitError, match="2 × 6 × 6"):
            compute(spec, needs=(OUTPUT,), limits=small)
        plain = AttentionSpec.build(q=spec.inputs.q, k=spec.inputs.k, v=spec.inputs.v, heads=2, tokens=spec.tokens,
                                    key_tokens=spec.key_tokens)  # fmt: skip
        assert compute(plain, needs=(OUTPUT,), limits=small).output.shape == (6, 4)


class TestTransformersLike:
    """The T5 way in plain torch: softmax(q·kᵀ + position_bias + additive mask), no 1/√d scaling."""

    def test_t5_arithmetic(self) -> None:
        """A scale of 1, a causal mask folded into the bias as finfo.min, as T5Attention does: the same weights."""
        torch = pytest.importorskip("torch")
        spec = problem(6, 6, 2, 4, causal=True, scale=1.0, seed=9)
        h, n, d_k = 2, 6, 4
        q, k, v = (
            torch.tensor(x).view(n, h, d_k).transpose(0, 1) for x in (spec.inputs.q, spec.inputs.k, spec.inputs.v)
        )
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        additive = torch.zeros(n, n, dtype=torch.float64).masked_fill(~causal, torch.finfo(torch.float64).min)
        position_bias = torch.tensor(spec.score_bias) + additive  # (H, N, M), the mask added in, as T5 does
        weights = torch.softmax(q @ k.transpose(-1, -2) + position_bias, dim=-1)  # (H, N, M)
        out = (weights @ v).transpose(0, 1).reshape(n, h * d_k)  # (N, d_model)
        for engine in ENGINES:
            result = compute(spec, engine, dtype="float64")
            np.testing.assert_allclose(result.weights, weights.numpy(), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(result.output, out.numpy(), rtol=1e-12, atol=1e-12)


class TestAlike:
    """Problems alike share one bias object; a different bias is not alike."""

    def layer(self, rng: np.random.Generator, bias: np.ndarray, drop: tuple[int, ...] = ()) -> AttentionSpec:
        """A projected problem of 5 tokens and 2 heads, the weights shared, its bias ``bias``."""
        tokens = tuple(f"t{i}" for i in range(5))
        return AttentionSpec.build(x=rng.standard_normal((5, 8)), heads=2, tokens=tokens, key_tokens=tokens,
                                   causal=True, score_bias=bias, dropped_heads=drop, **LINEARS)  # fmt: skip

    def test_stacked_with_one_bias_each_equals_compute(self) -> None:
        """Copies sharing one bias are stacked, and each equals its compute; another bias stands apart."""
        rng = np.random.default_rng(10)
        bias = np.random.default_rng(11).standard_normal((2, 5, 5))
        bias.flags.writeable = False
        specs = [self.layer(rng, bias, drop) for drop in ((), (0,), (1,))]
        other = self.layer(rng, bias + 1.0)
        assert specs[0].score_bias is specs[1].score_bias
        assert alike.key(specs[0]) is not None and alike.key(specs[0]) != alike.key(other)
        assert sorted(map(len, alike.groups([*specs, other]))) == [1, 3]
        for found, spec in zip(compute_many([*specs, other], needs=(PROJECTED,)), [*specs, other], strict=True):
            np.testing.assert_allclose(found.projected, compute(spec).projected, rtol=1e-12, atol=1e-13)
