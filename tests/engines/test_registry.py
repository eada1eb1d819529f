"""load_engine: one class per engine behind the Engine protocol, its framework imported only when it is loaded."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.engines import ENGINES, EngineStatus, engine_status, load_arrays, load_engine, resolve_dtype
from attnx.engines.arrays import arrays_of
from attnx.engines.core import Engine
from attnx.engines.numpy_engine import NumpyEngine
from attnx.errors import EngineUnavailableError
from attnx.io import load_spec
from tests.engines.conftest import TORCH


class TestNumpyEngine:
    """The NumPy engine as the registry gives it."""

    def test_what_it_offers(self) -> None:
        """numpy: the CPU only, float64 then float32, NumPy's version."""
        engine = load_engine("numpy")
        assert isinstance(engine, NumpyEngine) and engine.name == "numpy"
        assert (engine.devices(), engine.dtypes("cpu")) == (["cpu"], ("float64", "float32"))
        assert engine.version() == np.__version__
        assert engine.resolve_device("auto") == "cpu"

    def test_attend_is_the_engine_step(self) -> None:
        """attend gives the worked example's result on the CPU, named by the engine, in the dtype asked for."""
        result = load_engine("numpy").attend(load_spec(), "float32", "cpu", {"output"})
        assert (result.engine, result.device, result.dtype, result.output.dtype) == (
            "numpy",
            "cpu",
            "float32",
            np.float32,
        )
        assert result.weights is None


class TestRegistry:
    """Names, unknown names and missing libraries."""

    def test_every_engine_is_registered_by_its_name(self) -> None:
        """ENGINES holds numpy then torch, each under the name its engine reports."""
        assert list(ENGINES) == ["numpy", "torch"]
        if TORCH:
            assert [load_engine(name).name for name in ENGINES] == ["numpy", "torch"]

    def test_unknown_engine(self) -> None:
        """A name that is not registered is a domain error listing those that are."""
        with pytest.raises(EngineUnavailableError) as info:
            load_engine("jax")
        assert str(info.value) == "unknown engine 'jax'; available: numpy, torch"

    def test_missing_torch_is_the_install_hint(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without torch, loading its engine says how to install it, and engine_status carries the same line."""
        monkeypatch.setitem(sys.modules, "torch", None)  # importing torch now fails, as when it is not installed
        monkeypatch.delitem(sys.modules, "attnx.engines.torch_engine", raising=False)
        hint = 'the torch engine needs torch, which is not installed: python -m pip install -e ".[torch]"'
        with pytest.raises(EngineUnavailableError) as info:
            load_engine("torch")
        assert str(info.value) == hint
        assert engine_status("torch") == EngineStatus("torch", problem=hint)
        with pytest.raises(EngineUnavailableError, match="needs torch"):
            resolve_dtype("torch")

    def test_numpy_runs_never_import_torch(self) -> None:
        """A fresh process that loads the NumPy engine and computes with it never imports torch."""
        code = (
            "import sys; from attnx.engines import compute, load_engine; from attnx.io import load_spec; "
            "load_engine('numpy'); compute(load_spec()); print('torch' in sys.modules, 'numpy' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["False", "True"]


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
class TestTorchEngine:
    """The torch engine as the registry gives it."""

    def test_what_it_offers_on_the_cpu(self) -> None:
        """torch: the CPU last among its devices, float64, float32 and the half types there, torch's version."""
        import torch

        engine = load_engine("torch")
        assert engine.name == "torch" and engine.devices()[-1] == "cpu"
        assert engine.dtypes("cpu") == ("float64", "float32", "bfloat16", "float16")
        assert engine.version() == str(torch.__version__)
        assert engine.resolve_device("cpu") == "cpu"

    def test_sdpa_reference_is_bare_sdpa(self) -> None:
        """sdpa_reference runs SDPA on the spec's Q, K and V: its output is attnx's head outputs, [1, H, N, d_k]."""
        spec = load_spec()
        run = load_engine("torch").sdpa_reference(spec, "float64")
        out = run()
        expected = load_engine("numpy").attend(spec, "float64", "cpu", {"head_outputs"}).head_outputs
        assert expected is not None  # asked for
        np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-12, atol=1e-12)


class TestOneClassPerFramework:
    """Each engine is one class: what ``compute`` asks, the algorithm's primitives and the forward pass's."""

    def test_every_engine_offers_the_whole_protocol(self) -> None:
        """Each engine's class has every member of the one Engine protocol."""
        wanted = {name for name in vars(Engine) if not name.startswith("_")}
        assert {"attend", "attend_heads", "array", "like", "host", "tanh", "stacks", "on"} <= wanted
        for name in ENGINES if TORCH else ["numpy"]:
            assert wanted - set(dir(load_engine(name))) == set(), name

    def test_on_is_one_object_per_dtype_and_device(self) -> None:
        """``on`` gives one object per dtype (and device): the one an array of that dtype finds (``arrays_of``)."""
        numpy_engine = load_engine("numpy")
        assert (
            numpy_engine.on("float32", "cpu") is arrays_of(np.zeros(1, np.float32)) is load_arrays("numpy", "float32")
        )
        if TORCH:
            engine = load_engine("torch").on("float32", "cpu")
            assert engine is arrays_of(engine.like(np.zeros(1))) is load_arrays("torch", "float32", "cpu")


class TestNoBranchOnAnEngine:
    """What an engine does differently is asked of its class: nothing else tells engines apart by name."""

    ENGINE_MODULES = ("attnx/engines/numpy_engine.py", "attnx/engines/torch_engine.py")

    def test_no_comparison_with_an_engine_name(self) -> None:
        """No ``==``, ``!=``, ``in`` or ``match`` of an engine's name (``numpy``, ``torch``) outside its class's module."""
        root = Path(attnx.__file__).parent
        found = []
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(root.parent).as_posix()
            if where in self.ENGINE_MODULES:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                elif isinstance(node, ast.MatchValue):
                    sides = [node.value]
                else:
                    continue
                names = {n.value for side in sides for n in ast.walk(side) if isinstance(n, ast.Constant)}
                if names & set(ENGINES):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        assert found == []
