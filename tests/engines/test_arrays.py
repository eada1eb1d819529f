"""The forward pass's array primitives: NumPy's and torch's give the same numbers, and an array finds its engine's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnx.engines import load_arrays
from attnx.engines.arrays import arrays_of, host, host_dtype
from attnx.engines.numpy_engine import numpy_on

X = np.array([[-3.0, -0.5, 0.0, 0.25], [1.5, 2.0, -7.0, 40.0]])


class TestPrimitives:
    """Each primitive on torch equals NumPy's on the same float64 values."""

    @pytest.mark.parametrize("name", ["mean", "tanh", "exp", "erf"])
    def test_unary(self, name: str) -> None:
        """mean (over the last axis, kept), tanh, exp and erf agree to float64 rounding."""
        pytest.importorskip("torch")
        ours = getattr(numpy_on("float64"), name)(X)
        xp = load_arrays("torch", "float64", "cpu")
        theirs = xp.host(getattr(xp, name)(xp.like(X)))
        np.testing.assert_allclose(theirs, ours, rtol=1e-15, atol=1e-16)
        assert ours.shape == ((2, 1) if name == "mean" else X.shape)

    def test_bounds_and_shapes(self) -> None:
        """sqrt, maximum, minimum, clip, zeros_like, concatenate and split agree, and split cuts by row counts."""
        pytest.importorskip("torch")
        xp, np_ = load_arrays("torch", "float64", "cpu"), numpy_on("float64")
        t = xp.like(X)
        pairs = [
            (np_.sqrt(np.abs(X)), xp.sqrt(xp.like(np.abs(X)))),
            (np_.maximum(X, 0.0), xp.maximum(t, 0.0)),
            (np_.minimum(X, 1.0), xp.minimum(t, 1.0)),
            (np_.clip(X, -1.0, 2.0), xp.clip(t, -1.0, 2.0)),
            (np_.zeros_like(X), xp.zeros_like(t)),
            (np_.concatenate([X, X[:1]]), xp.concatenate([t, t[:1]])),
        ]
        for ours, theirs in pairs:
            np.testing.assert_array_equal(xp.host(theirs), ours)
        assert [p.shape for p in np_.split(np.zeros((5, 2)), [2, 3])] == [(2, 2), (3, 2)]
        assert [tuple(p.shape) for p in xp.split(xp.like(np.zeros((5, 2))), [2, 3])] == [(2, 2), (3, 2)]


class TestWhereArraysLive:
    def test_an_array_finds_its_engine(self) -> None:
        """A NumPy array's primitives are NumPy's in its dtype; a tensor's torch's; anything else is a TypeError."""
        torch = pytest.importorskip("torch")
        assert arrays_of(X.astype(np.float32)).name == "numpy" and host(X) is X
        tensor = load_arrays("torch", "float32", "cpu").like(X)
        assert tensor.dtype == torch.float32 and arrays_of(tensor).name == "torch"
        np.testing.assert_array_equal(host(tensor), X.astype(np.float32))
        with pytest.raises(TypeError, match="no engine computes on list"):
            arrays_of([1.0, 2.0])

    def test_half_types_live_as_float32_on_the_host(self) -> None:
        """bfloat16 arrays come back to NumPy widened to float32, exactly (1 + 2⁻⁷ survives, 1 + 2⁻⁹ rounds)."""
        torch = pytest.importorskip("torch")
        assert host_dtype("bfloat16") == host_dtype("float16") == "float32" and host_dtype("float64") == "float64"
        xp = load_arrays("torch", "bfloat16", "cpu")
        values = xp.host(xp.like(np.array([1 + 2**-7, 1 + 2**-9, math.pi])))
        assert values.dtype == np.float32 and values.tolist() == [1 + 2**-7, 1.0, 3.140625]
        assert xp.like(X).dtype == torch.bfloat16
