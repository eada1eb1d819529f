"""Every rope type of transformers' ROPE_INIT_FUNCTIONS: frequencies, attention factor and turned Q and K as theirs.

transformers computes the frequencies in float32 even in a float64 model (``torch.float``, ``torch.float32``,
``Tensor.float()`` in its code, and dynamic's new θ from a tensor length in the default dtype);
``float64_everywhere`` points the three and the default dtype at float64 while it runs, so that its functions are a
float64 reference and the comparisons hold to 1e-12.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest

from attnx.core.positions import ROPE_TYPES, RopeScaling, Rotary, sequence_length
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError

RNG = np.random.default_rng(36)
HEAD_DIM, MAX_POSITIONS, TRAINED = 32, 16384, 4096  # the frequency tests' head and contexts
LENGTHS = (None, 100, TRAINED, TRAINED + 1, MAX_POSITIONS, MAX_POSITIONS + 1, 40000)
SHORT, LONG = RNG.uniform(1.0, 2.0, 16).tolist(), RNG.uniform(2.0, 9.0, 16).tolist()  # longrope, 16 pairs

# (id, rope mapping as config.json writes it, partial_rotary_factor, top-level original_max_position_embeddings)
CASES: list[tuple[str, dict[str, Any], float, int | None]] = [
    ("default-partial", {"rope_type": "default"}, 0.5, None),
    ("linear", {"rope_type": "linear", "factor": 2.5}, 1.0, None),
    ("linear-partial", {"rope_type": "linear", "factor": 2.5}, 0.25, None),
    ("dynamic", {"rope_type": "dynamic", "factor": 2.0}, 1.0, None),
    ("dynamic-legacy-type-partial", {"type": "dynamic", "factor": 3.0}, 0.5, None),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}, 1.0, None),
    ("yarn-betas-untruncated", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED,
                                "beta_fast": 16, "beta_slow": 2, "truncate": False}, 1.0, None),
    ("yarn-mscale-partial", {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": TRAINED,
                             "mscale": 0.707, "mscale_all_dim": 1.0}, 0.5, None),
    ("yarn-attention-factor", {"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.25,
                               "original_max_position_embeddings": TRAINED}, 1.0, None),
    ("yarn-factor-from-lengths", {"rope_type": "yarn", "factor": None,
                                  "original_max_position_embeddings": TRAINED}, 1.0, None),
    ("longrope", {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                  "original_max_position_embeddings": TRAINED}, 1.0, None),
    ("longrope-partial", {"rope_type": "longrope", "short_factor": SHORT[:8], "long_factor": LONG[:8],
                          "original_max_position_embeddings": TRAINED}, 0.5, None),
    ("longrope-top-level-original", {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                                     "original_max_position_embeddings": TRAINED}, 1.0, 2048),
    ("longrope-factor-attention", {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                                   "factor": 3.0, "attention_factor": 1.3}, 1.0, None),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": TRAINED}, 1.0, None),
    ("llama3-partial", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": TRAINED}, 0.5, None),
    ("proportional", {"rope_type": "proportional", "factor": 2.0}, 0.25, None),
    ("proportional-no-factor", {"rope_type": "proportional"}, 0.75, None),
]  # fmt: skip


@contextlib.contextmanager
def float64_everywhere() -> Iterator[None]:
    """While active, ``torch.float``, ``torch.float32``, ``Tensor.float()`` and the default dtype are float64."""
    torch = pytest.importorskip("torch")
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # an integer tensor times a float (dynamic's length) is float64 too
    try:
        with (
            mock.patch.object(torch, "float", torch.float64),
            mock.patch.object(torch, "float32", torch.float64),
            mock.patch.object(torch.Tensor, "float", torch.Tensor.double),
        ):
            yield
    finally:
        torch.set_default_dtype(default)


def llama_config(parameters: dict[str, Any], fraction: float, original: int | None, **sizes: int) -> Any:
    """transformers' LlamaConfig holding ``parameters`` (a copy: it fills in its defaults) and ``fraction``."""
    transformers = pytest.importorskip("transformers")
    head_dim, max_positions = sizes.get("head_dim", HEAD_DIM), sizes.get("max_positions", MAX_POSITIONS)
    top = {} if original is None else {"original_max_position_embeddings": original}
    rope = copy.deepcopy(parameters) | {"rope_theta": sizes.get("theta", 10000.0), "partial_rotary_factor": fraction}
    return transformers.LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, num_key_value_heads=1,
                                    head_dim=head_dim, max_position_embeddings=max_positions,
                                    rope_parameters=rope, **top)  # fmt: skip


