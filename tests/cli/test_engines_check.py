"""attnx engines, --engine torch and attnx check against every engine, device and dtype."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from attnx.render.serialize import FORMAT_VERSION
from tests.runner import run_attnx

TORCH_BLOCKED = (
    "import sys; sys.modules['torch'] = None; from attnx.cli import main; sys.argv = ['attnx', *{args!r}]; main()"
)


def run_without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    """Run attnx in a fresh interpreter where `import torch` fails, as on a machine without it."""
    code = TORCH_BLOCKED.format(args=list(args))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


class TestEngines:
    def test_json_lists_both_engines(self) -> None:
        """`attnx engines --format json` lists numpy and torch with versions, devices and dtypes."""
        pytest.importorskip("torch")
        result = run_attnx("engines", "--format", "json")
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["format_version"] == FORMAT_VERSION
        by_name = {e["name"]: e for e in data["engines"]}
        assert by_name["numpy"]["devices"] == [{"name": "cpu", "dtypes": ["float64", "float32"]}]
        assert by_name["torch"]["available"] and by_name["torch"]["version"].startswith("2.")
        assert {"name": "cpu", "dtypes": ["float64", "float32", "bfloat16", "float16"]} in by_name["torch"]["devices"]

    def test_table(self) -> None:
        """The table names each engine and its CPU dtypes."""
        result = run_attnx("engines")
        assert result.code == 0, result.stderr
        assert "numpy" in result.stdout and "float64, float32" in result.stdout

    def test_without_torch(self) -> None:
        """Without torch, the torch row says how to install it, and the command still succeeds."""
        proc = run_without_torch("engines", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        torch_row = next(e for e in json.loads(proc.stdout)["engines"] if e["name"] == "torch")
        assert not torch_row["available"]
        assert 'python -m pip install -e ".[torch]"' in torch_row["problem"]


class TestTorchEngineOption:
    def test_torch_engine_matches_numpy(self) -> None:
        """--engine torch prints the same JSON numbers as the NumPy engine, to float64 rounding."""
        pytest.importorskip("torch")
        a = json.loads(run_attnx("run", "-f", "json").stdout)
        b = json.loads(run_attnx("run", "-f", "json", "--engine", "torch").stdout)
        assert b["engine"] == "torch" and b["device"] == "cpu"
        assert set(a) == set(b)
        np.testing.assert_allclose(b["weights"], a["weights"], rtol=0, atol=1e-15)

    @pytest.mark.parametrize(("dtype", "bound"), [("bfloat16", 2**-7), ("float16", 2**-10)])
    def test_half_types(self, dtype: str, bound: float) -> None:
        """--dtype bfloat16/float16 computes on torch at that precision (within its epsilon of float64 on the worked
        example's weights, and not equal to them); the NumPy engine refuses it, exit 2, naming what it supports."""
        pytest.importorskip("torch")
        exact = json.loads(run_attnx("run", "-f", "json").stdout)
        half = json.loads(run_attnx("run", "-f", "json", "-e", "torch", "--dtype", dtype).stdout)
        assert half["dtype"] == dtype
        error = np.abs(np.array(half["weights"]) - np.array(exact["weights"])).max()
        assert 0 < error <= bound
        refused = run_attnx("run", "--dtype", dtype)
        assert refused.code == 2 and refused.stdout == ""
        assert refused.stderr == f"attnx: error: numpy on cpu does not support {dtype}; supported: float64, float32\n"

    def test_without_torch_is_exit_2_with_install_hint(self) -> None:
        """--engine torch without torch installed exits 2 with one line on how to install it."""
        proc = run_without_torch("run", "--engine", "torch")
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert proc.stderr == (
            'attnx: error: the torch engine needs torch, which is not installed: python -m pip install -e ".[torch]"\n'
        )

    def test_unavailable_device_lists_available(self) -> None:
        """An absent device exits 2 and lists the devices there are."""
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("CUDA is present on this machine")
        result = run_attnx("run", "--engine", "torch", "--device", "cuda")
        assert result.code == 2
        assert "device 'cuda' is not available to torch here; available: cpu" in result.stderr

    def test_numpy_engine_refuses_gpu(self) -> None:
        """The NumPy engine on a GPU device is exit 2 with a hint."""
        result = run_attnx("run", "--device", "mps")
        assert result.code == 2
        assert "the numpy engine runs on the CPU only, not 'mps'; use --engine torch" in result.stderr


class TestCheck:
    def test_all_rows_pass_on_worked_example(self) -> None:
        """check compares every engine/device/dtype and exits 0 when all rows pass."""
        pytest.importorskip("torch")
        result = run_attnx("check", "--format", "json")
        assert result.code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["passed"] and data["reference"] == {"engine": "numpy", "device": "cpu", "dtype": "float64"}
        targets = {(r["engine"], r["device"], r["dtype"]) for r in data["rows"]}
        assert {("numpy", "cpu", "float32"), ("torch", "cpu", "float64"), ("torch", "cpu", "float32")} <= targets
        assert not {dtype for _, _, dtype in targets} & {"bfloat16", "float16"}  # half types are not held to it
        assert {r["tensor"] for r in data["rows"]} == {"scores", "weights", "head_outputs", "output"}
        f32 = next(r for r in data["rows"] if r["dtype"] == "float32" and r["tensor"] == "scores")
        assert f32["rtol"] == 1.3e-6 and f32["atol"] == pytest.approx(2e-5)  # max |score| is 2

    def test_zero_tolerance_fails_with_exit_1(self) -> None:
        """With --rtol 0 --atol 0, float32 rows differ and the exit code is 1; the reference still passes."""
        args = ["check", "--seed", "1", "--tokens", "a b c d e f", "--d-model", "8", "-H", "2"]
        result = run_attnx(*args, "--rtol", "0", "--atol", "0", "--format", "json")
        assert result.code == 1
        data = json.loads(result.stdout)
        failed = {(r["engine"], r["dtype"], r["tensor"]) for r in data["rows"] if not r["passed"]}
        assert ("numpy", "float32", "weights") in failed
        assert not any(engine == "numpy" and dtype == "float64" for engine, dtype, _ in failed)
        assert all(r["max_abs"] > 0 for r in data["rows"] if not r["passed"])

    def test_table_verdict_line(self) -> None:
        """The table ends with a verdict line."""
        result = run_attnx("check")
        assert result.code == 0, result.stderr
        assert result.stdout.rstrip().splitlines()[-1].startswith("all ") and "within tolerance" in result.stdout

    def test_without_torch_checks_numpy_and_says_what_was_skipped(self) -> None:
        """Without torch, check runs NumPy's rows and names the skipped engine."""
        proc = run_without_torch("check", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert {r["engine"] for r in data["rows"]} == {"numpy"}
        assert data["unavailable"][0]["engine"] == "torch"
