"""Tolerances: only finite numbers ≥ 0 are taken, and comparing under any of them warns of nothing."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from attnx.analysis.tolerance import Tolerance, check_tolerances, compare, difference, tolerance_for
from attnx.errors import ConfigError


class TestCheckTolerances:
    """One rule for rtol and atol, named as the caller names them."""

    @pytest.mark.parametrize(
        ("value", "shown"),
        [
            (float("inf"), "inf"),
            (float("-inf"), "-inf"),
            (float("nan"), "nan"),
            (-1.0, "-1"),
            (-1, "-1"),
            (-0.25, "-0.25"),
            (float("1e999"), "inf"),
            (np.float32("nan"), "nan"),
            (np.float64("-inf"), "-inf"),
            (-(10**400), "a number beyond float64's range"),
            (10**400, "a number beyond float64's range"),
        ],
    )
    def test_refused(self, value: object, shown: str) -> None:
        """Each is the same sentence, the value written as a person reads it, for either name."""
        for position, name in ((0, "rtol"), (1, "atol")):
            pair = [None, None]
            pair[position] = value
            with pytest.raises(ConfigError) as refused:
                check_tolerances(*pair)
            assert str(refused.value) == f"{name} must be a finite number ≥ 0, got {shown}"

    @pytest.mark.parametrize("value", ["1e-3", True, np.bool_(False), np.array(1e-3), [1e-3], b"1"])
    def test_what_is_no_number(self, value: object) -> None:
        """Text, booleans, arrays and lists are no tolerance: the message names the type."""
        with pytest.raises(ConfigError, match=rf"^--atol must be a number, got {type(value).__name__}$"):
            check_tolerances(None, value, ("--rtol", "--atol"))

    @pytest.mark.parametrize("value", [0, 0.0, -0.0, 1e-7, 1e308, np.float32(1e-3), np.int64(2), Fraction(1, 3)])
    def test_taken(self, value: object) -> None:
        """Zero, tiny and huge finite numbers of any real type are taken, and tolerance_for keeps them."""
        check_tolerances(value, value)
        tolerance = tolerance_for("float32", np.ones(3), value, value)  # type: ignore[arg-type]
        assert (tolerance.rtol, tolerance.atol) == (value, value)

    def test_tolerance_for_refuses_too(self) -> None:
        """tolerance_for, which every comparison calls, holds the same rule."""
        with pytest.raises(ConfigError, match=r"^rtol must be a finite number ≥ 0, got inf$"):
            tolerance_for("float64", np.ones(2), float("inf"))


class TestComparingWithoutWarnings:
    """A bound or a difference beyond float64 is infinite, and says nothing (pytest turns warnings into errors)."""

    def test_a_bound_beyond_float64(self) -> None:
        """rtol 1e308 on values of 10: every finite error is within, a NaN one still is not."""
        reference = np.array([10.0, -10.0, 0.0, 1e300])
        errors = np.array([1e300, 0.0, 1e308, np.nan])
        within = Tolerance(1e308, 1e308).within(errors, reference)
        assert within.tolist() == [True, True, True, False]

    def test_zero_tolerance_is_exact(self) -> None:
        """rtol 0 and atol 0 take equal values only."""
        within = Tolerance(0.0, 0.0).within(np.array([0.0, 1e-300]), np.array([5.0, 5.0]))
        assert within.tolist() == [True, False]

    def test_difference_beyond_float64(self) -> None:
        """|1e308 − (−1e308)| is inf; NaN and inf − inf are NaN; nothing is said."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            found = difference(np.array([1e308, np.nan, np.inf, 1.0]), np.array([-1e308, 0.0, np.inf, 0.5]))
        assert found[0] == np.inf and np.isnan(found[1]) and np.isnan(found[2]) and found[3] == 0.5

    @pytest.mark.parametrize(
        ("actual", "reference", "tolerance", "passed"),
        [
            ([1.0, 2.0], [1.0, 2.0], Tolerance(0.0, 0.0), True),  # identical sides, no tolerance at all
            ([0.0, 1e308], [1e308, -1e308], Tolerance(1e308, 1e308), False),  # a difference of inf is beyond any
            ([0.0, 2.0], [3.0, 9.0], Tolerance(1e308, 1e308), True),  # the bound overflows: all within
            ([1e-300, 0.0], [1e300, 1e-300], Tolerance(0.0, 1.0), False),  # max_rel 1e600 overflows to inf
        ],
    )
    def test_compare(self, actual: list, reference: list, tolerance: Tolerance, passed: bool) -> None:
        """compare's verdict under any finite tolerance, with differences and ratios beyond float64."""
        diff = compare(np.array(actual), np.array(reference), tolerance)
        assert diff.passed is passed and diff.max_abs >= 0 and diff.max_rel >= 0