def ours(parameters: dict[str, Any], fraction: float, original: int | None, **sizes: int) -> Rotary:
    """attnx's rotary positions for the same config, as a model reader builds them."""
    return Rotary.from_config(parameters, head_dim=sizes.get("head_dim", HEAD_DIM), partial_rotary_factor=fraction,
                              max_position_embeddings=sizes.get("max_positions", MAX_POSITIONS),
                              rope_theta=sizes.get("theta", 10000.0),
                              original_max_position_embeddings=original)  # fmt: skip


def kind_of(parameters: dict[str, Any]) -> str:
    """The mapping's rope type, as transformers reads it."""
    return str(parameters.get("rope_type", parameters.get("type", "default")))


class TestEveryType:
    """attnx has a scaling for every rope type transformers has."""

    def test_the_types_are_transformers(self) -> None:
        """ROPE_TYPES is ``default`` and the keys of ROPE_INIT_FUNCTIONS."""
        rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
        assert set(ROPE_TYPES) == {"default", *rope_utils.ROPE_INIT_FUNCTIONS}


class TestFrequencies:
    """Inverse frequencies and attention factor equal transformers' ``ROPE_INIT_FUNCTIONS[type](config, device,
    seq_len)`` in float64 to 1e-12, at lengths below, at and above the trained ones."""

    @pytest.mark.parametrize(("parameters", "fraction", "original"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
    def test_equal_transformers(self, parameters: dict[str, Any], fraction: float, original: int | None) -> None:
        """Every length of LENGTHS (None: transformers' seq_len None, the model's start)."""
        rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
        config, rotary, kind = (
            llama_config(parameters, fraction, original),
            ours(parameters, fraction, original),
            kind_of(parameters),
        )
        for length in LENGTHS:
            with float64_everywhere():
                if kind == "default":
                    expected, attention = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16), 1.0
                else:
                    inverse, attention = rope_utils.ROPE_INIT_FUNCTIONS[kind](config, None, length)
                    expected = inverse.numpy()
            frequencies = rotary.frequencies(HEAD_DIM, length)
            assert frequencies.dtype == np.float64 and frequencies.shape == expected.shape
            np.testing.assert_allclose(frequencies, expected, rtol=0, atol=1e-12, err_msg=f"length {length}")
            assert abs(rotary.attention - attention) <= 1e-12

    def test_lengths_switch_the_frequencies(self) -> None:
        """dynamic changes past max_position_embeddings and longrope past the trained context, and nowhere else."""
        dynamic = ours({"rope_type": "dynamic", "factor": 2.0}, 1.0, None)
        assert np.array_equal(dynamic.frequencies(HEAD_DIM, MAX_POSITIONS), Rotary().frequencies(HEAD_DIM))
        assert dynamic.frequencies(HEAD_DIM, MAX_POSITIONS + 1)[-1] < Rotary().frequencies(HEAD_DIM)[-1]
        longrope = ours(CASES[10][1], 1.0, None)
        np.testing.assert_allclose(longrope.frequencies(HEAD_DIM, TRAINED) * SHORT, Rotary().frequencies(HEAD_DIM))
        np.testing.assert_allclose(longrope.frequencies(HEAD_DIM, TRAINED + 1) * LONG, Rotary().frequencies(HEAD_DIM))


# (id, rope mapping, partial_rotary_factor): the turn's check, on a head of 16 columns, trained context 8, max 16
SMALL = {"head_dim": 16, "max_positions": 16, "theta": 100.0}
TURNS: list[tuple[str, dict[str, Any], float]] = [
    ("default", {"rope_type": "default"}, 1.0),
    ("linear", {"rope_type": "linear", "factor": 2.0}, 1.0),
    ("dynamic", {"rope_type": "dynamic", "factor": 2.0}, 1.0),
    ("dynamic-partial", {"rope_type": "dynamic", "factor": 2.0}, 0.5),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}, 1.0),
    ("yarn-partial", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}, 0.5),
    ("longrope-partial", {"rope_type": "longrope", "short_factor": SHORT[:4], "long_factor": LONG[:4],
                          "original_max_position_embeddings": 8}, 0.5),
    ("llama3", {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                "original_max_position_embeddings": 8}, 1.0),
    ("proportional", {"rope_type": "proportional", "factor": 2.0}, 0.5),
]  # fmt: skip


