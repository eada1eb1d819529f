"""Rotary positions: Q and K turned by position in the shared core, as transformers turns them, in every engine."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.positions import RopeScaling, Rotary
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(7)


def problem(n: int, heads: int, kv_heads: int, d_k: int, rotary: Rotary, causal: bool = False) -> AttentionSpec:
    """Random Q (n, heads·d_k), K and V (n, kv_heads·d_k), turned by ``rotary``."""
    q = RNG.standard_normal((n, heads * d_k))
    k, v = RNG.standard_normal((2, n, kv_heads * d_k))
    tokens = tuple(f"t{i}" for i in range(n))
    return AttentionSpec.build(q=q, k=k, v=v, heads=heads, kv_heads=kv_heads, tokens=tokens, key_tokens=tokens,
                               causal=causal).with_settings(rotary=rotary)  # fmt: skip


def heads_of(x: np.ndarray, heads: int) -> np.ndarray:
    """``[token, heads·d_k]`` -> ``[head, token, d_k]`` (contiguous columns)."""
    n, width = x.shape
    return x.reshape(n, heads, width // heads).transpose(1, 0, 2)


class TestAgainstTransformers:
    """The rotate-half pairs are those of Hugging Face's ``apply_rotary_pos_emb``, to float64 rounding."""

    @pytest.mark.parametrize(("fraction", "theta"), [(1.0, 10000.0), (0.5, 500.0)])
    def test_q_k_and_scores(self, fraction: float, theta: float) -> None:
        """GQA (4 heads, 2 K/V heads), d_k 8: turned Q, K and the scores equal transformers' (partial: 4 of 8)."""
        torch = pytest.importorskip("torch")
        llama = pytest.importorskip("transformers.models.llama.modeling_llama")
        spec = problem(6, 4, 2, 8, Rotary(theta=theta, fraction=fraction))
        result = compute(spec)
        r = Rotary(theta=theta, fraction=fraction).width(8)
        inv = 1.0 / theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
        angles = torch.outer(torch.arange(6, dtype=torch.float64), inv)
        emb = torch.cat([angles, angles], dim=-1)
        q = torch.tensor(heads_of(spec.inputs.q, 4))[None]  # (1, H, N, d_k)
        k = torch.tensor(heads_of(spec.inputs.k, 2))[None]  # (1, H_kv, N, d_k)
        q_rot, k_rot = llama.apply_rotary_pos_emb(q[..., :r], k[..., :r], emb.cos()[None], emb.sin()[None])
        q_ref = torch.cat([q_rot, q[..., r:]], dim=-1)[0].numpy()
        k_ref = torch.cat([k_rot, k[..., r:]], dim=-1)[0].numpy()
        np.testing.assert_allclose(result.q, q_ref, rtol=0, atol=1e-14)
        np.testing.assert_allclose(result.k, k_ref, rtol=0, atol=1e-14)
        scores = np.einsum("hnd,hmd->hnm", q_ref, np.repeat(k_ref, 2, axis=0))  # query head h reads K/V head h // 2
        np.testing.assert_allclose(result.scores, scores, rtol=1e-13, atol=1e-13)


class TestPairs:
    """Interleaved pairs turn columns (2i, 2i + 1) as one complex number each."""

    def test_interleaved_is_a_complex_rotation(self) -> None:
        """q_rot = (q[2i] + i·q[2i+1]) · e^(i·m·θ^(−2i/d)), for every position m and pair i."""
        spec = problem(5, 1, 1, 8, Rotary(pairs="interleaved"))
        q = spec.inputs.q
        as_complex = q[:, 0::2] + 1j * q[:, 1::2]  # (N, d/2)
        angles = np.arange(5)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)[None, :]
        turned = as_complex * np.exp(1j * angles)
        expected = np.empty_like(q)
        expected[:, 0::2], expected[:, 1::2] = turned.real, turned.imag
        np.testing.assert_allclose(compute(spec).q[0], expected, rtol=0, atol=1e-14)

    def test_scores_depend_on_the_distance_alone(self) -> None:
        """Every query the same vector and every key the same vector: the scores are constant along diagonals."""
        row, key = RNG.standard_normal(8), RNG.standard_normal(8)
        tokens = tuple("abcdef")
        for pairs in ("half", "interleaved"):
            spec = AttentionSpec.build(q=np.tile(row, (6, 1)), k=np.tile(key, (6, 1)), v=np.eye(6, 8), heads=1,
                                       tokens=tokens, key_tokens=tokens).with_settings(rotary=Rotary(pairs=pairs))  # fmt: skip
            scores = compute(spec).scores[0]
            for offset in range(-5, 6):
                diagonal = np.diagonal(scores, offset)
                np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-12, atol=1e-12)

    def test_a_selected_row_keeps_its_position(self) -> None:
        """Query 4 computed alone is turned by position 4, as in the whole problem."""
        spec = problem(6, 2, 2, 4, Rotary(), causal=True)
        np.testing.assert_allclose(compute(spec.select_queries([4])).weights[:, 0], compute(spec).weights[:, 4],
                                   rtol=1e-13, atol=1e-15)  # fmt: skip


