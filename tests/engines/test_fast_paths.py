"""The blocked paths that build no H × N × M matrix equal the dense one, for every choice of matrices kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from attnx.analysis.tolerance import default_tolerance
from attnx.core.spec import AttentionSpec
from attnx.engines import compute, numpy_engine, tiled
from attnx.engines.tiled import operands
from tests.specs import spec_of

N, M = 300, 260
SMALL = tiled.Plan(cpus=2, exp2=False, output_rows=32, causal_rows=32, weight_rows=32, key_tile_bytes=1)


def labels(n: int) -> tuple[str, ...]:
    return tuple(f"t{i}" for i in range(n))


def make_spec(
    n: int = N, m: int = M, heads: int = 8, kv_heads: int | None = None, seed: int = 0, magnitude: float = 1.0, **kw
) -> AttentionSpec:
    rng = np.random.default_rng(seed)
    d_k = 8
    q = rng.standard_normal((n, heads * d_k)) * magnitude
    k, v = rng.standard_normal((2, m, (kv_heads or heads) * d_k)) * magnitude
    return spec_of(q, k, v, heads, labels(n), labels(m), kv_heads=kv_heads, **kw)


@pytest.fixture(autouse=True, params=[False, True], ids=["exp", "exp2"])
def exp2(request: pytest.FixtureRequest) -> bool:
    """Every test runs with the exp paths in base e and in base 2, whichever this machine would choose."""
    return bool(request.param)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch: pytest.MonkeyPatch, exp2: bool) -> Iterator[None]:
    """The blocked paths for every size, in tasks of 32 query rows and tiles of 8 keys on 2 threads: every
    test crosses many tile and block boundaries (M = 260 ends in a partial tile) and uses the helper threads."""
    monkeypatch.setattr(numpy_engine, "DENSE_LIMIT", 0)
    with tiled.using(dataclasses.replace(SMALL, exp2=exp2)):
        yield


def dense_reference(spec: AttentionSpec, dtype: str):
    """The same problem through the one-piece path (DENSE_LIMIT raised above its size)."""
    import attnx.engines.numpy_engine as module

    old = module.DENSE_LIMIT
    module.DENSE_LIMIT = 1 << 62
    try:
        return compute(spec, "numpy", dtype=dtype)
    finally:
        module.DENSE_LIMIT = old


CASES = {
    "plain": {},
    "causal": {"causal": True},
    "padding": {"padding": np.arange(M) % 7 == 3},
    "gqa": {"kv_heads": 2},
    "interleaved": {"layout": "interleaved"},
    "scale": {"scale": 0.05},
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
class TestBlockedEqualsDense:
    def test_output_only(self, engine: str, dtype: str, case: str) -> None:
        """needs={"output"} gives the dense path's output; no weight matrix is returned."""
        spec = make_spec(**CASES[case])
        fast = compute(spec, engine, dtype=dtype, needs={"output"})
        ref = dense_reference(spec, dtype)
        assert fast.weights is None and fast.scores is None and fast.mask is None
        tol = default_tolerance(dtype, ref.output) if dtype == "float32" else None
        np.testing.assert_allclose(
            fast.output, ref.output, rtol=tol.rtol if tol else 1e-10, atol=tol.atol if tol else 1e-12
        )

    def test_weights_path(self, engine: str, dtype: str, case: str) -> None:
        """needs with weights gives the dense path's weights, average and head outputs."""
        spec = make_spec(seed=1, **CASES[case])
        fast = compute(spec, engine, dtype=dtype, needs={"weights", "average_weights", "head_outputs"})
        ref = dense_reference(spec, dtype)
        assert fast.scores is None and fast.scaled is None
        for name in ("weights", "average_weights", "head_outputs"):
            tol = default_tolerance(dtype, getattr(ref, name))
            rtol, atol = (tol.rtol, tol.atol) if dtype == "float32" else (1e-10, 1e-12)
            np.testing.assert_allclose(getattr(fast, name), getattr(ref, name), rtol=rtol, atol=atol, err_msg=name)


