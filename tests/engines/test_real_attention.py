"""attnx against torch's own attention (nn.MultiheadAttention, SDPA) on real settings, pitfalls and ablations."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.tolerance import default_tolerance
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines import compute
from tests.specs import spec_of

torch = pytest.importorskip("torch")
F = torch.nn.functional

D, H = 8, 2


def labels(n: int, prefix: str = "t") -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


def mha_layer(dtype: torch.dtype, seed: int = 0) -> torch.nn.MultiheadAttention:
    """An nn.MultiheadAttention with random weights and random (non-zero) biases."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True).to(dtype).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha


def spec_from_mha(
    mha: torch.nn.MultiheadAttention, x: np.ndarray, x_kv: np.ndarray | None = None, **kw
) -> AttentionSpec:
    """The same layer for attnx: torch stores x @ W.T, so attnx's W is the transpose; in_proj stacks q, k, v."""
    w = mha.in_proj_weight.detach().double().numpy()
    b = mha.in_proj_bias.detach().double().numpy()
    (wq, wk, wv), (bq, bk, bv) = np.split(w, 3), np.split(b, 3)
    wo, bo = mha.out_proj.weight.detach().double().numpy(), mha.out_proj.bias.detach().double().numpy()
    m = (x_kv if x_kv is not None else x).shape[0]
    return spec_of(
        None, None, None, H, labels(x.shape[0]), labels(m, "k"), x=x, x_kv=x_kv,
        w_q=Linear.of(wq.T, bq), w_k=Linear.of(wk.T, bk), w_v=Linear.of(wv.T, bv), w_o=Linear.of(wo.T, bo), **kw,
    )  # fmt: skip


