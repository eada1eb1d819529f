"""attnx bench: the rows it builds from measured times, and the command's output."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from attnx.analysis import bench
from attnx.analysis.bench import BenchSettings, run_bench
from tests.runner import run_attnx


class TestRunBench:
    def test_rows_ratios_and_memory(self) -> None:
        """Each engine gets a row per length; ratios chain to the previous length; weights MiB is H·N²·4.

        The timings come from a stand-in for best_times (each side 0.5 ms at N=32, 2 ms at N=64), so every
        figure derived from them is known exactly.
        """
        stand_in = {32: 0.0005, 64: 0.002}  # seconds the stand-in reports per length: nothing is timed
        seconds = iter(stand_in.values())
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bench, "best_times", lambda runs, *_: [next(seconds)] * len(runs))
            rows = run_bench(BenchSettings(list(stand_in), heads=2, d_model=16, engines=["numpy"], repeat=1))
        assert [(r.engine, r.length) for r in rows] == [("numpy", 32), ("numpy", 64)]
        assert {r.length: r.seconds for r in rows} == stand_in  # the stand-in's figures, carried into the rows
        assert rows[0].vs_previous is None
        assert rows[1].vs_previous == pytest.approx(4.0)
        assert rows[1].matrix_mib == 2 * 64 * 64 * 4 / 2**20
        assert rows[1].gflops == pytest.approx(4 * 64 * 64 * 16 / 0.002 / 1e9)
        assert rows[0].peak_mib is not None and rows[0].peak_mib > 0

    def test_progress_is_reported(self) -> None:
        """The progress callback hears about every timed cell, SDPA included when torch is there."""
        seen: list[str] = []
        run_bench(BenchSettings([16, 8], heads=1, d_model=4, engines=["numpy"], repeat=1), seen.append)
        sdpa = ["torch SDPA, N=16"] if importlib.util.find_spec("torch") else []
        assert seen[: len(sdpa) + 1] == [*sdpa, "numpy, N=16"] and seen[-1] == "numpy, N=8"

    def test_problem_in_the_timed_dtype(self) -> None:
        """The random inputs are made in the dtype timed (no conversion inside the engine's timing), same draws."""
        wide, narrow = bench.problem(8, 2, 4), bench.problem(8, 2, 4, "float32")
        assert narrow.inputs.q.dtype == np.float32 and wide.inputs.q.dtype == np.float64
        np.testing.assert_array_equal(narrow.inputs.v, wide.inputs.v.astype(np.float32))

    def test_sides_take_turns(self) -> None:
        """best_times runs each side once per round, in turn, and keeps each side's best time."""
        calls: list[str] = []
        clock = iter([0.0, 3.0, 3.0, 4.0, 10.0, 11.0, 11.0, 15.0])  # a: 3, then 1; b: 1, then 4
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bench.time, "perf_counter", lambda: next(clock))
            best = bench.best_times([lambda: calls.append("a"), lambda: calls.append("b")], repeat=2)
        assert calls == ["a", "b", "a", "b"] and best == [1.0, 1.0]

    def test_a_settling_side_runs_once_untimed_before_each_timed_run(self) -> None:
        """Marked in settle, side b runs twice per round, and only its second run is timed."""
        calls: list[str] = []
        clock = iter([0.0, 2.0, 2.0, 7.0, 7.0, 8.0, 8.0, 10.0])  # a: 2, then 1; b: 5, then 2
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bench.time, "perf_counter", lambda: next(clock))
            best = bench.best_times([lambda: calls.append("a"), lambda: calls.append("b")], 2, [False, True])
        assert calls == ["a", "b", "b", "a", "b", "b"] and best == [1.0, 2.0]

    def test_sdpa_ratio_with_torch(self) -> None:
        """With torch installed every row carries its ratio to bare SDPA."""
        pytest.importorskip("torch")
        rows = run_bench(BenchSettings([32], heads=2, d_model=16, engines=["numpy", "torch"], repeat=1))
        assert all(r.vs_sdpa is not None and r.vs_sdpa > 0 for r in rows)


class TestBenchCommand:
    def test_json(self) -> None:
        """--format json carries the settings and one row per engine and length."""
        result = run_attnx("bench", "--lengths", "16,32", "--engines", "numpy", "-H", "2", "--d-model", "8",
                           "--repeat", "1", "--path", "weights", "--format", "json")  # fmt: skip
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["format_version"] == "1.9" and data["settings"]["path"] == "weights"
        assert [(r["engine"], r["length"]) for r in data["rows"]] == [("numpy", 16), ("numpy", 32)]

    def test_table(self) -> None:
        """The table names its columns; nothing but the table reaches stdout."""
        result = run_attnx(
            "bench", "--lengths", "16", "--engines", "numpy", "--repeat", "1", "-H", "1", "--d-model", "4"
        )
        assert result.code == 0
        assert "GFLOP/s" in result.stdout and "weights MiB" in result.stdout and result.stderr == ""

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--lengths", "16,x"], "--lengths takes positive whole numbers separated by commas"),
            (["--engines", "jax"], "engine 'jax' is not available"),
            (["--path", "all"], "--path takes output or weights, not 'all'"),
            (["-H", "3", "--d-model", "8"], "--d-model 8 is not divisible by --heads 3"),
        ],
    )
    def test_bad_options(self, args: list[str], message: str) -> None:
        """Bad options are exit 2 with one line."""
        result = run_attnx("bench", *args)
        assert result.code == 2 and result.stdout == ""
        assert message in result.stderr and result.stderr.count("\n") == 1
