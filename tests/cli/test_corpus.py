"""The corpus of malformed inputs (tests/corpus): `attnx run FILE` exits 2 with one line, in under 2 seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
SECONDS = 2.0


def attnx(*args: str, cwd: Path, stdin: bytes | None = None, **env: str) -> tuple[int, str, str, float]:
    """Exit code, stdout, stderr and wall time of a fresh `python -m attnx ARGS` (no ATTNX_* from outside)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ATTNX_")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "attnx", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        cwd=cwd,
        env={**clean, **env},
        timeout=30,
        check=False,
    )
    seconds = time.perf_counter() - start
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), seconds


def assert_one_line_exit_2(result: tuple[int, str, str, float], fragment: str) -> None:
    code, out, err, seconds = result
    assert code == 2, err
    assert out == ""
    assert err.startswith("attnx: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert fragment in err
    assert seconds < SECONDS, f"{seconds:.2f} s"


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
    """Each malformed input, run as a user would: one line on stderr, exit 2, nothing written or executed."""

    @pytest.mark.parametrize("name", sorted(EXPECTED))
    def test_run(self, name: str, tmp_path: Path) -> None:
        """`attnx run FILE` exits 2 within 2 s with one line naming the problem; the working folder stays empty."""
        assert_one_line_exit_2(attnx("run", str(CORPUS / name), cwd=tmp_path), EXPECTED[name])
        assert list(tmp_path.iterdir()) == []  # no output file, and no PICKLE-RAN or PYTHON-RAN

    @pytest.mark.parametrize(
        "name", ["yaml-nested-50000-flow.yaml", "yaml-nested-50000-block.yaml", "yaml-nested-50000-mappings.yaml"]
    )
    def test_nesting_with_the_yaml_cap_raised(self, name: str, tmp_path: Path) -> None:
        """With --max-yaml-bytes 1M the 50,000-level YAML files are parsed, and the depth cap stops them at level 33."""
        result = attnx("run", str(CORPUS / name), "--max-yaml-bytes", "1M", cwd=tmp_path)
        assert_one_line_exit_2(result, "level 33 of nesting exceeds the depth cap of 32 levels")

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("yaml-alias-bomb.yaml", "<stdin>:2:10: YAML aliases (*name) are not accepted"),
            ("json-nested-50000-objects.json", "<stdin>:1:193: level 33 of nesting exceeds the depth cap of 32 levels"),
            ("npz-member-claims-100000x100000-in-144-bytes.npz", "<stdin>: q: the header claims a 100000 × 100000"),
            ("npy-pickled.npy", "<stdin>: a .npy file holds one array"),
            ("not-utf8-latin1.yaml", "<stdin>: not UTF-8 text (byte 0xe9 at offset 12)"),
            ("cell-nan.yaml", "<stdin>:1:23: q[1][1]: expected a finite number, got nan"),
        ],
    )
    def test_stdin(self, name: str, expected: str, tmp_path: Path) -> None:
        """The same files piped to `attnx run -` give the same answers, located in <stdin>."""
        result = attnx("run", "-", cwd=tmp_path, stdin=(CORPUS / name).read_bytes())
        assert_one_line_exit_2(result, f"attnx: error: {expected}")
        assert list(tmp_path.iterdir()) == []

    def test_endless_stdin_stops_at_the_cap(self, tmp_path: Path) -> None:
        """8 MiB piped in under ATTNX_MAX_BYTES=1M is refused after reading 1 MiB."""
        result = attnx("run", "-", cwd=tmp_path, stdin=b" " * (8 << 20), ATTNX_MAX_BYTES="1M")
        assert_one_line_exit_2(result, "<stdin>: a stream longer than 1 MiB exceeds the input size cap of 1 MiB")
