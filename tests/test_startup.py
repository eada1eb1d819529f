from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = (
    "import sys\n"
    "from attnx.cli import main\n"
    "sys.argv = ['attnx', *{args!r}]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "sys.stderr.write(' '.join(m for m in {modules!r} if m in sys.modules))\n"
)


HEAVY = ("torch", "numpy", "safetensors", "tokenizers")


def heavy_modules(*args: str) -> set[str]:
    """Which of torch, numpy, safetensors and tokenizers a fresh `attnx ARGS` process imported."""
    code = PROBE.format(args=list(args), modules=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    return set(proc.stderr.split())


class TestLazyImports:
    @pytest.mark.parametrize(
        "args",
        [
            ["--help"], ["--version"], ["run", "--help"], ["trace", "--help"], ["check", "--help"], ["diff", "--help"],
            ["heads", "--help"], ["model", "--help"],
        ],
    )  # fmt: skip
    def test_help_and_version_import_nothing_heavy(self, args: list[str]) -> None:
        """Help and version pay for neither torch, NumPy, safetensors nor tokenizers."""
        assert heavy_modules(*args) == set()

    def test_numpy_engine_never_imports_torch(self) -> None:
        """A NumPy-engine run imports NumPy but not torch, nor the model libraries."""
        assert heavy_modules("run", "--format", "json") == {"numpy"}

    def test_models_run_without_torch(self, bert) -> None:
        """A model's forward pass on the NumPy engine reads the checkpoint with safetensors and tokenizers, never torch."""
        args = ("run", "--model", str(bert.path), "--text", "the cat", "--layer", "2", "--format", "json")
        assert heavy_modules(*args) == {"numpy", "safetensors", "tokenizers"}

    def test_torch_engine_imports_torch(self) -> None:
        """The probe can see torch when the torch engine runs (so the tests above can fail)."""
        pytest.importorskip("torch")
        assert "torch" in heavy_modules("run", "--engine", "torch", "--format", "json")