NEED_SETS = [
    {"average_weights"},
    {"scores"},
    {"scaled", "average_weights"},
    {"scores", "scaled", "weights", "average_weights"},
]


@pytest.mark.parametrize("needs", NEED_SETS, ids=lambda needs: "+".join(sorted(needs)))
@pytest.mark.parametrize("case", ["plain", "causal", "gqa"])
def test_every_matrix_combination(needs: set[str], case: str) -> None:
    """Each mix of matrices (kept in place, in scratch tiles, or averaged) equals the dense path's."""
    spec = make_spec(seed=7, **CASES[case])
    fast = compute(spec, needs=needs | {"head_outputs"})
    ref = dense_reference(spec, "float64")
    for name in needs | {"head_outputs", "output"}:
        np.testing.assert_allclose(getattr(fast, name), getattr(ref, name), rtol=1e-10, atol=1e-13, err_msg=name)
    for name in {"scores", "scaled", "weights", "average_weights"} - needs:
        assert getattr(fast, name) is None, name


class TestBlockedDetails:
    def test_scores_and_scaled_in_blocks(self) -> None:
        """The weights path writes scores and scaled exactly as the dense path computes them."""
        spec = make_spec(seed=2, causal=True)
        fast = compute(spec, needs={"scores", "scaled"})
        ref = dense_reference(spec, "float64")
        np.testing.assert_allclose(fast.scores, ref.scores, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(fast.scaled, ref.scaled, rtol=1e-13, atol=1e-13)

    def test_fully_masked_rows_are_zero(self, engine: str) -> None:
        """Rows whose keys are all blocked come out as zeros on the output-only path too."""
        mask = np.ones((N, M), dtype=bool)
        mask[[5, 77, 299]] = False
        spec = make_spec(seed=3, mask=mask)
        fast = compute(spec, engine, needs={"output"})
        assert fast.fully_masked_rows == (5, 77, 299)
        assert not fast.output[[5, 77, 299]].any()
        np.testing.assert_allclose(fast.output, dense_reference(spec, "float64").output, rtol=1e-10, atol=1e-12)

    def test_shift_overshoot_falls_back_to_exact(self) -> None:
        """Huge, badly aligned scores make the Cauchy–Schwarz shift overshoot; those rows are redone exactly."""
        spec = make_spec(seed=4, magnitude=40.0)  # |q|·|k| ≫ q·k: denominators underflow
        fast = compute(spec, needs={"output"})
        ref = dense_reference(spec, "float64")
        assert np.isfinite(fast.output).all()
        np.testing.assert_allclose(fast.output, ref.output, rtol=1e-9, atol=1e-9)

    def test_shift_overshoot_on_the_weights_path(self) -> None:
        """The weights path redoes overshooting rows exactly too: weights and outputs match the dense path."""
        mask = np.ones((N, M), dtype=bool)
        mask[7] = False  # a fully masked row goes through the same fallback
        spec = make_spec(seed=6, magnitude=40.0, mask=mask)
        fast = compute(spec, needs={"weights"})
        ref = dense_reference(spec, "float64")
        np.testing.assert_allclose(fast.weights, ref.weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(fast.output, ref.output, rtol=1e-9, atol=1e-9)
        assert not fast.weights[:, 7].any()

    @pytest.mark.parametrize(
        ("dtype", "magnitude", "shifted"),
        [("float32", 1.0, False), ("float32", 5.0, True), ("float64", 5.0, False), ("float64", 15.0, True)],
    )
    def test_unshifted_and_shifted_exp(
        self, monkeypatch: pytest.MonkeyPatch, dtype: str, magnitude: float, shifted: bool
    ) -> None:
        """Score bounds c_i within the dtype's room take exp as it is, larger ones shift each row by c_i:
        both equal the dense path."""
        shifts: list[bool] = []
        original = operands.Operands.queries

        def spy(self: operands.Operands, *args: object) -> tuple[np.ndarray, np.ndarray | None]:
            queries, shift = original(self, *args)
            shifts.append(shift is not None)
            return queries, shift

        monkeypatch.setattr(operands.Operands, "queries", spy)
        # c_i ≈ 4.5·magnitude²; the room is about 68 in float32 and 643 in float64
        spec = make_spec(seed=8, magnitude=magnitude, causal=True)
        fast = compute(spec, dtype=dtype, needs={"output"})
        ref = dense_reference(spec, dtype)
        assert set(shifts) == {shifted}
        tol = default_tolerance(dtype, ref.output)
        np.testing.assert_allclose(fast.output, ref.output, rtol=tol.rtol, atol=tol.atol)

    def test_huge_values_shift_even_small_scores(self) -> None:
        """Values near float32's limit leave no room for unshifted sums: exp is shifted and nothing overflows."""
        rng = np.random.default_rng(9)
        q = rng.standard_normal((N, 64)) * 1.5  # scores up to about 7: exp(7)·1e36 passes 3.4e38
        k, v = rng.standard_normal((2, M, 64)) * [[[1.5]], [[1e36]]]
        spec = spec_of(q, k, v, 8, labels(N), labels(M))
        fast = compute(spec, dtype="float32", needs={"output"})
        ref = dense_reference(spec, "float32")
        assert np.isfinite(fast.output).all()
        tol = default_tolerance("float32", ref.output)
        np.testing.assert_allclose(fast.output, ref.output, rtol=tol.rtol, atol=tol.atol)

    def test_causal_tiles(self) -> None:
        """A causal mask alone masks only the keys past the rows' first position, tile by tile."""
        blocked = operands.Blocked(positions=np.array([[5], [9]]))
        assert blocked.tile(0, 4) is None and blocked.tile(4, 6) is None  # keys 0-5: open to both rows
        first, mask = blocked.tile(4, 8)
        assert first == 6
        np.testing.assert_array_equal(mask, [[True, True], [False, False]])  # keys 6, 7
        first, mask = blocked.tile(8, 12)
        assert first == 8
        np.testing.assert_array_equal(mask, [[True] * 4, [False, False, True, True]])

    def test_mask_tiles(self) -> None:
        """With a mask or padding, tiles are slices of the whole block's blocked keys, from their start."""
        full = np.arange(12).reshape(2, 6) % 4 == 0
        first, mask = operands.Blocked(full=full).tile(2, 5)
        assert first == 2
        np.testing.assert_array_equal(mask, full[:, 2:5])

    def test_scattered_causal_queries(self, engine: str) -> None:
        """Selected queries out of order under a causal mask (each masked at its own position) equal their rows."""
        rows = [250, 3, 100, 40, 299, 0, 180, 77] * 5
        spec = make_spec(seed=6, causal=True)
        some = compute(spec.select_queries(rows), engine, needs={"output"})
        full = dense_reference(spec, "float64")
        np.testing.assert_allclose(some.output, full.output[rows], rtol=1e-10, atol=1e-12)

    def test_one_query_row_of_a_long_input(self, engine: str) -> None:
        """A single selected query (as trace asks) equals that row of the full result."""
        spec = make_spec(seed=5, causal=True)
        one = compute(spec.select_queries([123]), engine)
        full = dense_reference(spec, "float64")
        np.testing.assert_allclose(one.weights[:, 0], full.weights[:, 123], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(one.output[0], full.output[123], rtol=1e-12, atol=1e-15)

    def test_blocked_paths_run(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """These tests reach the blocked paths: both are called, and the dense reference is not."""
        calls: list[str] = []
        for name in ("output_path", "weights_path"):
            original = getattr(tiled, name)
            monkeypatch.setattr(tiled, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
        spec = make_spec()
        compute(spec, needs={"output"})
        compute(spec, needs={"weights"})
        assert calls == ["output_path", "weights_path"]
        dense_reference(spec, "float64")
        assert len(calls) == 2
