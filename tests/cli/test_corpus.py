"""The corpus of malformed inputs (tests/corpus): `attnx run FILE` exits 2 with one line and writes nothing.

Every case runs in-process (tests/runner.py, as the console script runs); a handful also run as a real
`python -m attnx` process, so that the path through a fresh interpreter stays covered too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner import Outcome, run_attnx

CORPUS = Path(__file__).parents[1] / "corpus"
EXPECTED: dict[str, str] = json.loads((CORPUS / "expected.json").read_text("utf-8"))
# What the issue asks the corpus to hold, at least.
REQUIRED = (
    "yaml-alias-bomb.yaml",
    "yaml-nested-50000-flow.yaml",
    "npy-claims-100000x100000-in-144-bytes.npy",
    "npy-pickled.npy",
    "cell-nan.yaml",
    "cell-inf.yaml",
    "cell-bool-yes.yaml",
    "cell-string.yaml",
    "shape-ragged-rows.yaml",
    "shape-empty-matrix.yaml",
    "shape-width-mismatch.yaml",
    "yaml-unknown-key.yaml",
    "yaml-duplicate-key.yaml",
    "not-utf8-latin1.yaml",
    "empty.yaml",
    "directory.yaml",
)
NESTED_50000 = ("yaml-nested-50000-flow.yaml", "yaml-nested-50000-block.yaml", "yaml-nested-50000-mappings.yaml")
DEPTH_CAP = "level 33 of nesting exceeds the depth cap of 32 levels"
# Piped to `attnx run -`: the same answers, located in <stdin>.
STDIN_CASES = (
    "yaml-alias-bomb.yaml",
    "json-nested-50000-objects.json",
    "npz-member-claims-100000x100000-in-144-bytes.npz",
    "npy-pickled.npy",
    "not-utf8-latin1.yaml",
    "cell-nan.yaml",
)


def real_attnx(*args: str, cwd: Path, stdin: bytes = b"", **env: str) -> Outcome:
    """A fresh `python -m attnx ARGS` process (no ATTNX_* from outside, ``env`` added), as an Outcome."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ATTNX_")}
    proc = subprocess.run(
        [sys.executable, "-m", "attnx", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env={**clean, **env},
        timeout=60,
        check=False,
    )
    return Outcome(
        proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), proc.stdout
    )


def assert_one_line_exit_2(outcome: Outcome, fragment: str, start: str = "attnx: error: ") -> None:
    """Exit 2, nothing on stdout, and exactly one stderr line that begins with ``start`` and holds ``fragment``."""
    assert outcome.code == 2, outcome.stderr
    assert outcome.stdout_bytes == b""
    err = outcome.stderr
    assert err.startswith(start) and err.endswith("\n") and err.count("\n") == 1, err
    assert fragment in err, err


class TestCorpusFiles:
    """The corpus on disk matches its manifest and holds the cases the issue names."""

    def test_manifest_lists_every_file(self) -> None:
        """expected.json names every file of the corpus, at least 100 of them, the required ones included."""
        files = {path.name for path in CORPUS.iterdir()} - {"make_corpus.py", "expected.json", "__pycache__"}
        assert files == set(EXPECTED)
        assert len(files) >= 100
        assert set(REQUIRED) <= files

    def test_the_npy_claim_is_144_bytes(self) -> None:
        """The .npy that claims 100000 × 100000 float64 (74.5 GiB) really is 144 bytes."""
        assert (CORPUS / "npy-claims-100000x100000-in-144-bytes.npy").stat().st_size == 144