def reference_turn(parameters: dict[str, Any], fraction: float, q: np.ndarray, k: np.ndarray) -> tuple[Any, Any]:
    """Q ``[H, N, d]`` and K turned by transformers: its Llama rotary embedding's cos and sin for positions
    0 … N − 1 (the attention factor in them), applied by ``apply_rotary_pos_emb`` (Phi-3's, which passes the
    columns past the turned ones through)."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    phi3 = pytest.importorskip("transformers.models.phi3.modeling_phi3")
    with float64_everywhere():
        embedding = llama.LlamaRotaryEmbedding(llama_config(parameters, fraction, None, **SMALL))
        positions = torch.arange(q.shape[1])[None]
        cos, sin = embedding(torch.zeros(1, dtype=torch.float64), positions)
        q_turned, k_turned = phi3.apply_rotary_pos_emb(torch.tensor(q)[None], torch.tensor(k)[None], cos, sin)
    return q_turned[0].numpy(), k_turned[0].numpy()


class TestTurn:
    """Q and K turned by attnx equal transformers' ``apply_rotary_pos_emb`` with its rotary embedding's cos and sin."""

    @pytest.mark.parametrize("length", [6, 20])
    @pytest.mark.parametrize(("parameters", "fraction"), [t[1:] for t in TURNS], ids=[t[0] for t in TURNS])
    def test_q_and_k(self, parameters: dict[str, Any], fraction: float, length: int) -> None:
        """2 heads over 1 K/V head of d_k 16, 6 tokens (within every trained context) or 20 (past each): 1e-12."""
        q, k, v = (
            RNG.standard_normal((length, 32)),
            RNG.standard_normal((length, 16)),
            RNG.standard_normal((length, 16)),
        )
        tokens = tuple(f"t{i}" for i in range(length))
        rotary = ours(parameters, fraction, None, **SMALL)
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, kv_heads=1, tokens=tokens, key_tokens=tokens)
        result = compute(spec.with_settings(rotary=rotary))
        q_ref, k_ref = reference_turn(parameters, fraction, q.reshape(length, 2, 16).transpose(1, 0, 2), k[None])
        np.testing.assert_allclose(result.q, q_ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(result.k, k_ref, rtol=0, atol=1e-12)


class TestLength:
    """The length dynamic and longrope read is the whole text's, whichever rows are computed."""

    def test_sequence_length(self) -> None:
        """The largest query position + 1, or the number of keys when that is more."""
        assert sequence_length(np.array([3]), 10) == 10
        assert sequence_length(np.array([0, 11]), 10) == 12
        assert sequence_length(np.array([], dtype=int), 4) == 4

    def test_a_selected_row_keeps_the_text_length(self) -> None:
        """Query 18 of 20 computed alone under dynamic scaling (max 16): the whole problem's row, not a 19-long one."""
        q, k, v = RNG.standard_normal((3, 20, 16))
        tokens = tuple(f"t{i}" for i in range(20))
        rotary = ours({"rope_type": "dynamic", "factor": 2.0}, 1.0, None, **SMALL)
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=1, tokens=tokens, key_tokens=tokens).with_settings(
            rotary=rotary
        )
        np.testing.assert_allclose(compute(spec.select_queries([18])).q[0, 0], compute(spec).q[0, 18], atol=1e-15)

    def test_unturn_inverts_the_turn(self) -> None:
        """Turned (with yarn's attention factor, or dynamic past its length) and turned back: the rows come back."""
        for parameters in (TURNS[4][1], TURNS[2][1]):
            rotary, rows = ours(parameters, 0.5, None, **SMALL), RNG.standard_normal((20, 16))
            cos, sin, turn = rotary.tables(np.arange(20), 16, 20)
            turned = rows * cos + (rows @ turn) * sin
            np.testing.assert_allclose(rotary.unturn(turned, np.arange(20), 20), rows, atol=1e-13)
        assert rotary.attention == 1.0 and ours(TURNS[4][1], 1.0, None, **SMALL).attention > 1


