"""Tests for attnx.cli.main: the console entry point turns click's usage errors into one line."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from attnx.cli import main


@dataclass(frozen=True)
class Done:
    """What one call of the entry point left: its exit code and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def attnx(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Call the console script's entry point in this process, as `attnx ARGS` would."""

    def call(*args: str) -> Done:
        monkeypatch.setattr(sys, "argv", ["attnx", *args])
        with pytest.raises(SystemExit) as info:
            main()
        out, err = capsys.readouterr()
        return Done(info.value.code if isinstance(info.value.code, int) else 0, out, err)

    return call


class TestUsageErrors:
    """Click's usage errors: one line naming the problem and where help is, exit 2."""

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["run", "--nope"], "No such option: --nope"),
            (["run", "--heads", "x"], "Input should be a valid integer"),
            (["run", "--format", "xml"], "'xml' is not one of"),
            (["engines", "--format", "npz"], "'npz' is not one of 'table', 'json', 'jsonl', 'csv'"),
            (["check", "--format", "npy"], "'npy' is not one of 'table', 'json', 'jsonl', 'csv'"),
            (["bench", "--format", "csv"], "'csv' is not one of 'table', 'json'"),
            (["bench", "--dtype", "float8"], "'float8' is not one of 'float64', 'float32', 'bfloat16', 'float16'"),
            (["diff", "--format", "npy"], "'npy' is not one of 'table', 'json'"),
            (["heads", "--format", "jsonl"], "'jsonl' is not one of 'table', 'json'"),
            (["nocommand"], "No such command 'nocommand'"),
        ],
    )
    def test_one_line_and_exit_2(self, attnx, args: list[str], message: str) -> None:
        """A click usage error is one line on stderr naming the problem and where help is, exit 2."""
        done = attnx(*args)
        assert done.returncode == 2
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("attnx: error: ") and message in lines[0]
        assert lines[0].endswith(f"(see 'attnx {args[0]} -h')") or args == ["nocommand"]

    def test_bare_attnx_prints_help(self) -> None:
        """`attnx` alone, a real process, prints the help with its examples on stdout and exits 2, as click does."""
        done = subprocess.run([sys.executable, "-m", "attnx"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert "Usage: attnx [OPTIONS] COMMAND" in done.stdout and "bench" in done.stdout
        assert "attnx heads configs/attention-patterns.yaml" in done.stdout
        assert done.stderr == ""


class TestExitCodes:
    """What is not a usage error keeps its own exit code."""

    def test_success_and_version_exit_0(self, attnx) -> None:
        """Commands that succeed, and --version, exit 0."""
        version = attnx("--version")
        assert version.returncode == 0 and version.stdout.startswith("attnx ")
        done = attnx("run", "--format", "json")
        assert done.returncode == 0 and done.stdout.startswith('{"format_version"')

    def test_help_exits_0(self, attnx) -> None:
        """`attnx engines --help` prints the help, its formats and examples, and exits 0."""
        done = attnx("engines", "--help")
        assert done.returncode == 0 and done.stderr == ""
        assert "table, json, jsonl, csv." in done.stdout and "attnx engines --format json" in done.stdout

    def test_attnx_errors_keep_their_code(self, attnx) -> None:
        """attnx's own errors come through unchanged: a missing file is exit 2 with one line."""
        done = attnx("run", "no-such-file.yaml")
        assert done.returncode == 2
        assert done.stderr == "attnx: error: no-such-file.yaml: no such file\n"