class TestCorpusRuns:
    """Each malformed input, run in-process as a user would: one line on stderr, exit 2, nothing written or executed."""

    @pytest.mark.parametrize("name", sorted(EXPECTED))
    def test_run(self, name: str, tmp_path: Path) -> None:
        """`attnx run FILE` exits 2 with one line naming the problem; the working folder stays empty."""
        assert_one_line_exit_2(run_attnx("run", str(CORPUS / name), cwd=tmp_path), EXPECTED[name])
        assert list(tmp_path.iterdir()) == []  # no output file, and no PICKLE-RAN or PYTHON-RAN

    @pytest.mark.parametrize("name", NESTED_50000)
    def test_nesting_with_the_yaml_cap_raised(self, name: str, tmp_path: Path) -> None:
        """With --max-yaml-bytes 1M the 50,000-level YAML files are parsed, and the depth cap stops them at level 33."""
        outcome = run_attnx("run", str(CORPUS / name), "--max-yaml-bytes", "1M", cwd=tmp_path)
        assert_one_line_exit_2(outcome, DEPTH_CAP)

    @pytest.mark.parametrize("name", STDIN_CASES)
    def test_stdin(self, name: str, tmp_path: Path) -> None:
        """The same files piped to `attnx run -` give the same answers, located in <stdin>."""
        outcome = run_attnx("run", "-", stdin=(CORPUS / name).read_bytes(), cwd=tmp_path)
        assert_one_line_exit_2(outcome, EXPECTED[name], start="attnx: error: <stdin>")
        assert list(tmp_path.iterdir()) == []


class TestRealProcess:
    """A handful of cases through a fresh `python -m attnx`: the interpreter, real pipes and real start-up."""

    @pytest.mark.parametrize(
        "name", ["yaml-alias-bomb.yaml", "npy-claims-100000x100000-in-144-bytes.npy", "npy-pickled.npy"]
    )
    def test_run(self, name: str, tmp_path: Path) -> None:
        """`python -m attnx run FILE` exits 2 with the corpus's one line; nothing is written or executed."""
        assert_one_line_exit_2(real_attnx("run", str(CORPUS / name), cwd=tmp_path), EXPECTED[name])
        assert list(tmp_path.iterdir()) == []

    def test_nesting_50000_with_the_yaml_cap_raised(self, tmp_path: Path) -> None:
        """50,000 levels of flow YAML, parsed under a raised byte cap, stop at level 33 without crashing the process."""
        outcome = real_attnx("run", str(CORPUS / NESTED_50000[0]), "--max-yaml-bytes", "1M", cwd=tmp_path)
        assert_one_line_exit_2(outcome, DEPTH_CAP)

    @pytest.mark.parametrize("name", ["npz-member-claims-100000x100000-in-144-bytes.npz", "not-utf8-latin1.yaml"])
    def test_stdin(self, name: str, tmp_path: Path) -> None:
        """Bytes piped into a real process's stdin give the corpus's answer, located in <stdin>."""
        outcome = real_attnx("run", "-", cwd=tmp_path, stdin=(CORPUS / name).read_bytes())
        assert_one_line_exit_2(outcome, EXPECTED[name], start="attnx: error: <stdin>")

    def test_endless_stdin_stops_at_the_cap(self, tmp_path: Path) -> None:
        """8 MiB piped in under ATTNX_MAX_BYTES=1M is refused after reading 1 MiB."""
        outcome = real_attnx("run", "-", cwd=tmp_path, stdin=b" " * (8 << 20), ATTNX_MAX_BYTES="1M")
        assert_one_line_exit_2(outcome, "<stdin>: a stream longer than 1 MiB exceeds the input size cap of 1 MiB")


class TestInProcessMatchesTheProcess:
    """The in-process runner reports what the real process does."""

    def test_same_outcome(self, tmp_path: Path) -> None:
        """Exit code, stdout and stderr of a corpus case are the same in-process and in a fresh process."""
        args = ("run", str(CORPUS / "cell-nan.yaml"))
        inside, real = run_attnx(*args, cwd=tmp_path), real_attnx(*args, cwd=tmp_path)
        assert (inside.code, inside.stdout, inside.stderr) == (real.code, real.stdout, real.stderr)
        assert inside.code == 2 and "q[1][1]: expected a finite number, got nan" in inside.stderr
