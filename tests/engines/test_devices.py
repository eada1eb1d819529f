"""Devices: how auto resolves, each device's dtypes, and CUDA and MPS where the hardware exists."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.engines import compute, load_engine
from attnx.errors import EngineUnavailableError
from attnx.io import load_spec
from tests.conftest import DECIMALS_4, OUTPUT

torch = pytest.importorskip("torch")
torch_engine = load_engine("torch")

CUDA = torch.cuda.is_available()
MPS = torch.backends.mps.is_available()


class TestDeviceResolution:
    def test_auto_prefers_cuda_then_mps_then_cpu(self) -> None:
        """auto resolves to the first present device in the order cuda, mps, cpu."""
        expected = "cuda" if CUDA else "mps" if MPS else "cpu"
        assert torch_engine.resolve_device("auto") == expected
        assert torch_engine.devices()[-1] == "cpu"

    @pytest.mark.skipif(CUDA, reason="CUDA is present on this machine")
    def test_absent_cuda_lists_available_devices(self) -> None:
        """Asking for an absent device names the devices there are."""
        with pytest.raises(EngineUnavailableError, match=r"device 'cuda' is not available to torch here; available: "):
            compute(load_spec(), "torch", device="cuda")

    def test_mps_has_no_float64(self) -> None:
        """MPS offers float32 (its default) and float16, no float64."""
        assert torch_engine.dtypes("mps") == ("float32", "float16")
        assert torch_engine.dtypes("cpu")[0] == "float64"


@pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine")
class TestCuda:
    @pytest.mark.parametrize("dtype", ["float64", "float32"])
    def test_worked_example_on_cuda(self, dtype: str) -> None:
        """The worked example on CUDA matches the tutorial and the CPU result."""
        result = compute(load_spec(), "torch", device="cuda", dtype=dtype)
        assert result.device.startswith("cuda")
        np.testing.assert_allclose(result.output, OUTPUT, atol=DECIMALS_4, rtol=0)
        cpu = compute(load_spec(), "numpy", dtype="float64")
        np.testing.assert_allclose(result.weights, cpu.weights, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not MPS, reason="no MPS device on this machine")
class TestMps:
    def test_worked_example_on_mps(self) -> None:
        """The worked example on MPS runs in float32 by default and matches the tutorial."""
        result = compute(load_spec(), "torch", device="mps")
        assert result.dtype == "float32"
        np.testing.assert_allclose(result.output, OUTPUT, atol=DECIMALS_4, rtol=0)

    def test_float64_on_mps_is_refused(self) -> None:
        """float64 on MPS is a clear error."""
        with pytest.raises(EngineUnavailableError, match="does not support float64"):
            compute(load_spec(), "torch", device="mps", dtype="float64")
