"""Diffs: sweeps of heads and other settings, K/V heads pooled, two sides compared, masks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from attnx.analysis.diff import Side, compare_sides, side_from_result, side_from_saved, sweep
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.errors import ConfigError
from attnx.io import load_spec
from attnx.io.results import SavedResult
from tests.conftest import DECIMALS_4, HEAD1_WEIGHTS, HEAD2_WEIGHTS, SINGLE_HEAD_CAT, TOKENS
from tests.engines.test_engines import reference
from tests.specs import loaded, spec_of


def pooling() -> bool:
    """True once a --kv-heads override mean-pools K/V heads (helper B's work): 2 K/V heads of gqa.yaml into 1."""
    try:
        loaded("configs/gqa.yaml", kv_heads=1)
    except ConfigError:
        return False
    return True


needs_pooling = pytest.mark.xfail(not pooling(), reason="needs the K/V pooling of --kv-heads", strict=True)


@pytest.fixture(scope="module")
def worked() -> AttentionSpec:
    return load_spec()


class TestHeadsSweep:
    def test_each_head_count_matches_a_per_head_loop(self, worked: AttentionSpec) -> None:
        """H = 1, 2, 4 on the worked example: weights and outputs equal an explicit loop over heads."""
        found = sweep(worked, "heads", [1, 2, 4])
        assert [v.label for v in found.variants] == ["H=1", "H=2", "H=4"]
        for variant, h in zip(found.variants, (1, 2, 4), strict=True):
            expected = reference(worked.with_heads(h))
            np.testing.assert_allclose(variant.result.weights, expected["weights"], rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(variant.result.output, expected["output"], rtol=1e-13, atol=1e-15)

    def test_four_heads_have_width_one(self, worked: AttentionSpec) -> None:
        """H = 4 means d_k = 1 and a multiplier of 1/√1 = 1: weights are softmax(q_i k_j) per column."""
        (variant,) = sweep(worked, "heads", [4]).variants
        r = variant.result
        assert r is not None and (r.heads, r.d_k, r.scale) == (4, 1, 1.0)
        for h in range(4):
            scores = np.outer(worked.inputs.q[:, h], worked.inputs.k[:, h])
            weights = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
            np.testing.assert_allclose(r.weights[h], weights, rtol=1e-13)
        # "cat" (row 1) in head 2 reads q = 2.0 against k column 1 = [1, 0, 1, 0, 0]: e² to The and sat
        np.testing.assert_allclose(r.weights[1, 1], np.array([math.e**2, 1, math.e**2, 1, 1]) / (3 + 2 * math.e**2))

    def test_textbook_numbers(self, worked: AttentionSpec) -> None:
        """H = 1 reproduces the tutorial's row of "cat"; H = 2 its two weight matrices."""
        one, two = (v.result for v in sweep(worked, "heads", [1, 2]).variants)
        assert one is not None and two is not None
        for token, value in SINGLE_HEAD_CAT.items():
            assert abs(one.weights[0, 1, TOKENS.index(token)] - value) < DECIMALS_4
        np.testing.assert_allclose(two.weights[0], HEAD1_WEIGHTS, atol=DECIMALS_4)
        np.testing.assert_allclose(two.weights[1], HEAD2_WEIGHTS, atol=DECIMALS_4)

    def test_shifts_between_configurations(self, worked: AttentionSpec) -> None:
        """Consecutive pairs, then the first against the last: per token L2 and max abs of the output change."""
        found = sweep(worked, "heads", [1, 2, 4])
        outputs = [reference(worked.with_heads(h))["output"] for h in (1, 2, 4)]
        assert [(s.before, s.after) for s in found.shifts] == [(0, 1), (1, 2), (0, 2)]
        for s in found.shifts:
            change = outputs[s.after] - outputs[s.before]
            np.testing.assert_allclose(s.l2, np.sqrt((change**2).sum(axis=1)), rtol=1e-12)
            np.testing.assert_allclose(s.max_abs, np.abs(change).max(axis=1), rtol=1e-12)
            assert s.l2_overall == pytest.approx(math.sqrt((change**2).sum()), rel=1e-12)
            assert s.max_abs_overall == pytest.approx(np.abs(change).max(), rel=1e-12)
        assert found.compared == "output"

    def test_head_count_that_does_not_divide_is_refused(self, worked: AttentionSpec) -> None:
        """H = 3 on d_model 4 is the ConfigError `run -H 3` gives, before anything is computed."""
        message = "d_model 4 is not divisible by heads 3; head counts that work: 1, 2, 4"
        with pytest.raises(ConfigError, match=f"^built-in example \\(cat-sat-on-mat\\): {message}$"):
            sweep(worked, "heads", [1, 3, 2])

    def test_grouped_kv_heads_stay(self) -> None:
        """With GQA (4 heads over 2 K/V heads) a head sweep keeps kv_heads and refuses counts it cannot take."""
        found = sweep(load_spec("configs/gqa.yaml"), "heads", [4])
        assert [v.result.kv_heads for v in found.variants] == [2]
        with pytest.raises(ConfigError, match="kv_heads"):
            sweep(load_spec("configs/gqa.yaml"), "heads", [4, 2])


class TestOtherSweeps:
    def test_scale_sweep_multipliers_and_saturation(self, worked: AttentionSpec) -> None:
        """sqrt_dk, sqrt_d_model and none multiply by 1/√2, 1/2 and 1; saturation follows the spread."""
        found = sweep(worked, "scale", ["sqrt_dk", "sqrt_d_model", "none"])
        results = [v.result for v in found.variants]
        assert [r.scale for r in results] == pytest.approx([1 / math.sqrt(2), 0.5, 1.0])
        for v in found.variants:
            assert v.saturation is not None and v.result is not None
            for h in range(2):
                assert v.saturation.scaled_std[h] == pytest.approx(v.result.scaled[h].std(), rel=1e-12)
                assert v.saturation.mean_max_weight[h] == pytest.approx(v.result.weights[h].max(axis=1).mean())
        stds = [v.saturation.scaled_std[0] for v in found.variants]
        assert stds[1] < stds[0] < stds[2]

    def test_layout_sweep(self, worked: AttentionSpec) -> None:
        """Interleaved heads read columns 0,2 and 1,3: head 1's weights equal a contiguous run on those columns."""
        found = sweep(worked, "layout", ["contiguous", "interleaved"])
        interleaved = found.variants[1].result
        assert interleaved is not None and interleaved.layout == "interleaved"
        cols = [0, 2]
        expected = reference(
            spec_of(worked.inputs.q[:, cols], worked.inputs.k[:, cols], worked.inputs.v[:, cols], 1, TOKENS, TOKENS)
        )
        np.testing.assert_allclose(interleaved.weights[0], expected["weights"][0], rtol=1e-13)

    def test_kv_heads_sweep_reports_what_it_cannot_make(self, worked: AttentionSpec) -> None:
        """3 K/V heads for 2 query heads (no whole groups) is refused, as `run --kv-heads 3` is."""
        with pytest.raises(ConfigError, match="kv_heads"):
            sweep(worked, "kv_heads", [2, 3])


class TestKvHeadsPooling:
    @needs_pooling
    def test_gqa_pooled_to_one_kv_head(self) -> None:
        """gqa.yaml's two K/V heads average to keys [0.5, 0.5] each: every weight is 1/3, every output 1/3."""
        found = sweep(load_spec("configs/gqa.yaml"), "kv_heads", [1, 2])
        one, two = (v.result for v in found.variants)
        assert one is not None and two is not None
        assert (one.kv_heads, one.kv_pooled_from, two.kv_pooled_from) == (1, 2, None)
        np.testing.assert_allclose(one.weights, np.full((4, 3, 3), 1 / 3), rtol=1e-13)
        np.testing.assert_allclose(one.output, np.full((3, 8), 1 / 3), rtol=1e-13)
        (s,) = found.shifts
        np.testing.assert_allclose(s.l2, np.linalg.norm(two.output - 1 / 3, axis=1), rtol=1e-12)

    @needs_pooling
    @pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
    def test_pooled_heads_read_the_group_mean(self, layout: str) -> None:
        """Four K/V heads pooled to two: each query head reads the mean of its group's K and V heads."""
        base = loaded(seed=1, tokens=tuple("abcd"), d_model=8, heads=4, layout=layout)
        (variant,) = sweep(base, "kv_heads", [2]).variants
        r = variant.result
        assert r is not None and r.kv_pooled_from == 4
        for h in range(4):
            cols = list(base.head_columns(h))
            group = [list(base.head_columns(g)) for g in (2 * (h // 2), 2 * (h // 2) + 1)]
            k = (base.inputs.k[:, group[0]] + base.inputs.k[:, group[1]]) / 2
            v = (base.inputs.v[:, group[0]] + base.inputs.v[:, group[1]]) / 2
            scores = base.inputs.q[:, cols] @ k.T / math.sqrt(2)
            weights = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
            np.testing.assert_allclose(r.weights[h], weights, rtol=1e-12)
            np.testing.assert_allclose(r.head_outputs[h], weights @ v, rtol=1e-12)

    def test_more_kv_heads_than_the_input_has_is_reported(self) -> None:
        """gqa.yaml has 2 K/V heads: 4 cannot be made from them, and the sweep is refused, saying so."""
        with pytest.raises(ConfigError, match="kv_heads"):
            sweep(load_spec("configs/gqa.yaml"), "kv_heads", [2, 4])


def side(name: str, **tensors: np.ndarray) -> Side:
    return Side(name, "input", tensors, TOKENS, TOKENS, "float64")


class TestCompareSides:
    def test_identical_results_pass(self, worked: AttentionSpec) -> None:
        """A result against itself: every tensor 0 apart, passed."""
        result = compute(worked)
        comparison = compare_sides(side_from_result(result, "a"), side_from_result(result, "b"))
        assert comparison.passed and comparison.failures == 0
        assert [row.name for row in comparison.rows] == [
            "q", "k", "v", "scores", "scaled", "weights", "head_outputs", "output", "average_weights",
        ]  # fmt: skip
        assert all(row.diff.max_abs == 0 for row in comparison.rows)

    def test_near_equal_passes_under_default_tolerance(self, worked: AttentionSpec) -> None:
        """Q nudged by 1e-12 moves nothing beyond float64's rtol 1e-7, atol 1e-7."""
        nudged = dataclasses.replace(worked, inputs=dataclasses.replace(worked.inputs, q=worked.inputs.q + 1e-12))
        comparison = compare_sides(side_from_result(compute(worked), "a"), side_from_result(compute(nudged), "b"))
        assert comparison.passed
        assert 0 < comparison.rows[0].diff.max_abs < 1e-11
        assert (comparison.rows[0].diff.tolerance.rtol, comparison.rows[0].diff.tolerance.atol) == (1e-7, 1e-7)

    def test_different_inputs_fail_with_locations(self) -> None:
        """One changed weight: max abs, max rel and the largest location name it; the rest pass."""
        a = np.full((2, 3, 3), 0.25)
        b = a.copy()
        b[1, 2, 0] = 0.5
        b[0, 0, 1] = 0.26
        comparison = compare_sides(side("a", weights=a), side("b", weights=b))
        (row,) = comparison.rows
        assert not comparison.passed
        assert row.diff.max_abs == pytest.approx(0.25) and row.diff.max_rel == pytest.approx(0.5)
        assert row.diff.worst == (1, 2, 0)
        assert [(loc.index, loc.a, loc.b) for loc in row.largest] == [((1, 2, 0), 0.25, 0.5), ((0, 0, 1), 0.25, 0.26)]
        np.testing.assert_allclose(comparison.weight_delta, np.abs(a - b))

    def test_tolerance_flags_loosen(self) -> None:
        """--atol 0.3 lets a 0.25 difference pass."""
        a, b = np.zeros((1, 2, 2)), np.full((1, 2, 2), 0.25)
        assert compare_sides(side("a", weights=a), side("b", weights=b), atol=0.3).passed

    def test_shapes_that_differ_are_a_verdict(self) -> None:
        """Two heads against four: the row says so and fails; the output still compares."""
        a = side("a", weights=np.zeros((2, 5, 5)), output=np.zeros((5, 4)))
        b = side("b", weights=np.zeros((4, 5, 5)), output=np.zeros((5, 4)))
        comparison = compare_sides(a, b)
        weights, output = comparison.rows
        assert (weights.problem, weights.diff, weights.passed) == ("shapes differ: (2,5,5) vs (4,5,5)", None, False)
        assert output.passed and comparison.failures == 1
        assert comparison.weight_delta is None

    def test_a_tensor_on_one_side_is_skipped(self) -> None:
        """A projected output only A has is not compared and is listed as 'only in A'; the rest decides."""
        comparison = compare_sides(side("a", output=np.zeros((2, 2)), projected=np.zeros((2, 2))),
                                   side("b", output=np.zeros((2, 2))))  # fmt: skip
        assert [row.name for row in comparison.rows] == ["output"] and comparison.passed
        assert comparison.skipped == (("projected", "only in A"),)

    def test_named_tensors_must_be_on_both_sides(self) -> None:
        """names=["projected"] where B lacks it, or sides with nothing in common, are ConfigErrors."""
        a = side("a", output=np.zeros((2, 2)), projected=np.zeros((2, 2)))
        with pytest.raises(ConfigError, match="b holds no 'projected' to compare"):
            compare_sides(a, side("b", output=np.zeros((2, 2))), names=["projected"])
        with pytest.raises(ConfigError, match="hold no tensor in common: A holds output, projected, B holds weights"):
            compare_sides(a, side("b", weights=np.zeros((1, 2, 2))))

    def test_names_choose_what_is_compared(self) -> None:
        """names=["output"] compares output only, even where projected differs; nothing is listed as skipped."""
        a = side("a", output=np.zeros((2, 2)), projected=np.ones((2, 2)))
        b = side("b", output=np.zeros((2, 2)), projected=np.zeros((2, 2)))
        comparison = compare_sides(a, b, names=["output"])
        assert [row.name for row in comparison.rows] == ["output"] and comparison.passed and not comparison.skipped
        assert not compare_sides(a, b).passed

    def test_float32_side_uses_float32_tolerance(self, worked: AttentionSpec) -> None:
        """float32 against float64 is held to rtol 1.3e-6 and atol 1e-5 × max(1, |B|), and passes."""
        a = side_from_result(compute(worked, dtype="float32"), "a")
        b = side_from_result(compute(worked), "b")
        comparison = compare_sides(a, b)
        assert comparison.passed
        assert comparison.rows[0].diff.tolerance.rtol == 1.3e-6
        assert comparison.rows[0].diff.tolerance.atol == pytest.approx(2e-5)  # scores reach 2.0

    def test_nan_counts_as_largest(self) -> None:
        """A NaN never passes and is listed first."""
        a, b = np.array([[0.0, 0.1]]), np.array([[np.nan, 0.0]])
        (row,) = compare_sides(side("a", output=a), side("b", output=b)).rows
        assert not row.passed and row.largest[0].index == (0, 0)


class TestMasks:
    def test_pairs_both_sides_mask(self) -> None:
        """``masked`` is True only where A and B both block the pair."""
        a = dataclasses.replace(side("a", weights=np.zeros((1, 2, 2))), allowed=np.array([[True, False], [True, True]]))
        b = dataclasses.replace(
            side("b", weights=np.zeros((1, 2, 2))), allowed=np.array([[True, False], [False, True]])
        )
        comparison = compare_sides(a, b)
        np.testing.assert_array_equal(comparison.masked, [[False, True], [False, False]])
        assert compare_sides(a, side("c", weights=np.zeros((1, 2, 2)))).masked is None

    def test_input_side_keeps_its_mask(self, worked: AttentionSpec) -> None:
        """A causal input's side carries the engine's mask: lower triangle allowed."""
        r = compute(worked.with_settings(causal=True))
        np.testing.assert_array_equal(side_from_result(r, "a").allowed, np.tril(np.ones((5, 5), dtype=bool)))

    def test_saved_result_mask(self) -> None:
        """A JSON result's mask is read back when it is a query × key grid of booleans, else ignored."""
        meta = {"tokens": ["x", "y"], "mask": [[True, False], [True, True]]}
        saved = side_from_saved(SavedResult("r.json", meta, {}))
        np.testing.assert_array_equal(saved.allowed, [[True, False], [True, True]])
        for bad in ([[True, False]], [[True, 1], [True, True]], "all"):
            assert side_from_saved(SavedResult("r.json", {**meta, "mask": bad}, {})).allowed is None
