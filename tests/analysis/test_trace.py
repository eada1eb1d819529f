"""The trace of one query: the worked example's numbers, terms, keys, the softmax, and resolving query and head."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.analysis.trace import (
    Trace,
    build_trace,
    masked_keys,
    resolve_head,
    resolve_query,
    select_keys,
    select_terms,
    softmax_terms,
)
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import AmbiguousError, ChoiceError, UsageError
from attnx.io import load_spec
from tests.conftest import DECIMALS_4, OUTPUT, TOKENS, TRACES
from tests.specs import loaded, spec_of

CONFIGS = Path(__file__).parents[2] / "configs"


def worked_trace(token: str, **kwargs: Any) -> Trace:
    """The trace of ``token`` in the worked example, computed for that query row only."""
    spec = load_spec()
    return build_trace(compute(spec.select_queries([TOKENS.index(token)])), **kwargs)


def random_spec(n: int, d_model: int, heads: int, seed: int = 0) -> AttentionSpec:
    """Random Q, K, V with tokens t0 .. t{n-1}."""
    q, k, v = np.random.default_rng(seed).standard_normal((3, n, d_model)) * 2
    tokens = tuple(f"t{i}" for i in range(n))
    return spec_of(q, k, v, heads, tokens, tokens)


def assert_lines_add_up(trace: Trace) -> None:
    """Every key line's shown products plus its remainder give its raw score."""
    for head in trace.heads:
        for line in head.keys:
            shown = float(line.products[list(line.terms)].sum())
            assert shown + line.remainder == pytest.approx(line.raw, rel=1e-12, abs=1e-12)


class TestWorkedExample:
    @pytest.mark.parametrize("token", ["The", "cat"])
    def test_each_head_matches_the_tutorial(self, token: str) -> None:
        """Query slice, dot products, scaled scores, weights and head outputs are the tutorial's numbers."""
        trace = worked_trace(token)
        assert (trace.token, trace.query) == (token, TOKENS.index(token))
        assert len(trace.heads) == 2
        for head, (query, rows, output) in zip(trace.heads, TRACES[token], strict=True):
            assert head.query.tolist() == query
            assert [line.token for line in head.keys] == [row[0] for row in rows]
            for line, (_, _, dot, scaled, weight) in zip(head.keys, rows, strict=True):
                assert line.raw == dot
                assert abs(line.scaled - scaled) < DECIMALS_4
                assert abs(line.weight - weight) < DECIMALS_4
            np.testing.assert_allclose(head.output, output, rtol=0, atol=DECIMALS_4)

    def test_head_0_of_cat(self) -> None:
        """Head 0 of "cat": weights 0.3664, 0.0891, 0.3664, 0.0891, 0.0891 and output [0.4109, 0.1336]."""
        head = worked_trace("cat").heads[0]
        weights = [line.weight for line in head.keys]
        np.testing.assert_allclose(weights, [0.3664, 0.0891, 0.3664, 0.0891, 0.0891], rtol=0, atol=DECIMALS_4)
        np.testing.assert_allclose(head.output, [0.4109, 0.1336], rtol=0, atol=DECIMALS_4)

    def test_contributions_are_weighted_value_rows(self) -> None:
        """Head 0 of "cat": "The" contributes 0.3664 × [1, 0] and "mat" 0.0891 × [0.5, 0.5]."""
        head = worked_trace("cat").heads[0]
        np.testing.assert_allclose(head.keys[0].contribution, [0.3664, 0.0], rtol=0, atol=DECIMALS_4)
        np.testing.assert_allclose(head.keys[4].contribution, [0.0445, 0.0445], rtol=0, atol=DECIMALS_4)
        np.testing.assert_allclose(sum(line.contribution for line in head.keys), head.output, rtol=1e-14)

    @pytest.mark.parametrize("token", ["The", "cat"])
    def test_concatenated_output(self, token: str) -> None:
        """The concatenated output is the tutorial's output row of the token."""
        trace = worked_trace(token)
        np.testing.assert_allclose(trace.output, OUTPUT[TOKENS.index(token)], rtol=0, atol=DECIMALS_4)
        assert trace.projected is None

    def test_products_add_up(self) -> None:
        """With d_k = 2 every product is shown and the two add up to the dot product."""
        for token in TOKENS:
            trace = worked_trace(token)
            assert all(line.terms == (0, 1) and line.remainder == 0.0 for h in trace.heads for line in h.keys)
            assert_lines_add_up(trace)

    def test_dims(self) -> None:
        """Each head says which columns it owns and its d_k."""
        trace = worked_trace("cat")
        assert [h.columns for h in trace.heads] == [range(0, 2), range(2, 4)]
        assert [h.d_k for h in trace.heads] == [2, 2]
        assert (trace.n_heads, trace.n_keys, trace.scale) == (2, 5, pytest.approx(2**-0.5))

    def test_top_keys_include_ties(self) -> None:
        """In head 0 "cat" ties "The" and "sat", in head 1 "The" and "on": all of them are marked."""
        trace = worked_trace("cat")
        assert [line.token for line in trace.heads[0].keys if line.is_top] == ["The", "sat"]
        assert [line.token for line in trace.heads[1].keys if line.is_top] == ["The", "on"]

    def test_uniform_row_marks_every_key(self) -> None:
        """ "on" in head 0 weighs all five keys 0.2: all five are marked, in head 1 only "on" (0.3673)."""
        trace = worked_trace("on")
        assert [line.is_top for line in trace.heads[0].keys] == [True] * 5
        assert [line.token for line in trace.heads[1].keys if line.is_top] == ["on"]

    def test_nothing_masked_without_a_mask(self) -> None:
        """Results carry no mask yet, so no key is masked."""
        assert not any(line.masked for head in worked_trace("The").heads for line in head.keys)

    def test_heads_restrict(self) -> None:
        """heads=(1,) traces the second head only; the concatenated output still has every head."""
        trace = worked_trace("cat", heads=(1,))
        assert [h.head for h in trace.heads] == [1]
        assert trace.output.shape == (4,)


