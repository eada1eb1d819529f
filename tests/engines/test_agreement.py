"""The engines agree: NumPy against torch, torch against bare SDPA, and the comparison that says so."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.analysis.tolerance import compare, default_tolerance
from attnx.engines import compute
from tests.specs import loaded

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPES = [(1, 1, 1), (5, 4, 2), (9, 24, 3), (33, 64, 8), (128, 128, 2)]
TENSORS = ("q", "k", "v", "scores", "scaled", "weights", "head_outputs", "output", "average_weights")


def random_spec(n: int, d_model: int, heads: int, seed: int = 0):
    return loaded(seed=seed, tokens=tuple(f"t{i}" for i in range(n)), d_model=d_model, heads=heads)


class TestNumpyAgainstTorch:
    @pytest.mark.parametrize("dtype", ["float64", "float32"])
    @pytest.mark.parametrize(("n", "d_model", "heads"), SHAPES)
    def test_engines_agree(self, dtype: str, n: int, d_model: int, heads: int) -> None:
        """Both engines, in either dtype, agree with the float64 NumPy reference within tolerance."""
        spec = random_spec(n, d_model, heads, seed=n + heads)
        reference = compute(spec, "numpy", dtype="float64")
        for engine in ("numpy", "torch"):
            result = compute(spec, engine, dtype=dtype)
            for name in TENSORS:
                ref = getattr(reference, name)
                diff = compare(getattr(result, name), ref, default_tolerance(dtype, ref))
                assert diff.passed, (engine, dtype, name, diff)


class TestTorchAgainstSdpa:
    @pytest.mark.parametrize("dtype", ["float64", "float32"])
    @pytest.mark.parametrize(("n", "d_model", "heads"), SHAPES[1:])
    def test_head_outputs_and_weights(self, dtype: str, n: int, d_model: int, heads: int) -> None:
        """Head outputs equal SDPA's; weights equal SDPA applied to an identity V."""
        spec = random_spec(n, d_model, heads, seed=3 * n)
        result = compute(spec, "torch", dtype=dtype)
        dt = getattr(torch, dtype)
        q, k, v = (
            torch.tensor(x, dtype=dt).view(n, heads, -1).transpose(0, 1)
            for x in (spec.inputs.q, spec.inputs.k, spec.inputs.v)
        )
        sdpa_out = F.scaled_dot_product_attention(q, k, v).numpy()
        eye = torch.eye(n, dtype=dt).expand(heads, n, n)
        sdpa_weights = F.scaled_dot_product_attention(q, k, eye).numpy()
        for ours, theirs in ((result.head_outputs, sdpa_out), (result.weights, sdpa_weights)):
            tol = default_tolerance(dtype, theirs)
            np.testing.assert_allclose(ours, theirs, rtol=tol.rtol, atol=tol.atol)


class TestCompare:
    def test_reports_worst_element(self) -> None:
        """compare() finds the largest difference, its index and the relative difference."""
        ref = np.array([[1.0, 2.0], [4.0, 0.0]])
        got = ref + np.array([[0.0, 0.0], [0.5, 1e-9]])
        diff = compare(got, ref, default_tolerance("float64", ref))
        assert diff.max_abs == pytest.approx(0.5)
        assert diff.max_rel == pytest.approx(0.125)
        assert diff.worst == (1, 0)
        assert not diff.passed

    def test_nan_never_passes(self) -> None:
        """A NaN in the result is a failure, not an ignored element."""
        ref = np.ones(3)
        assert not compare(np.array([1.0, np.nan, 1.0]), ref, default_tolerance("float64", ref)).passed

    def test_float32_atol_scales_with_magnitude(self) -> None:
        """float32 atol is 1e-5 times max(1, max|ref|)."""
        assert default_tolerance("float32", np.array([0.5])).atol == pytest.approx(1e-5)
        assert default_tolerance("float32", np.array([-300.0])).atol == pytest.approx(3e-3)
