"""Start-up imports: help and version import nothing heavy; a run imports only what its engine and input need."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# One fresh interpreter runs `attnx ARGS` for each ARGS in turn and prints, after each, the heavy
# modules imported so far (modules stay imported, so the first ARGS that imports one is the culprit).
PROBE = (
    "import json, sys\n"
    "from attnx.cli import main\n"
    "for args in {runs!r}:\n"
    "    sys.argv = ['attnx', *args]\n"
    "    try:\n"
    "        main()\n"
    "    except SystemExit:\n"
    "        pass\n"
    "    sys.stderr.write(json.dumps([m for m in {modules!r} if m in sys.modules]) + '\\n')\n"
)


HEAVY = ("torch", "numpy", "safetensors", "tokenizers")
HELP_AND_VERSION = (
    ["--help"], ["--version"], ["run", "--help"], ["trace", "--help"], ["check", "--help"], ["diff", "--help"],
    ["heads", "--help"], ["model", "--help"],
)  # fmt: skip


def heavy_modules_in_turn(*runs: list[str]) -> list[set[str]]:
    """For each run of one fresh process running `attnx ARGS` after `attnx ARGS`, the heavy modules imported by then."""
    code = PROBE.format(runs=[list(args) for args in runs], modules=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    seen = [set(json.loads(line)) for line in proc.stderr.splitlines() if line.startswith("[")]
    assert len(seen) == len(runs), proc.stderr
    return seen


def heavy_modules(*args: str) -> set[str]:
    """Which of torch, numpy, safetensors and tokenizers a fresh `attnx ARGS` process imported."""
    return heavy_modules_in_turn(list(args))[0]


class TestLazyImports:
    def test_help_and_version_import_nothing_heavy(self) -> None:
        """Help and version pay for neither torch, NumPy, safetensors nor tokenizers (all run in one fresh process)."""
        seen = heavy_modules_in_turn(*HELP_AND_VERSION)
        assert {" ".join(args): modules for args, modules in zip(HELP_AND_VERSION, seen, strict=True)} == {
            " ".join(args): set() for args in HELP_AND_VERSION
        }

    def test_the_probe_sees_a_later_import(self) -> None:
        """In one process, help then a NumPy run: the probe reports NumPy after the run, not before (so it can fail)."""
        assert heavy_modules_in_turn(["--help"], ["run", "--format", "json"]) == [set(), {"numpy"}]

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