class TestTerms:
    def test_all_terms_up_to_the_limit(self) -> None:
        """Up to the limit every product is shown, in order, with nothing left over."""
        assert select_terms(np.array([3.0, -1.0, 2.0]), 3) == ((0, 1, 2), 0.0)
        assert select_terms(np.array([3.0, -1.0, 2.0]), None) == ((0, 1, 2), 0.0)

    def test_largest_in_index_order_and_the_rest_summed(self) -> None:
        """Past the limit: the largest |products| in index order, the others summed."""
        terms, remainder = select_terms(np.array([0.1, -5.0, 0.2, 4.0, -0.3]), 2)
        assert terms == (1, 3)
        assert remainder == pytest.approx(0.1 + 0.2 - 0.3, abs=1e-15)

    def test_ties_go_to_the_lower_index(self) -> None:
        """Equal magnitudes keep the earlier product."""
        assert select_terms(np.array([1.0, -1.0, 1.0]), 2) == ((0, 1), 1.0)

    def test_elided_lines_add_up_on_a_wide_head(self) -> None:
        """With d_k = 64, eight terms are shown and the other 56 summed: each line still adds up."""
        spec = random_spec(12, 128, 2, seed=3)
        trace = build_trace(compute(spec.select_queries([5])), keys=None)
        lines = [line for head in trace.heads for line in head.keys]
        assert len(lines) == 24
        assert all(len(line.terms) == 8 and line.elided == 56 for line in lines)
        assert_lines_add_up(trace)
        for line in lines:  # the shown ones are the largest in magnitude
            shown = np.abs(line.products[list(line.terms)])
            assert shown.min() >= np.delete(np.abs(line.products), line.terms).max()

    def test_all_terms(self) -> None:
        """terms=None shows all 64 products."""
        trace = build_trace(compute(random_spec(4, 64, 1).select_queries([0])), terms=None)
        assert all(line.terms == tuple(range(64)) and line.remainder == 0.0 for line in trace.heads[0].keys)
        assert_lines_add_up(trace)


