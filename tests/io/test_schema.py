"""Input schemas: valid and invalid inputs, caps and cells, hand-written inputs, results as inputs, GQA and overrides."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnx.core.spec import AttentionSpec
from attnx.errors import ConfigError, LimitError
from attnx.io import builtin_document
from attnx.io.documents import Document, parse_document
from attnx.io.schema import random_qkv, spec_from_document
from attnx.limits import Limits
from tests.specs import loaded, split_overrides


def spec_of(text: str, **values: Any) -> AttentionSpec:
    """The spec of a YAML ``text``, with the flags' ``values`` put in as the command line puts them."""
    described, settings = split_overrides(**values)
    return settings.apply(spec_from_document(parse_document(text, "in.yaml"), described))


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
        assert spec.settings.heads == 1

    def test_json_has_the_same_keys(self) -> None:
        """JSON input uses the YAML keys and gives the same spec."""
        text = (
            '{"version": 1, "tokens": ["a", "b"], "heads": 2,'
            ' "q": [[1,0],[0,1]], "k": [[1,0],[0,1]], "v": [[1,2],[3,4]]}'
        )
        spec = spec_from_document(parse_document(text, "in.json"))
        assert spec.tokens == ("a", "b")
        np.testing.assert_array_equal(spec.inputs.v, [[1, 2], [3, 4]])

    def test_seed_draws_qkv(self) -> None:
        """A seed draws q, k, v as default_rng(seed).standard_normal((3, N, d_model))."""
        spec = spec_of("seed: 7\ntokens: [a, b, c]\nd_model: 4\nheads: 2\n")
        expected = np.random.default_rng(7).standard_normal((3, 3, 4))
        np.testing.assert_array_equal(spec.inputs.q, expected[0])
        np.testing.assert_array_equal(spec.inputs.v, expected[2])
        assert random_qkv(7, 3, 4)[1].tolist() == expected[1].tolist()

    def test_command_line_heads_override_the_file(self) -> None:
        """--heads replaces the document's heads."""
        assert loaded(heads=4).settings.heads == 4

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
            ("q: [[1, 1_000]]\nk: [[1]]\nv: [[1]]\n", "in.yaml:1:9: q[0][1]: expected a number, got text '1_000'"),
            ("q: [[1, '2.5']]\nk: [[1]]\nv: [[1]]\n", "got text '2.5' (a number in quotes is text: remove the quotes)"),
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
                "tokens: [a, false]\nq: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\n",
                "tokens[1]: expected a string, got a boolean (false) (quote it)",
            ),
            ("version: 2\nq: [[1]]\nk: [[1]]\nv: [[1]]\n", "unsupported input version 2"),
            ("- 1\n- 2\n", "expected a mapping of keys"),
            ("q: &x [[1]]\nk: *x\nb: *x\n", "in.yaml:3:1: b: unknown key"),
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
            loaded(seed=1, tokens=("a",), d_model=2_000_000)

    @pytest.mark.parametrize(
        ("cell", "got"),
        [
            (".nan", "expected a finite number, got nan"),
            ("-.inf", "expected a finite number, got -inf"),
            ("1" * 400, "expected a finite number, got an integer of 400 digits"),
            ("true", "expected a number, got a boolean (true)"),
            ("yes", "expected a number, got text 'yes'"),
            ("1:30", "expected a number, got text '1:30'"),
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

    def test_projected_q_is_checked_where_the_input_is_read(self) -> None:
        """X of 2 × 1 projected to 8 columns makes a Q of 16 elements: refused by the loader under a cap of 10."""
        text = "x: [[1], [2]]\nw_q: [[1, 1, 1, 1, 1, 1, 1, 1]]\nw_k: [[1]]\nw_v: [[1]]\nheads: 8\nkv_heads: 1\n"
        with pytest.raises(
            LimitError, match=r"^in\.yaml: Q: an array of 2 × 8 \(16 elements\) exceeds the element cap"
        ):
            spec_from_document(parse_document(text, "in.yaml", Limits(max_elements=10)))


class TestHandWrittenInputs:
    """Inputs written the natural way: YAML 1.2 numbers, unquoted words, tokens as one string."""

    def test_numbers_as_people_write_them(self) -> None:
        """1e-3, 1e3, .5 and -1.5E+2 are numbers in a matrix."""
        spec = spec_of("q: [[1e-3, 1e3], [.5, -1.5E+2]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n")
        np.testing.assert_array_equal(spec.inputs.q, [[0.001, 1000.0], [0.5, -150.0]])

    def test_words_yaml_1_1_took_for_booleans(self) -> None:
        """on, no, yes and off are tokens, as written."""
        spec = spec_of("tokens: [on, no, yes, off]\nseed: 1\n")
        assert spec.tokens == ("on", "no", "yes", "off")

    def test_tokens_as_one_string(self) -> None:
        """tokens: The cat sat on mat is five tokens, split at spaces as --tokens is."""
        spec = spec_of("tokens: The cat sat  on mat\nseed: 1\n")
        assert spec.tokens == ("The", "cat", "sat", "on", "mat")
        assert spec.inputs.q.shape == (5, 8)

    def test_query_and_key_tokens_as_strings(self) -> None:
        """query_tokens and key_tokens take one string of words too."""
        spec = spec_of(
            "query_tokens: le chat\nkey_tokens: the cat sat\nq: [[1], [2]]\nk: [[1], [2], [3]]\nv: [[1], [2], [3]]\n"
        )
        assert spec.tokens == ("le", "chat") and spec.key_tokens == ("the", "cat", "sat")

    @pytest.mark.parametrize(
        ("tokens", "message"),
        [
            ('" "', "in.yaml:1:9: tokens: expected a non-empty list of strings or one string of words, got text ' '"),
            ("a b c", "in.yaml:1:9: tokens: 3 tokens given but there are 2 queries"),
            ('"a \\e[31mb"', "in.yaml:1:9: tokens: control character U+001B in the tokens (tokens are printed)"),
            ("[a, [b]]", "in.yaml:1:13: tokens[1]: expected a string, got a list"),
        ],
    )
    def test_bad_token_strings(self, tokens: str, message: str) -> None:
        """A blank string, a count that does not match, control characters and nested lists are located errors."""
        assert error_of(f"tokens: {tokens}\nq: [[1], [2]]\nk: [[1], [2]]\nv: [[1], [2]]\n") == message

    def test_the_shipped_example_is_written_naturally(self) -> None:
        """configs/cat-sat-on-mat.yaml writes its tokens unquoted, and they read as the textbook's words."""
        from pathlib import Path

        text = (Path(__file__).parents[2] / "configs" / "cat-sat-on-mat.yaml").read_text("utf-8")
        assert "tokens: [The, cat, sat, on, mat]\n" in text
        assert spec_of(text).tokens == ("The", "cat", "sat", "on", "mat")


class TestResultGivenAsInput:
    """attnx's own JSON output given where an input is expected says what it is and what to do with it."""

    def test_run_result(self) -> None:
        """A `run --format json` result names itself and points to attnx diff."""
        text = '{"format_version": "1.1", "tokens": ["a"], "heads": 1, "weights": [[[1.0]]]}'
        assert error_of(text, "out.json") == (
            "out.json: this is an attnx result (from `attnx run --format json`), not an input: compare it with "
            "`attnx diff out.json OTHER` (another result or an input), or run the input it was made from"
        )

    def test_other_output(self) -> None:
        """Other attnx JSON (a trace, a sweep) is named as output, and the message says what an input holds."""
        assert error_of('{"format_version": "1.1", "token": "a", "query": 0}', "trace.json") == (
            "trace.json: this is attnx output (JSON with format_version), not an input; an input holds q, k and v, "
            "x with w_q, w_k and w_v, or a seed and tokens"
        )

    def test_diff_still_reads_results(self, tmp_path) -> None:
        """load_input_or_result still gives a run result back as a result (attnx diff reads it)."""
        from attnx.io.results import SavedResult, load_input_or_result

        path = tmp_path / "r.json"
        path.write_text('{"format_version": "1.1", "tokens": ["a"], "weights": [[[1.0]]]}')
        loaded = load_input_or_result(str(path))
        assert isinstance(loaded, SavedResult) and loaded.tensors["weights"].tolist() == [[[1.0]]]


class TestRandomGqa:
    """Random inputs draw K and V with kv_heads × d_k columns, from the same stream as before."""

    def test_kv_heads_equal_to_heads_draws_the_numbers_of_before(self) -> None:
        """With kv_width = d_model the draw is exactly default_rng(seed).standard_normal((3, N, d_model))."""
        q, k, v = random_qkv(3, 5, 8, 8)
        expected = np.random.default_rng(3).standard_normal((3, 5, 8))
        np.testing.assert_array_equal(np.stack([q, k, v]), expected)
        np.testing.assert_array_equal(np.stack(random_qkv(3, 5, 8)), expected)

    def test_grouped_draw(self) -> None:
        """Q first (N × d_model), then K and V together (2 × N × kv_heads·d_k), from one generator."""
        q, k, v = random_qkv(3, 5, 8, 4)
        rng = np.random.default_rng(3)
        np.testing.assert_array_equal(q, rng.standard_normal((5, 8)))
        expected_k, expected_v = rng.standard_normal((2, 5, 4))
        np.testing.assert_array_equal(k, expected_k)
        np.testing.assert_array_equal(v, expected_v)
        np.testing.assert_array_equal(q, np.random.default_rng(3).standard_normal((3, 5, 8))[0])  # Q never changes

    def test_command_line(self) -> None:
        """--seed 0 --tokens 'The cat sat on mat' --d-model 8 -H 4 --kv-heads 2: K and V are 5 × 4, not pooled."""
        spec = loaded(seed=0, tokens=("The", "cat", "sat", "on", "mat"), d_model=8, heads=4, kv_heads=2)
        assert (spec.settings.heads, spec.settings.kv_heads, spec.d_k, spec.kv_pooled_from) == (4, 2, 2, None)
        assert spec.inputs.q.shape == (5, 8) and spec.inputs.k.shape == spec.inputs.v.shape == (5, 4)
        _, k, v = random_qkv(0, 5, 8, 4)
        np.testing.assert_array_equal(spec.inputs.k, k)
        np.testing.assert_array_equal(spec.inputs.v, v)

    def test_seed_in_a_file(self) -> None:
        """seed:, heads: 4 and kv_heads: 1 in a file draw K and V of one head (d_k columns); the same seed, the same draw."""
        text = "seed: 5\ntokens: [a, b, c]\nd_model: 8\nheads: 4\nkv_heads: 1\n"
        spec, again = spec_of(text), spec_of(text)
        assert spec.inputs.k.shape == (3, 2) and spec.settings.kv_heads == 1
        np.testing.assert_array_equal(spec.inputs.k, again.inputs.k)
        np.testing.assert_array_equal(spec.inputs.v, random_qkv(5, 3, 8, 2)[2])

    def test_kv_heads_override_on_a_seeded_file(self) -> None:
        """--kv-heads on a seeded file sets the draw; it does not pool."""
        spec = spec_of("seed: 5\ntokens: [a, b, c]\nd_model: 8\nheads: 4\n", kv_heads=2)
        assert spec.inputs.k.shape == (3, 4) and spec.kv_pooled_from is None

    def test_kv_heads_that_do_not_divide_heads(self) -> None:
        """A random input asked for 3 K/V heads of 4 query heads names the counts that work."""
        with pytest.raises(ConfigError, match=r"heads 4 is not divisible by kv_heads 3; kv_heads that work: 1, 2, 4$"):
            loaded(seed=0, tokens=("a",), d_model=8, heads=4, kv_heads=3)


K4 = "[[1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 0, 4, 4, 8, 8]]"  # 4 K/V heads of d_k 2
V4 = "[[1, 1, 1, 1, 1, 1, 1, 1], [2, 0, 2, 0, 2, 0, 2, 0]]"


class TestKvHeadsOverride:
    """--kv-heads below the input's K/V heads mean-pools them within each group (Ainslie et al., 2023)."""

    def pooled(self, text: str, kv_heads: int):
        return spec_of(text, kv_heads=kv_heads)

    def test_contiguous_k_and_v(self) -> None:
        """4 → 2: K/V head 0 is the mean of heads 0 and 1 (columns 0-3), head 1 of heads 2 and 3 (columns 4-7)."""
        spec = self.pooled(f"heads: 4\nq: {K4}\nk: {K4}\nv: {V4}\n", 2)
        np.testing.assert_array_equal(spec.inputs.k, [[2, 3, 6, 7], [0, 0, 6, 6]])
        np.testing.assert_array_equal(spec.inputs.v, [[1, 1, 1, 1], [2, 0, 2, 0]])
        np.testing.assert_array_equal(
            spec.inputs.q, [[1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 0, 4, 4, 8, 8]]
        )  # Q untouched
        assert (spec.settings.kv_heads, spec.kv_pooled_from, spec.settings.group_size) == (2, 4, 2)

    def test_interleaved(self) -> None:
        """With layout interleaved, head h owns columns h and h + 4: 4 → 2 gives columns (h, h + 2) of 2 heads."""
        spec = self.pooled(f"heads: 4\nlayout: interleaved\nq: {K4}\nk: {K4}\nv: {V4}\n", 2)
        # head h = [row[h], row[h+4]]; new head 0 = mean(heads 0, 1), new head 1 = mean(heads 2, 3)
        np.testing.assert_array_equal(spec.inputs.k, [[1.5, 3.5, 5.5, 7.5], [0, 0, 4, 8]])
        np.testing.assert_array_equal(spec.inputs.v, [[1, 1, 1, 1], [1, 1, 1, 1]])

    def test_to_one_head(self) -> None:
        """4 → 1 (MQA) averages all four heads."""
        spec = self.pooled(f"heads: 4\nq: {K4}\nk: {K4}\nv: {V4}\n", 1)
        np.testing.assert_array_equal(spec.inputs.k, [[4, 5], [3, 3]])
        assert spec.kv_pooled_from == 4

    def test_from_a_gqa_input(self) -> None:
        """An input with kv_heads 2 pools to 1 and remembers 2."""
        spec = self.pooled(
            "heads: 4\nkv_heads: 2\nq: [[1, 2, 3, 4, 5, 6, 7, 8]]\nk: [[1, 3, 5, 7]]\nv: [[0, 0, 2, 2]]\n", 1
        )
        np.testing.assert_array_equal(spec.inputs.k, [[3, 5]])
        np.testing.assert_array_equal(spec.inputs.v, [[1, 1]])
        assert (spec.settings.kv_heads, spec.kv_pooled_from) == (1, 2)

    def test_projected_input_pools_the_weights(self) -> None:
        """x with w_k, b_k: the pooled weights' projection equals the pooled projection (projection is linear)."""
        rng = np.random.default_rng(0)
        x, w, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 4)), rng.standard_normal(4)
        lists = {name: value.tolist() for name, value in (("x", x), ("w_q", w), ("w_k", w), ("w_v", w))}
        text = "heads: 2\n" + "".join(f"{name}: {value}\n" for name, value in lists.items()) + f"b_k: {b.tolist()}\n"
        spec = self.pooled(text, 1)
        assert spec.inputs.w_k.weight.shape == (4, 2) and spec.inputs.w_v.bias is None
        projected = x @ w + b  # (3, 4): heads 0 and 1 of d_k 2
        expected = (projected[:, :2] + projected[:, 2:]) / 2
        np.testing.assert_allclose(x @ spec.inputs.w_k.weight + spec.inputs.w_k.bias, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(spec.inputs.w_q.weight, w)  # W_q untouched
        assert spec.kv_pooled_from == 2

    def test_same_count_is_no_pooling(self) -> None:
        """--kv-heads equal to the input's K/V heads changes nothing."""
        spec = self.pooled(f"heads: 4\nq: {K4}\nk: {K4}\nv: {V4}\n", 4)
        assert spec.kv_pooled_from is None
        np.testing.assert_array_equal(spec.inputs.k, [[1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 0, 4, 4, 8, 8]])

    def test_narrow_k_without_kv_heads_takes_the_override(self) -> None:
        """K/V narrower than Q with no kv_heads in the file: --kv-heads says how many heads they hold."""
        spec = self.pooled("heads: 4\nq: [[1, 2, 3, 4, 5, 6, 7, 8]]\nk: [[1, 3, 5, 7]]\nv: [[0, 0, 2, 2]]\n", 2)
        assert (spec.settings.kv_heads, spec.kv_pooled_from) == (2, None)
        np.testing.assert_array_equal(spec.inputs.k, [[1, 3, 5, 7]])

    @pytest.mark.parametrize(
        ("kv_heads", "message"),
        [
            (
                8,
                "in.yaml: the input has 4 K/V heads, fewer than 8 (pooling only merges heads); kv_heads that work: 1, 2, 4",
            ),
            (3, "in.yaml: the input's 4 K/V heads do not pool evenly into 3; kv_heads that work: 1, 2, 4"),
        ],
    )
    def test_counts_that_cannot_be_pooled(self, kv_heads: int, message: str) -> None:
        """More K/V heads than the input has, or a count that does not divide them, names the counts that work."""
        with pytest.raises(ConfigError) as info:
            self.pooled(f"heads: 4\nq: {K4}\nk: {K4}\nv: {V4}\n", kv_heads)
        assert str(info.value) == message

    def test_with_heads_override(self) -> None:
        """-H 4 --kv-heads 2 on the worked example (d_model 4): four heads of d_k 1 share two pooled K/V heads."""
        spec = loaded(heads=4, kv_heads=2)
        assert (spec.settings.heads, spec.settings.kv_heads, spec.kv_pooled_from, spec.d_k) == (4, 2, 4, 1)
        np.testing.assert_array_equal(
            spec.inputs.k[0], [0.5, 0.5]
        )  # The's K row [0, 1, 0, 1]: means of (0, 1) and (0, 1)


class TestDropHeads:
    """--drop-head counts from 0, as every table and the JSON do: the schema passes the numbers through."""

    def test_passed_through(self) -> None:
        """Dropping head 0 (--drop-head 0) zeroes it."""
        assert loaded(drop_heads=(0,)).settings.dropped_heads == (0,)

    def test_from_the_end(self) -> None:
        """-1 is the last head (1 of two), once however it is named."""
        assert loaded(drop_heads=(-1, 1)).settings.dropped_heads == (1,)

    def test_out_of_range(self) -> None:
        """Head 2 of two heads is out of range, and the message says heads are numbered 0..1."""
        with pytest.raises(ConfigError, match=r"cannot drop head 2: heads are numbered 0\.\.1 \(or -2\.\.-1\)$"):
            loaded(drop_heads=(2,))


class TestRope:
    """The ``rope`` key: rotary positions for any input, checked where it is written."""

    QKV = "q: [[1, 0], [0, 1]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n"

    def test_true_is_the_defaults_and_a_mapping_sets_them(self) -> None:
        """`rope: true` turns with θ 10000 and half pairs; a mapping replaces what it names."""
        from attnx.core.positions import Rotary

        assert spec_of(self.QKV + "rope: true\n").settings.rotary == Rotary()
        written = spec_of(self.QKV + "rope: {theta: 500, pairs: interleaved}\n").settings.rotary
        assert written == Rotary(theta=500.0, pairs="interleaved")
        assert spec_of(self.QKV).settings.rotary is None and spec_of(self.QKV + "rope: false\n").settings.rotary is None

    def test_command_line_replaces_the_keys_it_names(self) -> None:
        """--rope-pairs on a file with `rope: {theta: 500}` keeps θ 500; --rope-theta alone adds rope."""
        from attnx.core.positions import Rotary

        merged = spec_of(self.QKV + "rope: {theta: 500}\n", rope_pairs="interleaved").settings.rotary
        assert merged == Rotary(theta=500.0, pairs="interleaved")
        assert spec_of(self.QKV, rope_theta=50.0).settings.rotary == Rotary(theta=50.0)

    def test_scaling(self) -> None:
        """`scaling` under `rope` stretches the frequencies as a Llama 3.1 checkpoint's rope_scaling does."""
        from attnx.core.positions import RopeScaling, Rotary

        text = "rope: {theta: 500, scaling: {kind: llama3, factor: 8, original_max_positions: 16}}\n"
        scaling = RopeScaling("llama3", 8, 1.0, 4.0, 16)
        assert spec_of(self.QKV + text).settings.rotary == Rotary(theta=500.0, scaling=scaling)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("rope: {theta: 1}\n", "in.yaml:4:7: rope: theta must be a finite number above 1, got 1"),
            ("rope: {base: 10}\n", "in.yaml:4:8: rope.base: unknown key; known keys: theta, pairs, fraction, scaling"),
            (
                "rope: 5\n",
                "in.yaml:4:7: rope: expected true, false or a mapping of theta, pairs, fraction, scaling, got",
            ),
            (
                "rope: {scaling: {kind: ntk, factor: 2}}\n",
                "in.yaml:4:17: rope.scaling: kind must be one of linear, dynamic, yarn, longrope, llama3, proportional, "
                "got 'ntk'",
            ),
            ("rope: {scaling: {kind: linear}}\n", "in.yaml:4:17: rope.scaling: needs kind and factor"),
            (
                "rope: {scaling: {kind: linear, factor: 2, beta: 1}}\n",
                "in.yaml:4:43: rope.scaling.beta: unknown key; known keys: kind, factor",
            ),
            ("rope: {scaling: 2}\n", "in.yaml:4:17: rope.scaling: expected a mapping of kind, factor"),
            ("rope: {pairs: adjacent}\n", "in.yaml:4:7: rope: pairs must be one of half, interleaved, got 'adjacent'"),
        ],
    )
    def test_bad_rope_is_one_located_line(self, text: str, message: str) -> None:
        """A wrong `rope` value is refused at its place in the file."""
        assert error_of(self.QKV + text).startswith(message)