def assert_close(ours: np.ndarray, theirs: np.ndarray, dtype: str) -> None:
    if dtype == "float64":
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)
    else:
        tol = default_tolerance("float32", theirs)
        np.testing.assert_allclose(ours, theirs, rtol=tol.rtol, atol=tol.atol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
class TestAgainstMultiheadAttention:
    def run_both(self, engine: str, dtype: str, n: int, m: int | None = None, **masks):
        tdt = getattr(torch, dtype)
        rng = np.random.default_rng(n)
        x = rng.standard_normal((n, D))
        x_kv = rng.standard_normal((m, D)) if m is not None else None
        mha = mha_layer(tdt, seed=n)
        spec = spec_from_mha(mha, x, x_kv, **{k: v for k, v in masks.items() if k in ("causal", "padding")})
        xt = torch.tensor(x, dtype=tdt)[None]
        kvt = torch.tensor(x_kv, dtype=tdt)[None] if x_kv is not None else xt
        with torch.no_grad():
            out, weights = mha(
                xt, kvt, kvt, need_weights=True, average_attn_weights=False,
                attn_mask=masks.get("attn_mask"), key_padding_mask=masks.get("key_padding_mask"),
            )  # fmt: skip
        return compute(spec, engine, dtype=dtype), out[0].double().numpy(), weights[0].double().numpy()

    def test_self_attention(self, engine: str, dtype: str) -> None:
        """Plain self-attention: weights and projected output equal nn.MultiheadAttention's."""
        result, out, weights = self.run_both(engine, dtype, 6)
        assert_close(result.weights, weights, dtype)
        assert_close(result.projected, out, dtype)

    def test_causal_mask(self, engine: str, dtype: str) -> None:
        """mask: causal equals a boolean attn_mask blocking the upper triangle (True = blocked in MHA)."""
        blocked = torch.ones(5, 5, dtype=torch.bool).triu(1)
        result, out, weights = self.run_both(engine, dtype, 5, causal=True, attn_mask=blocked)
        assert_close(result.weights, weights, dtype)
        assert_close(result.projected, out, dtype)
        assert result.weights[:, 0, 1:].max() == 0.0

    def test_key_padding_mask(self, engine: str, dtype: str) -> None:
        """padding flags (1 = padding) equal MHA's key_padding_mask (True = padding)."""
        flags = np.array([0, 0, 0, 1, 1], dtype=bool)
        result, out, weights = self.run_both(
            engine, dtype, 5, padding=flags, key_padding_mask=torch.tensor(flags)[None]
        )
        assert_close(result.weights, weights, dtype)
        assert_close(result.projected, out, dtype)
        assert result.weights[..., 3:].max() == 0.0

    def test_cross_attention(self, engine: str, dtype: str) -> None:
        """x_kv with M != N rows feeds keys and values, as MHA's key/value arguments."""
        result, out, weights = self.run_both(engine, dtype, 4, m=7)
        assert result.weights.shape == (H, 4, 7)
        assert_close(result.weights, weights, dtype)
        assert_close(result.projected, out, dtype)


class TestAgainstSdpa:
    @pytest.mark.parametrize(("heads", "kv_heads"), [(4, 2), (4, 1), (6, 3), (8, 8)])
    def test_gqa_and_mqa(self, engine: str, heads: int, kv_heads: int) -> None:
        """kv_heads equals SDPA with enable_gqa=True: head outputs and (via an identity V) weights."""
        d_k, n, m = 3, 5, 7
        rng = np.random.default_rng(heads * 10 + kv_heads)
        q = rng.standard_normal((n, heads * d_k))
        k, v = rng.standard_normal((2, m, kv_heads * d_k))
        spec = spec_of(q, k, v, heads, labels(n), labels(m, "k"), kv_heads=kv_heads)
        result = compute(spec, engine)
        qt = torch.tensor(q).view(n, heads, d_k).transpose(0, 1)[None]  # (1, H, N, d_k)
        kt, vt = (torch.tensor(a).view(m, kv_heads, d_k).transpose(0, 1)[None] for a in (k, v))
        out = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)[0].numpy()
        eye = torch.eye(m, dtype=torch.float64).expand(1, kv_heads, m, m)
        weights = F.scaled_dot_product_attention(qt, kt, eye, enable_gqa=True)[0].numpy()
        np.testing.assert_allclose(result.head_outputs, out, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(result.weights, weights, rtol=1e-12, atol=1e-12)
        assert result.kv_heads == kv_heads and result.kv_head(heads - 1) == kv_heads - 1

    @pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
    def test_scale_number(self, engine: str, scale: float) -> None:
        """A numeric scale is the multiplier, as SDPA's scale argument."""
        q, k, v = np.random.default_rng(1).standard_normal((3, 6, 4))
        result = compute(spec_of(q, k, v, 1, labels(6), labels(6), scale=scale), engine)
        qt, kt, vt = (torch.tensor(a)[None] for a in (q, k, v))
        out = F.scaled_dot_product_attention(qt, kt, vt, scale=scale)[0].numpy()
        np.testing.assert_allclose(result.head_outputs[0], out, rtol=1e-12, atol=1e-12)
        assert result.scale == scale

    @pytest.mark.parametrize(("n", "m"), [(3, 6), (6, 3)])
    def test_causal_with_more_or_fewer_queries_is_top_left(self, engine: str, n: int, m: int) -> None:
        """With N != M the causal mask aligns to the top-left corner, as is_causal does."""
        rng = np.random.default_rng(n)
        q, k, v = rng.standard_normal((n, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 4))
        result = compute(spec_of(q, k, v, 1, labels(n), labels(m, "k"), causal=True), engine)
        out = F.scaled_dot_product_attention(*(torch.tensor(a)[None] for a in (q, k, v)), is_causal=True)
        np.testing.assert_allclose(result.head_outputs[0], out[0].numpy(), rtol=1e-12, atol=1e-12)

    def test_fully_masked_rows_are_zero(self, engine: str) -> None:
        """A query with every key blocked gets zero weights and a zero head output, as SDPA does."""
        rng = np.random.default_rng(2)
        q, k, v = rng.standard_normal((3, 4, 4))
        mask = np.ones((4, 4), dtype=bool)
        mask[2] = False
        result = compute(spec_of(q, k, v, 2, labels(4), labels(4), mask=mask), engine)
        assert result.fully_masked_rows == (2,)
        assert not result.weights[:, 2].any() and not result.head_outputs[:, 2].any()
        assert np.isfinite(result.weights).all()
        sdpa = F.scaled_dot_product_attention(
            *(torch.tensor(a).view(4, 2, 2).transpose(0, 1) for a in (q, k, v)), attn_mask=torch.tensor(mask)
        )
        np.testing.assert_allclose(result.head_outputs, sdpa.numpy(), rtol=1e-12, atol=1e-12)


def entropy(weights: np.ndarray) -> float:
    p = np.clip(weights, 1e-300, 1)
    return float(-(p * np.log(p)).sum(axis=-1).mean())


class TestPitfallsAndAblation:
    def test_sqrt_d_model_is_flatter(self, engine: str) -> None:
        """Dividing by sqrt(d_model) instead of sqrt(d_k) gives flatter weights (higher entropy)."""
        q, k, v = np.random.default_rng(4).standard_normal((3, 12, 64)) * 2
        right = compute(spec_of(q, k, v, 8, labels(12), labels(12)), engine)
        wrong = compute(spec_of(q, k, v, 8, labels(12), labels(12), scale="sqrt_d_model"), engine)
        assert wrong.scale == pytest.approx(1 / 8) and right.scale == pytest.approx(1 / np.sqrt(8))
        assert entropy(wrong.weights) > entropy(right.weights) + 0.1

    def test_interleaved_equals_contiguous_after_permuting_columns(self, engine: str) -> None:
        """interleaved on Q, K, V equals contiguous on columns permuted so each head's columns are a block."""
        heads, d_k = 3, 4
        q, k, v = np.random.default_rng(5).standard_normal((3, 6, heads * d_k))
        perm = np.array([i * heads + h for h in range(heads) for i in range(d_k)])  # block h <- columns h, h+H, ...
        inter = compute(spec_of(q, k, v, heads, labels(6), labels(6), layout="interleaved"), engine)
        contig = compute(spec_of(q[:, perm], k[:, perm], v[:, perm], heads, labels(6), labels(6)), engine)
        np.testing.assert_allclose(inter.weights, contig.weights, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(inter.output[:, perm], contig.output, rtol=1e-13, atol=1e-15)
        assert list(inter.head_columns(1)) == [1, 4, 7, 10]

    def test_dropping_every_head_leaves_only_b_o(self, engine: str) -> None:
        """With every head dropped, the projected output is b_o on every row."""
        mha = mha_layer(torch.float64, seed=3)
        x = np.random.default_rng(3).standard_normal((5, D))
        spec = spec_from_mha(mha, x, dropped_heads=(0, 1))
        result = compute(spec, engine)
        np.testing.assert_allclose(result.projected, np.tile(spec.w_o.bias, (5, 1)), rtol=0, atol=1e-15)
        assert not result.output.any()
        intact = compute(spec_from_mha(mha, x), engine)
        np.testing.assert_allclose(result.intact_projected, intact.projected, rtol=1e-14, atol=1e-14)

    def test_parameter_count_matches_torch(self, engine: str) -> None:
        """parameters counts W_q, W_k, W_v, W_o and biases, as nn.MultiheadAttention has them."""
        mha = mha_layer(torch.float64)
        spec = spec_from_mha(mha, np.zeros((2, D)))
        assert spec.parameters == sum(p.numel() for p in mha.parameters()) == 4 * D * D + 4 * D
        assert compute(spec, engine).parameters == spec.parameters