class TestKeys:
    def test_top_weights_in_key_order(self) -> None:
        """The ten keys of largest weight are shown in key order."""
        weights = np.array([0.05, 0.3, 0.01, 0.2, 0.02, 0.4, 0.02])
        assert select_keys(weights, 3).tolist() == [1, 3, 5]
        assert select_keys(weights, None).tolist() == list(range(7))

    def test_fifty_keys_collapse_and_still_add_up(self) -> None:
        """With 50 keys: 10 shown, one summary of 40; contributions and weights add up per head."""
        spec = random_spec(50, 16, 4, seed=11)
        result = compute(spec.select_queries([17]))
        trace = build_trace(result)
        for head in trace.heads:
            weights = result.weights[head.head, 0]
            shown = [line.index for line in head.keys]
            assert shown == sorted(np.argsort(-weights)[:10].tolist())
            assert head.rest is not None and head.rest.count == 40 and head.rest.masked == 0
            total = sum(line.contribution for line in head.keys) + head.rest.contribution
            np.testing.assert_allclose(total, head.output, rtol=1e-12, atol=1e-14)
            assert sum(line.weight for line in head.keys) + head.rest.weight == pytest.approx(1.0, rel=1e-12)
            assert [line.index for line in head.keys if line.is_top] == [int(np.argmax(weights))]

    def test_all_keys(self) -> None:
        """keys=None shows all 50 keys and no summary."""
        trace = build_trace(compute(random_spec(50, 8, 2).select_queries([0])), keys=None)
        assert all(len(head.keys) == 50 and head.rest is None for head in trace.heads)


class TestReadsTheResult:
    def test_selected_row_equals_the_full_computation(self) -> None:
        """Tracing one selected query gives the numbers of that row of the full result."""
        spec = random_spec(9, 12, 3, seed=5)
        full = compute(spec)
        trace = build_trace(compute(spec.select_queries([4])), keys=None)
        assert trace.query == 4
        np.testing.assert_allclose(trace.output, full.output[4], rtol=1e-12)
        for head in trace.heads:
            h = head.head
            np.testing.assert_allclose([line.raw for line in head.keys], full.scores[h, 4], rtol=1e-12)
            np.testing.assert_allclose([line.scaled for line in head.keys], full.scaled[h, 4], rtol=1e-12)
            np.testing.assert_allclose([line.weight for line in head.keys], full.weights[h, 4], rtol=1e-12)
            np.testing.assert_allclose(head.output, full.head_outputs[h, 4], rtol=1e-12)

    def test_row_of_a_full_result(self) -> None:
        """build_trace on a full result reads the row it is given."""
        spec = random_spec(6, 4, 2, seed=8)
        full = compute(spec)
        trace = build_trace(full, 3)
        assert (trace.token, trace.query) == ("t3", 3)
        np.testing.assert_array_equal(trace.heads[1].output, full.head_outputs[1, 3])

    def test_causal_mask_marks_later_keys(self) -> None:
        """With a causal mask, keys after the query are masked and carry zero weight."""
        spec = loaded(causal=True)
        trace = build_trace(compute(spec.select_queries([1])))
        for head in trace.heads:
            assert [line.masked for line in head.keys] == [False, False, True, True, True]
            assert all(line.weight == 0.0 for line in head.keys if line.masked)
        assert masked_keys(compute(spec), 1).tolist() == [False, False, True, True, True]

    def test_grouped_kv_heads_read_their_shared_head(self) -> None:
        """With kv_heads, query heads 0-1 read K/V head 0: the key slices come from it."""
        spec = load_spec(str(CONFIGS / "gqa.yaml"))
        result = compute(spec.select_queries([2]))
        trace = build_trace(result)
        assert [h.kv_head for h in trace.heads] == [0, 0, 1, 1]
        assert trace.heads[1].shared_with == (0, 1)
        np.testing.assert_array_equal(trace.heads[1].keys[0].key, result.k[0, 0])
        for head in trace.heads:
            total = sum(line.contribution for line in head.keys)
            np.testing.assert_allclose(total, head.output, rtol=1e-12, atol=1e-15)

    def test_projected_output_is_carried(self) -> None:
        """With W_o, the trace carries the token's projected output from the result."""
        spec = load_spec(str(CONFIGS / "projections-with-wo.yaml"))
        full = compute(spec)
        trace = build_trace(full, 2)
        np.testing.assert_array_equal(trace.projected, full.projected[2])
        assert build_trace(compute(load_spec()), 0).projected is None