class TestFromConfig:
    """A rope mapping is read as transformers reads it, and one attnx cannot run exactly is a ConfigError."""

    @pytest.mark.parametrize(
        ("parameters", "message"),
        [
            ({"rope_type": "ntk"}, "rope_type 'ntk' is not one of default, linear, dynamic, yarn, longrope, llama3"),
            ({"rope_type": "yarn", "factor": 4.0, "mrope_section": [2, 3]}, "unknown key 'mrope_section'; rope_type yarn"),
            ({"rope_type": "linear"}, "rope_type linear needs factor"),
            ({"rope_type": "yarn"}, "rope_type yarn needs factor"),
            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}, "rope_type llama3 needs high_freq_factor"),
            ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 7},
             "long_factor has 7 numbers for 8 pairs"),
            ({"rope_type": "longrope", "short_factor": "1 2", "long_factor": [1.0] * 8}, "needs short_factor, a list"),
            ({"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "truncate must be true or false"),
            ({"rope_type": "linear", "factor": "2"}, "factor must be a number, got '2'"),
            ({"rope_type": "linear", "factor": 0}, "factor must be a positive number, got 0"),
            ({"partial_rotary_factor": 0.3125}, "0.3125 of head_dim 16 is 5 columns, an odd number"),
        ],
    )  # fmt: skip
    def test_refused(self, parameters: dict[str, Any], message: str) -> None:
        """An unknown type or key, a missing or malformed value, or an odd number of turned columns."""
        with pytest.raises(ConfigError, match=message):
            Rotary.from_config(parameters, head_dim=16, max_position_embeddings=32)

    def test_defaults_and_ignored_keys(self) -> None:
        """The top-level θ and fraction where the mapping has none; another type's key ignored, as transformers does."""
        rotary = Rotary.from_config({"type": "linear", "factor": 2, "original_max_position_embeddings": 64},
                                    head_dim=16, max_position_embeddings=32, rope_theta=500.0,
                                    partial_rotary_factor=0.5)  # fmt: skip
        assert rotary == Rotary(theta=500.0, fraction=0.5, scaling=RopeScaling("linear", 2))
        assert Rotary.from_config({}, head_dim=16, max_position_embeddings=32) == Rotary()
        proportional = Rotary.from_config({"rope_type": "proportional", "partial_rotary_factor": 0.5}, head_dim=16,
                                          max_position_embeddings=32)  # fmt: skip
        assert proportional.fraction == 1.0 and proportional.frequencies(16)[4:].tolist() == [0.0] * 4

    def test_scaling_fields_of_another_kind(self) -> None:
        """A field one kind reads, set on another, is refused rather than ignored."""
        with pytest.raises(ConfigError, match="beta_fast is for yarn scaling, not linear"):
            RopeScaling("linear", 2.0, beta_fast=16.0)
        with pytest.raises(ConfigError, match="longrope needs short_factor"):
            RopeScaling("longrope", 2.0)


class TestDescribe:
    """Each type in words, as the summary line and ``attnx model`` show it."""

    @pytest.mark.parametrize(
        ("case", "words"),
        [
            ("linear", "RoPE θ 10000 (half pairs, linear ×2.5)"),
            ("dynamic", "RoPE θ 10000 (half pairs, dynamic NTK ×2 past 16384 positions)"),
            ("yarn", "RoPE θ 10000 (half pairs, yarn ×4 (attention ×1.139))"),
            ("yarn-mscale-partial", "RoPE θ 10000 (half pairs, 0.50 of d_k, yarn ×40 (attention ×0.921))"),
            ("longrope", "RoPE θ 10000 (half pairs, longrope ×4, long factors past 4096 positions (attention ×1.08))"),
            ("llama3", "RoPE θ 10000 (half pairs, llama3 ×8)"),
            ("proportional", "RoPE θ 10000 (half pairs, proportional ×2 on 0.25 of the pairs)"),
        ],
    )
    def test_words(self, case: str, words: str) -> None:
        """The factor, the length a type switches at and an attention factor other than 1."""
        _, parameters, fraction, original = next(c for c in CASES if c[0] == case)
        assert ours(parameters, fraction, original).describe() == words
