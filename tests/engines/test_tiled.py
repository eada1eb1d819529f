"""The tiled NumPy kernel: plans, threads, process state and agreement with the one-piece path."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.tolerance import default_tolerance
from attnx.core.spec import AttentionSpec
from attnx.engines import compute, numpy_engine, tiled
from attnx.engines.tiled import machine, operands, plan, rows, threads
from tests.specs import spec_of

N, M = 200, 170
BASE = tiled.Plan(cpus=2, exp2=False)


def labels(n: int) -> tuple[str, ...]:
    return tuple(f"t{i}" for i in range(n))


def make_spec(
    n: int = N, m: int = M, heads: int = 4, kv_heads: int | None = None, seed: int = 0, **kw
) -> AttentionSpec:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, heads * 8))
    k, v = rng.standard_normal((2, m, (kv_heads or heads) * 8))
    return spec_of(q, k, v, heads, labels(n), labels(m), kv_heads=kv_heads, **kw)


def plain(spec: AttentionSpec, dtype: str, needs: set[str] | None = None):
    """The same problem through the one-piece path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numpy_engine, "DENSE_LIMIT", 1 << 62)
        return compute(spec, "numpy", dtype=dtype, needs=needs)


def tiled_result(spec: AttentionSpec, dtype: str, chosen: tiled.Plan, needs: set[str] | None = None):
    """The same problem through the tiled kernel under ``chosen``."""
    with pytest.MonkeyPatch.context() as patch, tiled.using(chosen):
        patch.setattr(numpy_engine, "DENSE_LIMIT", 0)
        return compute(spec, "numpy", dtype=dtype, needs=needs)


def process_state() -> tuple[object, ...]:
    """What a call could leave changed: BLAS threads, NumPy's buffer size and error state, live threads."""
    from threadpoolctl import threadpool_info

    blas = tuple(sorted((lib["filepath"], lib["num_threads"]) for lib in threadpool_info()))
    return blas, np.getbufsize(), tuple(sorted(np.geterr().items())), threading.active_count()


CASES = {
    "plain": {},
    "causal": {"causal": True},
    "mask": {"mask": np.random.default_rng(3).random((N, M)) > 0.3},
    "padding": {"padding": np.arange(M) % 5 == 2},
    "gqa": {"kv_heads": 2},
    "gqa-causal-padding": {"kv_heads": 1, "causal": True, "padding": np.arange(M) % 7 == 3},
}
PLANS = {
    "rows8-keys8-1cpu": dataclasses.replace(
        BASE, cpus=1, output_rows=8, causal_rows=8, weight_rows=8, key_tile_bytes=1
    ),
    "rows32-keys64-2cpu": dataclasses.replace(
        BASE, output_rows=32, causal_rows=16, weight_rows=32, key_tile_bytes=8192
    ),
    "rows56-3cpu-exp2": dataclasses.replace(
        BASE, cpus=3, exp2=True, output_rows=56, weight_rows=56, key_tile_bytes=4096
    ),
    "default-plan": BASE,
}


