from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from attnx.analysis.compare import default_tolerance
from attnx.engines import compute, numpy_blocked, numpy_engine
from attnx.spec import AttentionSpec

N, M = 300, 260
EXP2_IS_FAST = numpy_blocked.exp2_is_fast  # the real one: the `exp2` fixture stubs the module's


def labels(n: int) -> tuple[str, ...]:
    return tuple(f"t{i}" for i in range(n))


def make_spec(
    n: int = N, m: int = M, heads: int = 8, kv_heads: int | None = None, seed: int = 0, magnitude: float = 1.0, **kw
) -> AttentionSpec:
    rng = np.random.default_rng(seed)
    d_k = 8
    q = rng.standard_normal((n, heads * d_k)) * magnitude
    k, v = rng.standard_normal((2, m, (kv_heads or heads) * d_k)) * magnitude
    return AttentionSpec(q, k, v, heads, labels(n), labels(m), kv_heads=kv_heads, **kw)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked paths for every size, in tasks of 32 query rows and tiles of 8 keys: every test
    crosses many tile and block boundaries (M = 260 ends in a partial tile) and uses the thread pool."""
    monkeypatch.setattr(numpy_engine, "DENSE_LIMIT", 0)
    monkeypatch.setattr(numpy_blocked, "OUTPUT_ROWS", 32)
    monkeypatch.setattr(numpy_blocked, "CAUSAL_ROWS", 32)
    monkeypatch.setattr(numpy_blocked, "WEIGHT_ROWS", 32)
    monkeypatch.setattr(numpy_blocked, "KEY_TILE_BYTES", 1)


@pytest.fixture(autouse=True, params=[False, True], ids=["exp", "exp2"])
def exp2(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every test runs with the exp paths in base e and in base 2, whichever this machine would choose."""
    monkeypatch.setattr(numpy_blocked, "exp2_is_fast", lambda: request.param)
    return bool(request.param)


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
        original = numpy_blocked._Operands.queries

        def spy(self: numpy_blocked._Operands, *args: object) -> tuple[np.ndarray, np.ndarray | None]:
            queries, shift = original(self, *args)
            shifts.append(shift is not None)
            return queries, shift

        monkeypatch.setattr(numpy_blocked._Operands, "queries", spy)
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
        spec = AttentionSpec(q, k, v, 8, labels(N), labels(M))
        fast = compute(spec, dtype="float32", needs={"output"})
        ref = dense_reference(spec, "float32")
        assert np.isfinite(fast.output).all()
        tol = default_tolerance("float32", ref.output)
        np.testing.assert_allclose(fast.output, ref.output, rtol=tol.rtol, atol=tol.atol)

    def test_causal_tiles(self) -> None:
        """A causal mask alone masks only the keys past the rows' first position, tile by tile."""
        blocked = numpy_blocked._Blocked(positions=np.array([[5], [9]]))
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
        first, mask = numpy_blocked._Blocked(full=full).tile(2, 5)
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
        for name in ("_output_path", "_weights_path"):
            original = getattr(numpy_blocked, name)
            monkeypatch.setattr(numpy_blocked, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
        spec = make_spec()
        compute(spec, needs={"output"})
        compute(spec, needs={"weights"})
        assert calls == ["_output_path", "_weights_path"]
        dense_reference(spec, "float64")
        assert len(calls) == 2

    def test_block_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Tasks take the rows asked for, fewer when a CPU would be left idle, in multiples of 8."""
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        assert numpy_blocked.block_rows(256, 16384) == 256
        assert numpy_blocked.block_rows(256, 300) == 152  # 150 rounded up to a multiple of 8
        assert numpy_blocked.block_rows(256, 3) == 8
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 1)
        assert numpy_blocked.block_rows(256, 300) == 256

    def test_output_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Output-path blocks are equal, at most the size asked for, and cut finer only while a CPU would idle."""
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        assert numpy_blocked.output_rows(1024, 8, 1024) == 1024  # 8 tasks: 4 rounds of 2
        assert numpy_blocked.output_rows(8192, 8, 1024) == 1024
        assert numpy_blocked.output_rows(1024, 3, 1024) == 512  # 3 tasks would idle a CPU for a round: 6
        assert numpy_blocked.output_rows(1024, 1, 1024) == 512
        assert numpy_blocked.output_rows(1300, 8, 1024) == 656  # two equal blocks (650 → 656), not 1024 + 276
        assert numpy_blocked.output_rows(1024, 8, 512) == 512
        assert numpy_blocked.output_rows(3, 1, 1024) == 8
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 16)
        assert numpy_blocked.output_rows(1024, 12, 1024) == 256  # 12, 24 and 36 tasks idle 1/4: 48 do not
        assert numpy_blocked.output_rows(1024, 14, 1024) == 1024  # 14 of 16 CPUs: 1/8 idle, at the bound
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 1)
        assert numpy_blocked.output_rows(1024, 1, 1024) == 1024

    def test_causal_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Under a causal mask the output path takes CAUSAL_ROWS blocks, otherwise OUTPUT_ROWS."""
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        monkeypatch.setattr(numpy_blocked, "OUTPUT_ROWS", 64)
        monkeypatch.setattr(numpy_blocked, "CAUSAL_ROWS", 16)
        seen: list[int] = []
        original = numpy_blocked.row_blocks
        monkeypatch.setattr(numpy_blocked, "row_blocks", lambda n, rows: seen.append(rows) or original(n, rows))
        for causal in (False, True):
            compute(make_spec(n=128, m=128, causal=causal), dtype="float64", needs={"output"})
        assert seen == [64, 16]

    def test_weight_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A weights-path task takes 512 rows, fewer when its rows × M tile would pass 8 MiB (multiples of 8)."""
        monkeypatch.setattr(numpy_blocked, "WEIGHT_ROWS", 512)
        assert numpy_blocked.weight_rows(2048, 4) == 512
        assert numpy_blocked.weight_rows(8192, 4) == 256
        assert numpy_blocked.weight_rows(8192, 8) == 128
        assert numpy_blocked.weight_rows(3000, 8) == 344  # 349.5 rounded down to a multiple of 8
        assert numpy_blocked.weight_rows(10**8, 4) == 8

    def test_key_tile(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An output-path tile of rows × keys takes about KEY_TILE_BYTES: 256 × 512 in float32."""
        monkeypatch.setattr(numpy_blocked, "KEY_TILE_BYTES", 512 << 10)
        assert numpy_blocked.key_tile(256, 4) == 512
        assert numpy_blocked.key_tile(256, 8) == 256
        assert numpy_blocked.key_tile(100, 4) == 1304  # 1310 rounded down to a multiple of 8
        assert numpy_blocked.key_tile(1 << 20, 8) == 8


class TestRunTasks:
    def test_every_task_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every task runs exactly once, spread over the caller and the helper threads."""
        import threading

        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        seen: list[tuple[int, str]] = []
        lock = threading.Lock()

        def work(task: int) -> None:
            with lock:
                seen.append((task, threading.current_thread().name))

        numpy_blocked.run_tasks(work, list(range(200)))
        assert sorted(task for task, _ in seen) == list(range(200))

    def test_a_failure_stops_new_tasks_and_is_raised(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The first exception is raised in the caller once every thread has stopped; no task starts after it."""
        import threading
        import time

        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        raised = threading.Event()
        started: list[int] = []
        late: list[int] = []  # tasks that started after task 3 failed

        def work(task: int) -> None:
            if raised.is_set():
                late.append(task)
            started.append(task)
            if task == 3:
                raised.set()
                raise ValueError("task 3 failed")
            time.sleep(0.001)

        with pytest.raises(ValueError, match="task 3 failed"):
            numpy_blocked.run_tasks(work, list(range(1000)))
        assert 3 in started and len(started) < 1000
        assert len(late) <= 1  # only a helper that had just taken its next task when task 3 failed

    def test_one_cpu_runs_in_the_caller(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With one CPU the tasks run in order in the calling thread."""
        import threading

        monkeypatch.setattr(numpy_blocked, "workers", lambda: 1)
        names: list[str] = []
        numpy_blocked.run_tasks(lambda task: names.append(threading.current_thread().name), [0, 1, 2])
        assert names == [threading.current_thread().name] * 3

    def test_errstate_reaches_the_helpers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """np.errstate is per thread: the helpers run under the caller's settings."""
        monkeypatch.setattr(numpy_blocked, "workers", lambda: 2)
        settings: list[str] = []
        with np.errstate(over="raise"):
            numpy_blocked.run_tasks(lambda task: settings.append(np.geterr()["over"]), list(range(50)))
        assert set(settings) == {"raise"}


class TestByRow:
    @pytest.mark.parametrize("shape", [(4, 64), (7, 1000), (3, 5, 300), (2, 8192)])
    @pytest.mark.parametrize("op", [np.multiply, np.subtract, np.divide])
    def test_equals_the_plain_ufunc(self, op: np.ufunc, shape: tuple[int, ...]) -> None:
        """Whatever the buffer, each row combined with its value is bit for bit what the ufunc gives."""
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(np.float32)
        column = rng.uniform(0.5, 2.0, (*shape[:-1], 1)).astype(np.float32)
        expected = op(x, column)
        np.testing.assert_array_equal(numpy_blocked.by_row(op, x, column, out=np.empty_like(x)), expected)
        numpy_blocked.by_row(op, x, column, out=x)  # in place, as softmax_rows_ uses it
        np.testing.assert_array_equal(x, expected)

    @pytest.mark.parametrize(("cols", "buffer"), [(64, 8192), (255, 8192), (256, 256), (1000, 992), (8192, 8192)])
    def test_buffer_is_cut_to_a_long_row_and_restored(self, cols: int, buffer: int) -> None:
        """Rows of 256 to 8191 elements run with a buffer of one row (a multiple of 16); the size is restored after."""
        seen: list[int] = []

        def op(x: np.ndarray, column: np.ndarray, out: np.ndarray) -> np.ndarray:
            seen.append(np.getbufsize())
            return np.multiply(x, column, out=out)

        x = np.ones((3, cols), np.float32)
        numpy_blocked.by_row(op, x, np.ones((3, 1), np.float32), out=x)  # type: ignore[arg-type]
        assert seen == [buffer]
        assert np.getbufsize() == 8192


class TestExpBase:
    def test_base_two_scales_the_queries_and_the_bound(self, exp2: bool) -> None:
        """In base 2 the queries' multiplier and the unshifted bound are base e's times log2 e; exp is exp2."""
        spec = make_spec(seed=10, scale=0.3)
        q, k, v = (
            np.ascontiguousarray(x.reshape(x.shape[0], 8, 8).transpose(1, 0, 2)) for x in (spec.q, spec.k, spec.v)
        )
        ops = numpy_blocked._Operands(q, k, v, spec, exp_paths=True)
        unit = 1 / np.log(2) if exp2 else 1.0
        assert ops.exp is (np.exp2 if exp2 else np.exp)
        assert ops.exp_multiplier == pytest.approx(0.3 * unit, rel=1e-15)
        headroom = np.log(np.finfo(np.float64).max) - np.log(M) - np.log(max(np.abs(spec.v).max(), 1.0))
        room = min(-np.log(numpy_blocked.TINY[np.dtype(np.float64)]), headroom) - 1
        assert ops.unshifted_up_to == pytest.approx(room * unit, rel=1e-12)

    def test_base_two_on_an_exact_recompute(self, exp2: bool) -> None:
        """Rows redone with the true maximum use the same base as their scores: the weights match the dense path."""
        spec = make_spec(seed=11, magnitude=40.0)  # every denominator underflows
        fast = compute(spec, needs={"weights"})
        ref = dense_reference(spec, "float64")
        np.testing.assert_allclose(fast.weights, ref.weights, rtol=1e-9, atol=1e-12)


class TestExp2IsFast:
    @pytest.fixture(autouse=True)
    def uncached(self) -> Iterator[None]:
        """Each test asks afresh (the answer is cached for the process)."""
        EXP2_IS_FAST.cache_clear()
        yield
        EXP2_IS_FAST.cache_clear()

    @pytest.mark.parametrize("avx512", [True, False])
    def test_follows_numpy_dispatch_on_linux_x86(self, monkeypatch: pytest.MonkeyPatch, avx512: bool) -> None:
        """On Linux x86-64 the answer is whether NumPy dispatches on AVX512_SKX (where it links SVML's exp2)."""
        monkeypatch.setattr(numpy_blocked.sys, "platform", "linux")
        monkeypatch.setattr(numpy_blocked.platform, "machine", lambda: "x86_64")
        monkeypatch.setattr(numpy_blocked, "cpu_features", lambda: {"AVX2": True, "AVX512_SKX": avx512})
        assert EXP2_IS_FAST() is avx512

    @pytest.mark.parametrize(("system", "machine"), [("darwin", "x86_64"), ("win32", "AMD64"), ("linux", "aarch64")])
    def test_false_elsewhere(self, monkeypatch: pytest.MonkeyPatch, system: str, machine: str) -> None:
        """NumPy links SVML on Linux x86-64 alone: elsewhere exp2 is scalar and exp is kept."""
        monkeypatch.setattr(numpy_blocked.sys, "platform", system)
        monkeypatch.setattr(numpy_blocked.platform, "machine", lambda: machine)
        monkeypatch.setattr(numpy_blocked, "cpu_features", lambda: {"AVX512_SKX": True})
        assert EXP2_IS_FAST() is False

    def test_cpu_features_are_numpys(self) -> None:
        """The features are NumPy's own record: the SIMD levels its wheels dispatch on are named there."""
        features = numpy_blocked.cpu_features()
        assert features and all(isinstance(found, bool) for found in features.values())
        assert {"AVX2", "AVX512_SKX", "NEON", "ASIMD"} & features.keys()