class TestSoftmax:
    def test_worked_example_cat_head_0(self) -> None:
        """ "cat", head 0: max √2; e = 1 for The and sat, e^-√2 = 0.2431 for the others; Σe = 2 + 3e^-√2."""
        head = worked_trace("cat").heads[0]
        small = math.exp(-math.sqrt(2))
        assert head.exp_max == pytest.approx(math.sqrt(2), rel=1e-15)
        np.testing.assert_allclose([line.exp for line in head.keys], [1, small, 1, small, small], rtol=1e-14)
        assert head.exp_sum == pytest.approx(2 + 3 * small, rel=1e-15)
        assert abs(small - 0.2431) < DECIMALS_4 and abs(head.exp_sum - 2.7294) < DECIMALS_4

    @pytest.mark.parametrize("token", TOKENS)
    def test_division_gives_the_engine_weights(self, token: str) -> None:
        """Each e / Σe equals the weight the engine computed, to float64 rounding."""
        for head in worked_trace(token).heads:
            for line in head.keys:
                assert line.exp / head.exp_sum == pytest.approx(line.weight, rel=1e-14)

    def test_masked_keys_are_left_out(self) -> None:
        """Causal "cat": the three later keys have e = 0 and Σe covers The and cat only."""
        spec = loaded(causal=True)
        head = build_trace(compute(spec.select_queries([1]))).heads[0]
        exps = [line.exp for line in head.keys]
        assert exps[2:] == [0.0, 0.0, 0.0]
        assert head.exp_max == pytest.approx(math.sqrt(2)) and exps[0] == 1.0  # The scores 2 × 0.7071
        assert head.exp_sum == pytest.approx(1 + math.exp(-math.sqrt(2)), rel=1e-15)
        # sat scores √2 too, but it is masked: the max is over the visible keys only
        assert head.keys[2].scaled == pytest.approx(math.sqrt(2))

    def test_every_key_masked(self) -> None:
        """A row with no visible key has no max (NaN) and Σe = 0; each e is 0."""
        terms, top, total = softmax_terms(np.array([1.0, 2.0]), np.array([True, True]))
        assert terms.tolist() == [0.0, 0.0] and math.isnan(top) and total == 0.0

    def test_collapsed_keys_carry_their_sum(self) -> None:
        """With 50 keys, the ten shown and the summary's e add up to Σe, and its weight is its e / Σe."""
        trace = build_trace(compute(random_spec(50, 16, 4, seed=11).select_queries([17])))
        for head in trace.heads:
            assert head.rest is not None
            shown = sum(line.exp for line in head.keys)
            assert shown + head.rest.exp == pytest.approx(head.exp_sum, rel=1e-14)
            assert head.rest.exp / head.exp_sum == pytest.approx(head.rest.weight, rel=1e-12)

    def test_float32_result(self) -> None:
        """A float32 run is written out in float64 from its scaled scores: e / Σe within float32 rounding."""
        result = compute(load_spec().select_queries([2]), dtype="float32")
        for head in build_trace(result).heads:
            for line in head.keys:
                assert line.exp / head.exp_sum == pytest.approx(line.weight, rel=1e-6)


