from __future__ import annotations

import numpy as np
import pytest

from attnx.errors import ConfigError
from attnx.io import Overrides, builtin_document, load_spec
from attnx.io.documents import parse_document
from attnx.io.schema import random_qkv, spec_from_document


def spec_of(text: str, overrides: Overrides | None = None):
    return spec_from_document(parse_document(text, "in.yaml"), overrides)


def error_of(text: str, name: str = "in.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        spec_from_document(parse_document(text, name))
    return str(info.value)


class TestValidInputs:
    def test_builtin_example_equals_shipped_config(self) -> None:
        """configs/cat-sat-on-mat.yaml is the same document as the built-in example."""
        from pathlib import Path

        shipped = Path(__file__).parents[2] / "configs" / "cat-sat-on-mat.yaml"
        assert parse_document(shipped.read_text(), "x").data == builtin_document().data

    def test_default_tokens(self) -> None:
        """Without tokens, rows are labelled t0..t{N-1}."""
        spec = spec_of("q: [[1, 2]]\nk: [[1, 2]]\nv: [[0, 1]]\n")
        assert spec.tokens == ("t0",)
        assert spec.heads == 1

    def test_json_has_the_same_keys(self) -> None:
        """JSON input uses the YAML keys and gives the same spec."""
        text = (
            '{"version": 1, "tokens": ["a", "b"], "heads": 2,'
            ' "q": [[1,0],[0,1]], "k": [[1,0],[0,1]], "v": [[1,2],[3,4]]}'
        )
        spec = spec_from_document(parse_document(text, "in.json"))
        assert spec.tokens == ("a", "b")
        np.testing.assert_array_equal(spec.v, [[1, 2], [3, 4]])

    def test_seed_draws_qkv(self) -> None:
        """A seed draws q, k, v as default_rng(seed).standard_normal((3, N, d_model))."""
        spec = spec_of("seed: 7\ntokens: [a, b, c]\nd_model: 4\nheads: 2\n")
        expected = np.random.default_rng(7).standard_normal((3, 3, 4))
        np.testing.assert_array_equal(spec.q, expected[0])
        np.testing.assert_array_equal(spec.v, expected[2])
        assert random_qkv(7, 3, 4)[1].tolist() == expected[1].tolist()

    def test_command_line_heads_override_the_file(self) -> None:
        """--heads replaces the document's heads."""
        assert load_spec(overrides=Overrides(heads=4)).heads == 4

    def test_numeric_tokens_become_text(self) -> None:
        """A token written as a bare number is read as its text."""
        assert spec_of("tokens: [1, b]\nq: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\n").tokens == ("1", "b")


class TestInvalidInputs:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("head: 2\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "in.yaml:1:1: head: unknown key (did you mean 'heads'?)"),
            (
                "q: [[1, 2], [3]]\nk: [[1]]\nv: [[1]]\n",
                "in.yaml:1:13: q[1]: has 1 values but row 0 has 2 (ragged matrix)",
            ),
            ("q: []\nk: [[1]]\nv: [[1]]\n", "in.yaml:1:4: q: expected a non-empty list of rows, got an empty list"),
            ("q: [[1, x]]\nk: [[1]]\nv: [[1]]\n", "in.yaml:1:9: q[0][1]: expected a number, got text 'x'"),
            ("q: [[1, 1e3]]\nk: [[1]]\nv: [[1]]\n", "q[0][1]: expected a number, got text '1e3' (write 1000.0"),
            ("q: [[1, true]]\nk: [[1]]\nv: [[1]]\n", "q[0][1]: expected a number, got a boolean (true)"),
            ("q: [[.nan]]\nk: [[1]]\nv: [[1]]\n", "q[0][0]: expected a finite number, got nan"),
            (
                "q: [[1, 2]]\nk: [[1, 2], [3, 4]]\nv: [[1, 2]]\n",
                "k and v must have the same shape (a row per key), got k 2x2, v 1x2",
            ),
            (
                "heads: 3\nq: [[1, 2]]\nk: [[1, 2]]\nv: [[1, 2]]\n",
                "d_model 2 is not divisible by heads 3; head counts that work: 1, 2",
            ),
            ("heads: 0\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "in.yaml:1:8: heads: must be positive, got 0"),
            ("heads: -2\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "heads: must be positive, got -2"),
            ("heads: two\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "heads: expected a whole number, got text 'two'"),
            ("q: [[1]]\nk: [[1]]\n", "missing v: give q, k and v, x with w_q, w_k and w_v, or a seed"),
            ("seed: 1\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "q: give either the inputs or a seed to draw q, k and v from"),
            ("seed: 1\n", "a seed needs tokens"),
            (
                "tokens: [a]\nq: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\n",
                "tokens: 1 tokens given but there are 2 queries",
            ),
            (
                "tokens: [a, no]\nq: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\n",
                "tokens[1]: expected a string, got a boolean (false) (quote it)",
            ),
            ("version: 2\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "unsupported input version 2"),
            ("- 1\n- 2\n", "expected a mapping of keys"),
            ("a: &x [1]\nb: *x\n", "in.yaml:2:4: YAML aliases (*name) are not accepted"),
            ("q: [[1]]\nq: [[2]]\n", "in.yaml:2:1: duplicate key 'q'"),
        ],
    )
    def test_message(self, text: str, message: str) -> None:
        """Each mistake gives a message that says where and what."""
        assert message in error_of(text)

    def test_json_duplicate_key(self) -> None:
        """JSON duplicate keys are refused, not silently overwritten."""
        assert "duplicate key 'q'" in error_of('{"q": [[1]], "q": [[2]]}', "in.json")

    def test_deep_nesting_is_refused(self) -> None:
        """Nesting past the depth bound is an error, not a recursion crash."""
        assert "nested more than 32 levels deep" in error_of("q: " + "[" * 100 + "]" * 100)
