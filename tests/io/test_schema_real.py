"""Inputs of real attention (X with projection weights): the keys read and the errors located."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.errors import ConfigError
from attnx.io.documents import parse_document
from attnx.io.schema import spec_from_document
from tests.specs import split_overrides

IDENTITY = "[[1, 0], [0, 1]]"
PROJECTED = f"x: [[1, 2], [3, 4], [5, 6]]\nw_q: {IDENTITY}\nw_k: {IDENTITY}\nw_v: {IDENTITY}\n"


def spec_of(text: str, **values: Any) -> AttentionSpec:
    """The spec of a YAML ``text``, with the flags' ``values`` put in as the command line puts them."""
    described, settings = split_overrides(**values)
    return settings.apply(spec_from_document(parse_document(text, "in.yaml"), described))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        spec_of(text)
    return str(info.value)


class TestRealAttentionKeys:
    def test_projections_and_biases(self) -> None:
        """x with w_q/w_k/w_v, biases, and w_o/b_o build a projected spec with a parameter count."""
        spec = spec_of(PROJECTED + "b_q: [1, 1]\nw_o: [[2, 0], [0, 2]]\nb_o: [0.5, 0.5]\n")
        assert spec.inputs.w_q.bias.tolist() == [1.0, 1.0] and spec.w_o.weight[0, 0] == 2.0
        assert spec.d_model == 2 and spec.n_queries == spec.n_keys == 3
        assert spec.parameters == 4 * 4 + 2 + 2

    def test_cross_attention_labels(self) -> None:
        """x_kv feeds keys; query_tokens and key_tokens label the two sides."""
        spec = spec_of(PROJECTED + "x_kv: [[1, 0]]\nquery_tokens: [a, b, c]\nkey_tokens: [z]\n")
        assert spec.tokens == ("a", "b", "c") and spec.key_tokens == ("z",)

    def test_direct_cross_attention_default_key_labels(self) -> None:
        """Direct q with N rows and k, v with M rows label keys k0..k{M-1}."""
        spec = spec_of("q: [[1, 0]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n")
        assert spec.tokens == ("t0",) and spec.key_tokens == ("k0", "k1")

    def test_masks(self) -> None:
        """mask: causal, a 0/1 matrix and padding flags combine into allowed()."""
        base = "q: [[1], [1], [1]]\nk: [[1], [1], [1]]\nv: [[1], [2], [3]]\n"
        assert spec_of(base + "mask: causal\n").allowed().tolist() == [
            [True, False, False], [True, True, False], [True, True, True]
        ]  # fmt: skip
        spec = spec_of(base + "mask: [[1, 1, 0], [1, 1, 1], [0, 1, 1]]\npadding: [0, 1, 0]\n")
        assert spec.allowed().tolist() == [[True, False, False], [True, False, True], [False, False, True]]

    def test_causal_key_adds_to_the_mask(self) -> None:
        """``causal: true`` is a causal mask alone, and combines with a mask matrix as --causal does."""
        base = "q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [2]]\n"
        assert spec_of(base + "causal: true\n").allowed().tolist() == [[True, False], [True, True]]
        assert spec_of(base + "mask: [[0, 1], [1, 1]]\ncausal: true\n").allowed().tolist() == [
            [False, False],
            [True, True],
        ]
        assert spec_of(base + "mask: causal\ncausal: false\n").settings.causal

    def test_causal_flag_adds_to_the_document(self) -> None:
        """--causal combines with a mask matrix from the file."""
        base = "q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [2]]\nmask: [[0, 1], [1, 1]]\n"
        assert spec_of(base, causal=True).allowed().tolist() == [[False, False], [True, True]]

    def test_gqa_scale_layout(self) -> None:
        """kv_heads, scale and layout are read; k and v have kv_heads × d_k columns."""
        spec = spec_of(
            "heads: 4\nkv_heads: 2\nscale: 0.5\nlayout: interleaved\n"
            "q: [[1, 2, 3, 4]]\nk: [[1, 2], [3, 4]]\nv: [[1, 2], [3, 4]]\n"
        )
        assert (spec.settings.kv_heads, spec.settings.group_size, spec.multiplier, spec.settings.layout) == (
            2,
            2,
            0.5,
            "interleaved",
        )
        assert [h // spec.settings.group_size for h in range(4)] == [0, 0, 1, 1]

    def test_drop_heads_override_counts_from_0(self) -> None:
        """--drop-head 1 drops head 1, the second of two: the number is kept as given."""
        assert spec_of(PROJECTED + "heads: 2\n", drop_heads=(1,)).settings.dropped_heads == (1,)


class TestRealAttentionErrors:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            (PROJECTED + "q: [[1, 2]]\n", "give either x with w_q, w_k, w_v or direct q, k, v, not both"),
            ("x: [[1, 2]]\nw_q: [[1, 0], [0, 1]]\n", "missing w_k, w_v: x is projected by w_q, w_k and w_v"),
            ("w_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\n", "w_q: projections need x (the input rows)"),
            (PROJECTED + "b_q: [1, 2, 3]\n", "b_q: has 3 values but w_q has 2 columns"),
            (PROJECTED + "b_o: [1, 2]\n", "b_o: a bias needs its weight w_o"),
            (PROJECTED + "w_o: [[1, 0, 0]]\n", "w_o must have 2 rows (the concatenated heads), got 1"),
            ("x: [[1, 2]]\nw_q: [[1], [0], [0]]\nw_k: [[1], [0]]\nw_v: [[1], [0]]\n",
             "w_q must have 2 rows (x has 2 columns), got 3"),
            ("q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [1]]\nmask: [[1, 0]]\n", "mask: expected 'causal' or a 2 × 2"),
            ("q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [1]]\nmask: [[1, 0], [1, 2]]\n", "mask[1][1]: expected 0 or 1, got int 2"),
            ("q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [1]]\nmask: triangular\n", "mask: expected 'causal' or a 2 × 2"),
            ("q: [[1], [1]]\nk: [[1], [1]]\nv: [[1], [1]]\npadding: [0]\n", "padding: expected 2 flags (0 or 1), got 1 values"),
            ("heads: 4\nkv_heads: 3\nq: [[1, 2, 3, 4]]\nk: [[1, 2, 3]]\nv: [[1, 2, 3]]\n",
             "heads 4 is not divisible by kv_heads 3; kv_heads that work: 1, 2, 4"),
            ("heads: 4\nkv_heads: 2\nq: [[1, 2, 3, 4]]\nk: [[1, 2, 3]]\nv: [[1, 2, 3]]\n",
             "keys and values must have kv_heads × d_k = 2 × 1 = 2 columns, got 3"),
            ("scale: big\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "scale: expected a number or one of sqrt_dk, sqrt_d_model, none"),
            ("layout: diagonal\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "layout: expected one of contiguous, interleaved"),
            ("tokens: [a]\nquery_tokens: [a]\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "give tokens (self-attention) or query_tokens"),
            ("key_tokens: [a, b]\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "key_tokens: 2 key tokens given but there are 1 keys"),
        ],
    )  # fmt: skip
    def test_message(self, text: str, message: str) -> None:
        """Each mistake in the real-attention keys is a located, specific message."""
        assert message in error_of(text)

    def test_drop_head_out_of_range(self) -> None:
        """Dropping a head that does not exist names the valid range."""
        with pytest.raises(ConfigError, match=r"cannot drop head 2: heads are numbered 0\.\.1 \(or -2\.\.-1\)$"):
            spec_of(PROJECTED + "heads: 2\n", drop_heads=(2,))

    def test_select_queries_keeps_causal_positions(self) -> None:
        """A selected query row keeps its causal mask from its original position."""
        spec = spec_of("q: [[1], [1], [1]]\nk: [[1], [1], [1]]\nv: [[1], [2], [3]]\nmask: causal\n")
        assert spec.select_queries([1]).allowed().tolist() == [[True, True, False]]
        projected = spec_of(PROJECTED + "mask: causal\n").select_queries([2])
        assert projected.n_keys == 3 and np.array_equal(projected.inputs.x, [[5.0, 6.0]])