class TestResolveQuery:
    def test_token_and_query(self) -> None:
        """A token that appears once, or an index in range, picks that row."""
        assert resolve_query(TOKENS, token="cat") == 1
        assert resolve_query(TOKENS, query=4) == 4

    def test_byte_level_tokens_match_without_their_space(self) -> None:
        """`cat` finds the token shown as ` cat`; an exact match wins over a stripped one."""
        tokens = ("The", " cat", " sat", " The")
        assert resolve_query(tokens, token="cat") == 1
        assert resolve_query(tokens, token=" sat") == 2
        assert resolve_query(tokens, token="The") == 0

    def test_stripped_matches_can_be_ambiguous(self) -> None:
        """Two tokens that read `the` once stripped: both positions are listed."""
        with pytest.raises(UsageError, match=r"^token 'the' appears at queries 0, 2; pick one by its position$"):
            resolve_query((" the", " cat", "the "), token="the")

    def test_duplicate_token(self) -> None:
        """A token that appears twice lists its positions and asks for one."""
        with pytest.raises(UsageError, match=r"^token 'the' appears at queries 0, 3; pick one by its position$"):
            resolve_query(("the", "cat", "saw", "the", "dog"), token="the")

    def test_unknown_token(self) -> None:
        """An unknown token lists the tokens there are, with the closest one."""
        message = "token 'the' is not in the input (did you mean 'The'?); tokens: The, cat, sat, on, mat"
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            resolve_query(TOKENS, token="the")

    @pytest.mark.parametrize(("token", "meant"), [("Cat", "cat"), ("CAT", "cat"), (" cAt ", "cat"), ("THE", "The")])
    def test_a_match_but_for_case_is_suggested_first(self, token: str, meant: str) -> None:
        """`Cat` is closer by spelling to `sat` than to `cat`; the token it equals but for case comes first."""
        with pytest.raises(
            UsageError, match=rf"^token {re.escape(repr(token))} is not in the input \(did you mean '{meant}'\?\)"
        ):
            resolve_query(TOKENS, token=token)

    def test_unknown_token_among_many(self) -> None:
        """Past 20 tokens the list stops and says how many more there are."""
        tokens = tuple(f"w{i}" for i in range(100))
        with pytest.raises(UsageError, match=r"tokens: w0, w1, .*, w19, … \(80 more\)$"):
            resolve_query(tokens, token="zzz")

    @pytest.mark.parametrize("query", [5, -6])
    def test_query_out_of_range(self, query: int) -> None:
        """A query outside 0..N-1 and -N..-1 says the valid range, both ways."""
        match = rf"^query {query} is out of range; the input has queries 0\.\.4 \(or -5\.\.-1\)$"
        with pytest.raises(UsageError, match=match):
            resolve_query(TOKENS, query=query)

    def test_query_counted_from_the_end(self) -> None:
        """-1 is the last query and -N the first, as in Python."""
        assert [resolve_query(TOKENS, query=q) for q in (-1, -2, -5)] == [4, 3, 0]

    def test_one_of_token_and_query(self) -> None:
        """Neither or both of a token and a position is a ChoiceError that names no flag (the CLI words its own)."""
        for given in ({}, {"token": "cat", "query": 1}):
            with pytest.raises(ChoiceError, match=r"^pick one query, by its token or by its position; tokens: The"):
                resolve_query(TOKENS, **given)  # type: ignore[arg-type]

    def test_ambiguity_is_its_own_kind(self) -> None:
        """A token at two queries is an AmbiguousError, which the CLI answers with --query."""
        with pytest.raises(AmbiguousError):
            resolve_query(("the", "cat", "the"), token="the")


class TestResolveHead:
    def test_counted_from_zero(self) -> None:
        """--head 1 is the second head, 1 (heads count from 0); no --head means every head."""
        assert resolve_head(1, 2) == (1,)
        assert resolve_head(0, 2) == (0,)
        assert resolve_head(None, 2) is None

    def test_counted_from_the_end(self) -> None:
        """--head -1 is the last head and -H the first, as in Python."""
        assert (resolve_head(-1, 2), resolve_head(-2, 2)) == ((1,), (0,))

    @pytest.mark.parametrize("head", [-3, 2])
    def test_out_of_range(self, head: int) -> None:
        """A head outside 0..H-1 and -H..-1 says the valid range, both ways."""
        with pytest.raises(
            UsageError, match=rf"^head {head} is out of range; heads are numbered 0\.\.1 \(or -2\.\.-1\)$"
        ):
            resolve_head(head, 2)