@pytest.mark.parametrize("chosen", list(PLANS.values()), ids=list(PLANS))
@pytest.mark.parametrize("case", list(CASES))
class TestTiledEqualsPlain:
    def test_float64(self, case: str, chosen: tiled.Plan) -> None:
        """In float64 the tiled output and weights equal the one-piece path's to 1e-12, whatever the plan."""
        spec = make_spec(seed=1, **CASES[case])
        ref = plain(spec, "float64")
        out = tiled_result(spec, "float64", chosen, {"output"})
        np.testing.assert_allclose(out.output, ref.output, rtol=1e-12, atol=1e-12)
        weights = tiled_result(spec, "float64", chosen, {"weights", "head_outputs"})
        np.testing.assert_allclose(weights.weights, ref.weights, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(weights.head_outputs, ref.head_outputs, rtol=1e-12, atol=1e-12)

    def test_float32(self, case: str, chosen: tiled.Plan) -> None:
        """In float32 the tiled output equals the one-piece path's within float32's tolerance, whatever the plan."""
        spec = make_spec(seed=2, **CASES[case])
        ref = plain(spec, "float32")
        out = tiled_result(spec, "float32", chosen, {"output"})
        tol = default_tolerance("float32", ref.output)
        np.testing.assert_allclose(out.output, ref.output, rtol=tol.rtol, atol=tol.atol)


class TestProcessState:
    @pytest.mark.parametrize("needs", [{"output"}, {"weights"}, {"scores"}], ids=["output", "weights", "scores"])
    def test_a_call_leaves_the_process_as_it_found_it(self, needs: set[str]) -> None:
        """BLAS thread counts, NumPy's buffer size and error state and the live threads are the same after a call."""
        before = process_state()
        tiled_result(make_spec(seed=4, causal=True), "float32", BASE, needs)
        assert process_state() == before

    def test_blas_runs_one_thread_inside_the_call_only(self) -> None:
        """During a call that uses helpers, NumPy's BLAS runs one thread; after it, the count is back.

        NumPy's BLAS is loaded with NumPy, before attnx's controller sees the loaded libraries; a BLAS that
        another package loads later (SciPy's, when transformers imports it) is not NumPy's and is left alone.
        """
        from threadpoolctl import threadpool_info

        controlled = {lib.filepath for lib in threads._blas_controller().lib_controllers if lib.user_api == "blas"}
        assert controlled
        before = process_state()[0]
        seen: list[set[int]] = []
        threads.run_tasks(
            lambda task: seen.append(
                {lib["num_threads"] for lib in threadpool_info() if lib["filepath"] in controlled}
            ),
            [0, 1],
            2,
        )
        assert len(seen) == 2 and all(counts == {1} for counts in seen)
        assert process_state()[0] == before

    def test_buffer_is_restored_after_an_error(self) -> None:
        """by_row restores NumPy's buffer size even when the ufunc raises."""

        def failing(x: np.ndarray, column: np.ndarray, out: np.ndarray) -> np.ndarray:
            raise FloatingPointError("boom")

        before = np.getbufsize()
        with pytest.raises(FloatingPointError):
            rows.by_row(failing, np.ones((2, 1000)), np.ones((2, 1)), out=None)  # type: ignore[arg-type]
        assert np.getbufsize() == before

    def test_helpers_end_with_the_call(self) -> None:
        """No helper thread outlives run_tasks."""
        count = threading.active_count()
        threads.run_tasks(lambda task: time.sleep(0.001), list(range(20)), 4)
        assert threading.active_count() == count


class TestSizes:
    def test_block_rows(self) -> None:
        """Tasks take the rows asked for, fewer when a CPU would be left idle, in multiples of 8."""
        two, one = BASE, dataclasses.replace(BASE, cpus=1)
        assert plan.block_rows(two, 256, 16384) == 256
        assert plan.block_rows(two, 256, 300) == 152  # 150 rounded up to a multiple of 8
        assert plan.block_rows(two, 256, 3) == 8
        assert plan.block_rows(one, 256, 300) == 256

    def test_output_rows(self) -> None:
        """Output-path blocks are equal, at most the size asked for, and cut finer only while a CPU would idle."""
        two, sixteen, one = BASE, dataclasses.replace(BASE, cpus=16), dataclasses.replace(BASE, cpus=1)
        assert plan.output_rows(two, 1024, 8, 1024) == 1024  # 8 tasks: 4 rounds of 2
        assert plan.output_rows(two, 8192, 8, 1024) == 1024
        assert plan.output_rows(two, 1024, 3, 1024) == 512  # 3 tasks would idle a CPU for a round: 6
        assert plan.output_rows(two, 1024, 1, 1024) == 512
        assert plan.output_rows(two, 1300, 8, 1024) == 656  # two equal blocks (650 → 656), not 1024 + 276
        assert plan.output_rows(two, 1024, 8, 512) == 512
        assert plan.output_rows(two, 3, 1, 1024) == 8
        assert plan.output_rows(sixteen, 1024, 12, 1024) == 256  # 12, 24 and 36 tasks idle 1/4: 48 do not
        assert plan.output_rows(sixteen, 1024, 14, 1024) == 1024  # 14 of 16 CPUs: 1/8 idle, at the bound
        assert plan.output_rows(one, 1024, 1, 1024) == 1024

    def test_causal_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Under a causal mask the output path takes the plan's causal_rows blocks, otherwise output_rows."""
        seen: list[int] = []
        original = plan.row_blocks
        monkeypatch.setattr(
            "attnx.engines.tiled.kernel.row_blocks", lambda n, size: seen.append(size) or original(n, size)
        )
        chosen = dataclasses.replace(BASE, output_rows=64, causal_rows=16)
        for causal in (False, True):
            tiled_result(make_spec(n=128, m=128, causal=causal), "float64", chosen, {"output"})
        assert seen == [64, 16]

    def test_weight_rows(self) -> None:
        """A weights-path task takes 512 rows, fewer when its rows × M tile would pass 8 MiB (multiples of 8)."""
        assert plan.weight_rows(BASE, 2048, 4) == 512
        assert plan.weight_rows(BASE, 8192, 4) == 256
        assert plan.weight_rows(BASE, 8192, 8) == 128
        assert plan.weight_rows(BASE, 3000, 8) == 344  # 349.5 rounded down to a multiple of 8
        assert plan.weight_rows(BASE, 10**8, 4) == 8

    def test_key_tile(self) -> None:
        """An output-path tile of rows × keys takes about key_tile_bytes: 256 × 512 in float32 at 512 KiB."""
        half = dataclasses.replace(BASE, key_tile_bytes=512 << 10)
        assert plan.key_tile(half, 256, 4) == 512
        assert plan.key_tile(half, 256, 8) == 256
        assert plan.key_tile(half, 100, 4) == 1304  # 1310 rounded down to a multiple of 8
        assert plan.key_tile(half, 1 << 20, 8) == 8


class TestPlanForTheMachine:
    def test_follows_the_machine(self) -> None:
        """CPUs and exp base come from the machine; the key tile follows its L2, within 256 KiB to 2 MiB."""
        made = plan.plan_for(machine.Machine(cpus=6, l2_bytes=512 << 10, exp2_is_fast=True))
        assert (made.cpus, made.exp2, made.key_tile_bytes) == (6, True, 512 << 10)
        assert plan.plan_for(machine.Machine(1, 32 << 20, False)).key_tile_bytes == 2 << 20
        assert plan.plan_for(machine.Machine(1, 64 << 10, False)).key_tile_bytes == 256 << 10

    def test_using_replaces_the_plan_for_a_block(self) -> None:
        """using() puts a plan in force inside its block only; outside it, the machine's plan is back."""
        assert tiled.current_plan() == plan.machine_plan()
        with tiled.using(BASE):
            assert tiled.current_plan() is BASE
        assert tiled.current_plan() == plan.machine_plan()

    def test_l2_from_sysfs(self, tmp_path: Path) -> None:
        """The L2 size is read from sysfs's data or unified level-2 cache; without one, the default."""
        for index, (level, kind, size) in enumerate([("1", "Data", "32K"), ("2", "Unified", "2048K")]):
            folder = tmp_path / f"index{index}"
            folder.mkdir()
            for name, text in (("level", level), ("type", kind), ("size", size)):
                (folder / name).write_text(text + "\n")
        assert machine.l2_bytes(tmp_path) == 2 << 20
        assert machine.l2_bytes(tmp_path / "missing") == machine.DEFAULT_L2

    @pytest.mark.parametrize("level", ["AVX512_SKX", "X86_V4"])
    def test_exp2_where_numpy_links_svml(self, level: str) -> None:
        """On Linux x86-64 exp2 is fast where NumPy dispatches on its AVX-512 level (named by NumPy's version)."""
        assert machine.exp2_is_fast(frozenset({"X86_V3", level}), "linux", "x86_64") is True
        assert machine.exp2_is_fast(frozenset({"X86_V3", "AVX2"}), "linux", "x86_64") is False

    @pytest.mark.parametrize(("system", "arch"), [("darwin", "x86_64"), ("win32", "AMD64"), ("linux", "aarch64")])
    def test_exp_elsewhere(self, system: str, arch: str) -> None:
        """NumPy links SVML on Linux x86-64 alone: elsewhere exp2 is scalar and exp is kept."""
        assert machine.exp2_is_fast(frozenset({"X86_V4", "AVX512_SKX"}), system, arch) is False

    def test_simd_levels_are_numpys(self) -> None:
        """The SIMD levels come from NumPy's public show_config record and name its dispatch levels."""
        found = machine.simd_found()
        assert found and all(isinstance(name, str) for name in found)
        assert {"X86_V2", "SSE42", "AVX2", "NEON", "ASIMD"} & found


class TestRunTasks:
    def test_every_task_once(self) -> None:
        """Every task runs exactly once, spread over the caller and the helper threads."""
        seen: list[int] = []
        lock = threading.Lock()

        def work(task: int) -> None:
            with lock:
                seen.append(task)

        threads.run_tasks(work, list(range(200)), 2)
        assert sorted(seen) == list(range(200))

    def test_a_failure_stops_new_tasks_and_is_raised(self) -> None:
        """The first exception is raised in the caller once every thread has stopped; no task starts after it."""
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
            threads.run_tasks(work, list(range(1000)), 2)
        assert 3 in started and len(started) < 1000
        assert len(late) <= 1  # only a helper that had just taken its next task when task 3 failed

    def test_one_cpu_runs_in_the_caller(self) -> None:
        """With one CPU the tasks run in order in the calling thread."""
        names: list[str] = []
        threads.run_tasks(lambda task: names.append(threading.current_thread().name), [0, 1, 2], 1)
        assert names == [threading.current_thread().name] * 3

    def test_errstate_reaches_the_helpers(self) -> None:
        """np.errstate is per thread: the helpers run under the caller's settings."""
        settings: list[str] = []
        with np.errstate(over="raise"):
            threads.run_tasks(lambda task: settings.append(np.geterr()["over"]), list(range(50)), 2)
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
        np.testing.assert_array_equal(rows.by_row(op, x, column, out=np.empty_like(x)), expected)
        rows.by_row(op, x, column, out=x)  # in place, as softmax_rows_ uses it
        np.testing.assert_array_equal(x, expected)

    @pytest.mark.parametrize(("cols", "buffer"), [(64, 8192), (255, 8192), (256, 256), (1000, 992), (8192, 8192)])
    def test_buffer_is_cut_to_a_long_row_and_restored(self, cols: int, buffer: int) -> None:
        """Rows of 256 to 8191 elements run with a buffer of one row (a multiple of 16); the size is restored after."""
        seen: list[int] = []

        def op(x: np.ndarray, column: np.ndarray, out: np.ndarray) -> np.ndarray:
            seen.append(np.getbufsize())
            return np.multiply(x, column, out=out)

        x = np.ones((3, cols), np.float32)
        rows.by_row(op, x, np.ones((3, 1), np.float32), out=x)  # type: ignore[arg-type]
        assert seen == [buffer]
        assert np.getbufsize() == 8192


class TestExpBase:
    @pytest.mark.parametrize("exp2", [False, True])
    def test_base_two_scales_the_queries_and_the_bound(self, exp2: bool) -> None:
        """In base 2 the queries' multiplier and the unshifted bound are base e's times log2 e; exp is exp2."""
        from attnx.engines.numpy_engine import tiled_rules

        spec = make_spec(seed=10, scale=0.3, heads=8)
        q, k, v = (
            np.ascontiguousarray(x.reshape(x.shape[0], 8, 8).transpose(1, 0, 2))
            for x in (spec.inputs.q, spec.inputs.k, spec.inputs.v)
        )
        ops = operands.Operands(q, k, v, tiled_rules(spec), exp_paths=True, exp2=exp2)
        unit = 1 / np.log(2) if exp2 else 1.0
        assert ops.exp is (np.exp2 if exp2 else np.exp)
        assert ops.exp_multiplier == pytest.approx(0.3 * unit, rel=1e-15)
        headroom = np.log(np.finfo(np.float64).max) - np.log(M) - np.log(max(np.abs(spec.inputs.v).max(), 1.0))
        room = min(-np.log(operands.TINY[np.dtype(np.float64)]), headroom) - 1
        assert ops.unshifted_up_to == pytest.approx(room * unit, rel=1e-12)

    @pytest.mark.parametrize("exp2", [False, True])
    def test_base_two_on_an_exact_recompute(self, exp2: bool) -> None:
        """Rows redone with the true maximum use the same base as their scores: the weights match the plain path."""
        rng = np.random.default_rng(11)
        q, k, v = rng.standard_normal((3, N, 32)) * 40.0  # every denominator underflows
        spec = spec_of(q, k[:M], v[:M], 4, labels(N), labels(M))
        fast = tiled_result(spec, "float64", dataclasses.replace(BASE, exp2=exp2, output_rows=32), {"weights"})
        np.testing.assert_allclose(fast.weights, plain(spec, "float64").weights, rtol=1e-9, atol=1e-12)


@pytest.fixture(autouse=True)
def no_stray_plan() -> Iterator[None]:
    """No test leaves a plan in force."""
    yield
    assert tiled.current_plan() == plan.machine_plan()
