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
    "sys.stderr.write(' '.join(m for m in ('torch', 'numpy') if m in sys.modules))\n"
)


def heavy_modules(*args: str) -> set[str]:
    """Which of torch and numpy a fresh `attnx ARGS` process imported."""
    code = PROBE.format(args=list(args))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    return set(proc.stderr.split())


class TestLazyImports:
    @pytest.mark.parametrize(
        "args",
        [["--help"], ["--version"], ["run", "--help"], ["check", "--help"], ["diff", "--help"], ["heads", "--help"]],
    )
    def test_help_and_version_import_neither_torch_nor_numpy(self, args: list[str]) -> None:
        """Help and version pay for neither torch nor NumPy."""
        assert heavy_modules(*args) == set()

    def test_numpy_engine_never_imports_torch(self) -> None:
        """A NumPy-engine run imports NumPy but not torch."""
        assert heavy_modules("run", "--format", "json") == {"numpy"}

    def test_torch_engine_imports_torch(self) -> None:
        """The probe can see torch when the torch engine runs (so the tests above can fail)."""
        pytest.importorskip("torch")
        assert "torch" in heavy_modules("run", "--engine", "torch", "--format", "json")
