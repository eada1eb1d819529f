from __future__ import annotations

import numpy as np
import pytest

from attnx.errors import ConfigError, LimitError
from attnx.io import Overrides, builtin_document, load_spec
from attnx.io.documents import Document, parse_document
from attnx.io.schema import random_qkv, spec_from_document
from attnx.limits import Limits


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
        """Nesting past the depth cap is an error that names the cap, not a recursion crash."""
        with pytest.raises(
            LimitError, match=r"^in\.yaml:1:35: level 33 of nesting exceeds the depth cap of 32 levels; "
        ):
            parse_document("q: " + "[" * 100 + "]" * 100, "in.yaml")


class TestCapsAndCells:
    """The schema checks shapes against the caps before building arrays, and every cell's type and range."""

    def limited(self, text: str, **caps: int) -> str:
        with pytest.raises(LimitError) as info:
            spec_from_document(parse_document(text, "in.yaml", Limits(**caps)))
        return str(info.value)

    def test_matrix_over_the_element_cap(self) -> None:
        """q of 3 × 4 under a cap of 10 elements is refused at q, before its cells are read."""
        assert self.limited("q: [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, x]]\nk: [[1]]\nv: [[1]]\n", max_elements=10) == (
            "in.yaml:1:4: q: an array of 3 × 4 (12 elements) exceeds the element cap of 10 elements per array; "
            "raise it with --max-elements or ATTNX_MAX_ELEMENTS"
        )

    def test_tokens_over_the_dimension_cap(self) -> None:
        """Five tokens under a dimension cap of 4."""
        assert self.limited("seed: 1\ntokens: [a, b, c, d, e]\n", max_dimension=4).startswith(
            "in.yaml:2:9: tokens: an axis of 5 exceeds the dimension cap of 4 per axis"
        )

    def test_seed_width_is_checked_before_drawing(self) -> None:
        """d_model 10**9 with a seed is refused before 3 × 2 × 10**9 numbers are drawn."""
        assert self.limited("seed: 1\ntokens: [a, b]\nd_model: 1000000000\n").startswith(
            "in.yaml:3:10: d_model: an axis of 1,000,000,000 exceeds the dimension cap of 1,048,576 per axis"
        )

    def test_seed_width_from_the_command_line(self) -> None:
        """--d-model on the command line meets the same cap (no place to point at in a file)."""
        with pytest.raises(LimitError, match=r"^command line: d_model: an axis of 2,000,000 exceeds"):
            load_spec(overrides=Overrides(seed=1, tokens=("a",), d_model=2_000_000))

    @pytest.mark.parametrize(
        ("cell", "got"),
        [
            (".nan", "expected a finite number, got nan"),
            ("-.inf", "expected a finite number, got -inf"),
            ("1" * 400, "expected a finite number, got an integer of 400 digits"),
            ("yes", "expected a number, got a boolean (true)"),
            ("1e3", "expected a number, got text '1e3' (write 1000.0, not 1e3: YAML 1.1 reads 1e3 as text)"),
            ("null", "expected a number, got nothing (null)"),
        ],
    )
    def test_cells(self, cell: str, got: str) -> None:
        """NaN, infinities, integers too large for float64, booleans, text and null are located errors."""
        assert error_of(f"q: [[1, {cell}]]\nk: [[1, 1]]\nv: [[1, 1]]\n") == f"in.yaml:1:9: q[0][1]: {got}"

    def test_scale_too_large_for_float64(self) -> None:
        """An integer scale beyond float64 is refused (it used to crash math.isfinite)."""
        assert "scale: expected a number or one of sqrt_dk, sqrt_d_model, none, got int 1111" in error_of(
            "q: [[1]]\nk: [[1]]\nv: [[1]]\nscale: " + "1" * 400 + "\n"
        )

    @pytest.mark.parametrize("token", ['"\\e[31mred"', '"a\\x00b"', '"\\uD800"'])
    def test_control_characters_in_tokens(self, token: str) -> None:
        """Escape sequences, NUL and lone surrogates never reach a terminal as token labels."""
        assert "tokens[0]: control character U+" in error_of(f"tokens: [{token}]\nq: [[1]]\nk: [[1]]\nv: [[1]]\n")

    def test_arrays_for_scalar_keys(self) -> None:
        """An .npz may hold arrays under scalar keys: they are refused, not compared elementwise."""
        doc = Document(
            {"q": np.eye(1), "k": np.eye(1), "v": np.eye(1), "version": np.array([]), "layout": np.ones(2)}, "in.npz"
        )
        with pytest.raises(ConfigError, match=r"^in\.npz: version: unsupported input version array"):
            spec_from_document(doc)
        doc = Document({"q": np.eye(1), "k": np.eye(1), "v": np.eye(1), "layout": np.ones(2)}, "in.npz")
        with pytest.raises(
            ConfigError, match=r"^in\.npz: layout: expected one of contiguous, interleaved, got ndarray"
        ):
            spec_from_document(doc)

    def test_spec_carries_the_limits(self) -> None:
        """The spec keeps the caps it was read under, for compute to check the arrays it builds."""
        limits = Limits(max_elements=99)
        assert spec_from_document(parse_document("q: [[1]]\nk: [[1]]\nv: [[1]]\n", "in.yaml", limits)).limits == limits
