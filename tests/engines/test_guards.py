"""The checks around an engine run: sizes, overflow before and after, the bound that skips the scan, stable softmax."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attnx.analysis.check import run_check
from attnx.core.spec import AttentionSpec, Linear
from attnx.engines import compute, engine_statuses, guards
from attnx.errors import LimitError, NumericError
from attnx.limits import Limits
from tests.specs import spec_of


def spec(q: list, k: list, v: list | None = None, **extra: object) -> AttentionSpec:
    """One head, scale 1, tokens q0.. and k0..: scores are exactly q · k."""
    v = v if v is not None else [[1.0] * len(k[0])] * len(k)
    tokens = tuple(f"q{i}" for i in range(len(q)))
    keys = tuple(f"k{j}" for j in range(len(k)))
    return spec_of(np.array(q), np.array(k), np.array(v), 1, tokens, keys, "in.yaml", scale="none", **extra)  # type: ignore[arg-type]


class TestSizes:
    """Limits.check_problem refuses, before anything is computed, arrays over the caps; compute calls it."""

    def test_scores_over_the_element_cap(self) -> None:
        """3 queries × 4 keys of scores under a cap of 10 elements."""
        big = spec([[1.0]] * 3, [[1.0]] * 4)
        with pytest.raises(LimitError, match=r"^in\.yaml: the scores: an array of 1 × 3 × 4 \(12 elements\) exceeds"):
            Limits(max_elements=10).check_problem(big, matrices=True)

    def test_one_query_row_fits(self) -> None:
        """A trace computes one query row, and that row fits the same cap; without matrices nothing is refused."""
        big = spec([[1.0]] * 3, [[1.0]] * 4)
        Limits(max_elements=10).check_problem(big, matrices=True, rows=1)
        Limits(max_elements=10).check_problem(big, matrices=False)

    def test_compute_checks_the_same_caps(self) -> None:
        """compute refuses the 1 × 3 × 4 scores under a cap of 10 as check_problem does (tests/engines/test_checked_entry.py)."""
        big = spec([[1.0]] * 3, [[1.0]] * 4)
        with pytest.raises(LimitError, match=r"^in\.yaml: the scores: an array of 1 × 3 × 4 \(12 elements\) exceeds"):
            compute(big, limits=Limits(max_elements=10))
        assert compute(big, limits=Limits(max_elements=12)).weights.shape == (1, 3, 4)


class TestOverflow:
    """Numbers that do not fit the dtype are reported where they happen, never shown as NaN."""

    def test_float32_input_out_of_range(self, engine: str) -> None:
        """1e39 cannot be a float32: refused with its place and the fix."""
        with pytest.raises(NumericError) as info:
            compute(spec([[1.0], [1e39]], [[1.0]]), engine, dtype="float32", device="cpu")
        assert (
            str(info.value) == "in.yaml: q[1][0] = 1e+39 is beyond the largest float32 (3.403e+38); use --dtype float64"
        )

    def test_float32_scores_overflow(self, engine: str) -> None:
        """1e20 · 1e20 = 1e40 overflows float32: the score is named, and float64 is the fix."""
        with pytest.raises(NumericError) as info:
            compute(spec([[1.0], [1e20]], [[1e20]]), engine, dtype="float32", device="cpu")
        assert str(info.value) == (
            "in.yaml: the score Q·K of query 'q1' and key 'k0' in head 0 overflows float32 (beyond ±3.403e+38); "
            "use --dtype float64"
        )

    def test_float64_scores_overflow(self, engine: str) -> None:
        """1e200 · 1e200 overflows float64 too: then the inputs must shrink."""
        with pytest.raises(NumericError, match=r"overflows float64 \(beyond ±1\.798e\+308\); scale the inputs down$"):
            compute(spec([[1e200]], [[1e200]]), engine, device="cpu")

    def test_scaling_overflows(self) -> None:
        """A finite score times a huge scale: the scaled score is named."""
        with pytest.raises(NumericError, match=r"^in\.yaml: the scaled score of query 'q0' and key 'k0' in head 0"):
            compute(spec([[1e10]], [[1e10]]).with_settings(scale=1e300))

    def test_heads_are_named_from_zero(self, engine: str) -> None:
        """Two heads, the second overflowing: the message names head 1, counted from 0 as in every table."""
        two = spec([[1.0, 1.0], [1.0, 1e20]], [[1.0, 1e20]]).with_settings(heads=2, kv_heads=2)
        with pytest.raises(NumericError, match=r"^in\.yaml: the score Q·K of query 'q1' and key 'k0' in head 1 "):
            compute(two, engine, dtype="float32", device="cpu")

    def test_projected_output_overflows(self) -> None:
        """An output projection that overflows is named as such."""
        overflow = spec([[1.0]], [[1.0]], [[1e300]], w_o=Linear.of(np.array([[1e300]])))
        with pytest.raises(NumericError, match=r"^in\.yaml: the projected output for query 'q0' overflows float64"):
            compute(overflow)

    def test_not_strict_returns_inf_quietly(self, engine: str) -> None:
        """strict=False (used by attnx check) gives the overflowed numbers back, without RuntimeWarnings."""
        result = compute(spec([[1e20]], [[1e20]]), engine, dtype="float32", device="cpu", strict=False)
        assert np.isinf(result.scores[0, 0, 0])

    def test_check_reports_an_overflowing_target_as_failing(self) -> None:
        """attnx check: float32 targets that overflow fail their rows; the float64 ones pass."""
        report = run_check(spec([[1e20, 0.0]], [[1e20, 0.0]]), engine_statuses())
        verdicts = {(row.target.dtype, row.tensor): row.diff.passed for row in report.rows}
        assert verdicts[("float32", "scores")] is False and verdicts[("float64", "scores")] is True


class TestCannotOverflow:
    """Below float64, a bound from the inputs' magnitude spares the scan of the result when nothing can overflow."""

    def test_ordinary_float32_inputs_are_bounded(self) -> None:
        """Values within ±10: scores within 1 · 10², far inside float32."""
        assert guards.cannot_overflow(spec([[10.0], [-3.0]], [[2.0], [-10.0]]), "float32")

    def test_float64_is_always_scanned(self) -> None:
        """In float64 the magnitude is not measured, so the bound never answers."""
        assert not guards.cannot_overflow(spec([[1.0]], [[1.0]]), "float64")

    def test_scores_too_close_to_the_range(self) -> None:
        """1e18 · 1e18 = 1e36 fits float32 (3.4e38) but not within the rounding room: the result is scanned."""
        near = spec([[1e18]], [[1e18]])
        assert not guards.cannot_overflow(near, "float32")
        assert compute(near, dtype="float32").scores[0, 0, 0] == np.float32(1e36)

    def test_a_large_scale_widens_the_bound(self) -> None:
        """Scores of 1e34 are in the room at scale 1 (and below 1, the raw scores still count), not at scale 100."""
        near = spec([[1e17]], [[1e17]])
        assert guards.cannot_overflow(near, "float32")
        assert guards.cannot_overflow(near.with_settings(scale=1e-30), "float32")
        assert not guards.cannot_overflow(near.with_settings(scale=100.0), "float32")

    def test_projection_widens_the_bound(self) -> None:
        """Projected inputs of 1e9 with 4 input columns: Q within 4e18 + 1e9, scores past the room."""
        x, w = np.full((2, 4), 1e9), Linear.of(np.ones((4, 1)))
        layer = spec_of(None, None, None, 1, ("a", "b"), ("a", "b"), x=x, w_q=w, w_k=w, w_v=w)  # type: ignore[arg-type]
        assert not guards.cannot_overflow(layer, "float32")
        small = replace(layer, inputs=replace(layer.inputs, x=np.full((2, 4), 1e3)))
        assert guards.cannot_overflow(small, "float32")

    def test_output_projection_bound(self) -> None:
        """16 heads of width 1 with values of 1.5e17: each score (2.25e34) is in the room, but the projected
        output's bound of d_model · 2.25e34 is not."""
        values = np.full((1, 16), 1.5e17)
        layer = spec_of(values, values, values, 16, ("a",), ("a",))
        assert guards.cannot_overflow(layer, "float32")
        assert not guards.cannot_overflow(replace(layer, w_o=Linear.of(np.eye(16))), "float32")

    def test_nan_input_is_never_bounded(self) -> None:
        """A NaN anywhere, even after larger finite values, makes the bound fail."""
        assert not guards.cannot_overflow(spec([[5.0]], [[1.0]], [[np.nan]]), "float32")

    def test_bounded_results_skip_the_scan(self, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """compute scans a float32 result only when the bound does not rule overflow out."""
        scanned: list[str] = []
        monkeypatch.setattr(guards, "check_finite", lambda spec, result: scanned.append(result.dtype))
        compute(spec([[1.0]], [[2.0]]), engine, dtype="float32", device="cpu")
        compute(spec([[1.0]], [[2.0]]), engine, dtype="float64", device="cpu")
        compute(spec([[1e18]], [[1e18]]), engine, dtype="float32", device="cpu")
        assert scanned == ["float64", "float32"]

    @pytest.mark.parametrize("exponent", [8, 15, 16, 17, 18, 19])
    def test_a_bounded_result_is_finite(self, engine: str, exponent: int) -> None:
        """Random float32 problems scaled towards the range: when the bound answers, every value is finite.

        Values up to about 3·10^e give projected outputs up to 8 · 9·10^(2e): inside the room for e ≤ 16.
        """
        rng = np.random.default_rng(exponent)
        q, k, v = rng.standard_normal((3, 16, 8)) * 10.0**exponent
        tokens = tuple(map(str, range(16)))
        problem = spec_of(q, k, v, 2, tokens, tokens, w_o=Linear.of(rng.standard_normal((8, 8)) * 10.0**exponent))
        result = compute(problem, engine, dtype="float32", device="cpu", strict=False)
        values = [result.scaled, result.head_outputs, result.output, result.projected]
        assert guards.cannot_overflow(problem, "float32") <= all(np.isfinite(x).all() for x in values)
        assert guards.cannot_overflow(problem, "float32") is (exponent <= 16)


class TestAllFinite:
    """The finiteness scan of results: one sum, and min and max only when the sum is not finite."""

    @pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
    def test_one_non_finite_value_is_found(self, bad: float) -> None:
        """A single inf or NaN among finite values, in float32 and float64."""
        for dtype in (np.float32, np.float64):
            array = np.ones((3, 5), dtype)
            array[2, 3] = bad
            assert not guards._all_finite(array)

    def test_inf_and_minus_inf_summing_to_nan(self) -> None:
        """inf and -inf together make the sum NaN, still not finite."""
        assert not guards._all_finite(np.array([np.inf, -np.inf, 1.0]))

    def test_finite_values_whose_sum_overflows(self) -> None:
        """Large finite float32 values overflow the sum, yet the array is finite."""
        array = np.full(4, 3e38, np.float32)
        assert guards._all_finite(array)
        assert guards._all_finite(np.array([1.7e308, 1.7e308]))


class TestStableSoftmax:
    """Softmax subtracts the row maximum, so any finite scores give finite weights."""

    def test_float64_extremes(self, engine: str) -> None:
        """Scores ±2**1000 (about ±1e301) in one row: the weight goes to the largest, split between ties."""
        big = 2.0**500
        result = compute(spec([[big], [-big]], [[big], [-big], [big]]), engine, device="cpu")
        assert result.scores[0, 0].tolist() == [2.0**1000, -(2.0**1000), 2.0**1000]
        np.testing.assert_array_equal(result.weights[0], [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])

    def test_float64_all_very_negative(self, engine: str) -> None:
        """Every score near -2**1000 in a row still gives finite weights that sum to 1."""
        big = 2.0**500
        result = compute(spec([[-big]], [[big], [big * (1 - 2.0**-40)]]), engine, device="cpu")
        assert np.all(result.scores < -1e300)
        np.testing.assert_allclose(result.weights[0, 0].sum(), 1.0, rtol=1e-15)
        assert np.all(np.isfinite(result.weights))

    def test_float32_extremes(self, engine: str) -> None:
        """Scores ±3e38 in float32 (close to its limit of 3.4e38) give weights 1 and 0."""
        k = [[1.7e19], [-1.7e19]]
        result = compute(spec([[1.76e19]], k), engine, dtype="float32", device="cpu")
        assert np.all(np.abs(result.scores) > 2.9e38)
        np.testing.assert_array_equal(result.weights[0, 0], [1.0, 0.0])

    def test_masked_rows_stay_zero(self, engine: str) -> None:
        """A fully masked row with extreme scores elsewhere is all zeros, never NaN."""
        mask = np.array([[True, True], [False, False]])
        result = compute(spec([[1e150], [1e150]], [[1e150], [-1e150]], mask=mask), engine, device="cpu")
        np.testing.assert_array_equal(result.weights[0], [[1.0, 0.0], [0.0, 0.0]])