class TestEveryPath:
    """The turn happens once, in the shared core: the tiled NumPy path and torch agree with the one-piece path."""

    def test_tiled_output_and_torch(self) -> None:
        """600 tokens × 4 heads take the tiled output path; its output equals the one-piece one, and torch's."""
        spec = problem(600, 4, 2, 16, Rotary(theta=1000.0, pairs="interleaved"), causal=True)
        whole = compute(spec)  # every matrix asked for: the one-piece path builds them
        tiled = compute(spec, needs={"output"})
        np.testing.assert_allclose(tiled.output, whole.output, rtol=1e-10, atol=1e-12)
        pytest.importorskip("torch")
        np.testing.assert_allclose(compute(spec, "torch", device="cpu").output, whole.output, rtol=1e-10, atol=1e-12)


class TestSettings:
    """A rotary setting that cannot work is refused in one line."""

    @pytest.mark.parametrize(
        ("settings", "message"),
        [
            ({"theta": 1.0}, "rope theta must be a finite number above 1, got 1.0"),
            ({"theta": float("inf")}, "rope theta must be a finite number above 1"),
            ({"pairs": "adjacent"}, "rope pairs must be one of half, interleaved, got 'adjacent'"),
            ({"fraction": 0.0}, r"rope fraction must be a number in \(0, 1\], got 0.0"),
        ],
    )
    def test_refused(self, settings: dict[str, object], message: str) -> None:
        """Theta at most 1, an unknown pairing or a fraction outside (0, 1] is a ConfigError."""
        with pytest.raises(ConfigError, match=message):
            Rotary(**settings)  # type: ignore[arg-type]

    def test_too_few_columns(self) -> None:
        """A fraction that leaves no pair of a head's columns to turn is refused with the spec."""
        with pytest.raises(ConfigError, match=r"^<input>: rope turns pairs of columns: 0.5 of d_k = 2 leaves none"):
            problem(3, 1, 1, 2, Rotary(fraction=0.5))


class TestScaling:
    """RoPE scaling stretches the frequencies as transformers' rope initialisers do."""

    @pytest.mark.parametrize(
        ("kind", "extra"),
        [("linear", {}), ("llama3", {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 64})],
    )  # fmt: skip
    def test_frequencies_match_transformers(self, kind: str, extra: dict) -> None:
        """d_k 64, θ 10000, factor 8: every pair's frequency within float32 rounding of transformers'."""
        transformers = pytest.importorskip("transformers")
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        parameters = {"rope_type": kind, "rope_theta": 10000.0, "factor": 8.0, **extra}
        config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters=parameters)
        expected, _ = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
        scaling = RopeScaling(kind, 8.0, original_max_positions=extra.get("original_max_position_embeddings", 8192))
        ours = Rotary(theta=10000.0, scaling=scaling).frequencies(64)
        np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-6)
        plain = Rotary().frequencies(64)
        assert ours[-1] == pytest.approx(plain[-1] / 8)  # the slowest pair is divided by the factor
        if kind == "llama3":
            assert ours[0] == plain[0]  # the fastest pair is kept

    def test_unturn_inverts_the_turn(self) -> None:
        """Turned at positions 0-5, then turned back: the rows come back (partial and interleaved too)."""
        for rotary in (Rotary(theta=50.0), Rotary(pairs="interleaved", fraction=0.5)):
            rows = RNG.standard_normal((6, 8))
            cos, sin, turn = rotary.tables(np.arange(6), 8)
            np.testing.assert_allclose(rotary.unturn(rows * cos + (rows @ turn) * sin, np.arange(6)), rows, atol=1e-14)

    @pytest.mark.parametrize("bad", [{"kind": "ntk"}, {"factor": 0.0}, {"high_freq_factor": 0.5}])
    def test_bad_scaling(self, bad: dict) -> None:
        """An unknown kind, a zero factor or bands the wrong way round are ConfigErrors."""
        fields = {"kind": "llama3", "factor": 8.0} | bad
        with pytest.raises(ConfigError, match="rope scaling"):
            RopeScaling(**fields)
