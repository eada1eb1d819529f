"""Tests for attnx.cli.main: the console entry point turns click's usage errors into one line."""

from __future__ import annotations

import subprocess
import sys

import pytest


def attnx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnx", *args], capture_output=True, text=True, timeout=60)


class TestUsageErrors:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["run", "--nope"], "No such option: --nope"),
            (["run", "--heads", "x"], "'x' is not a valid int range"),
            (["run", "--format", "xml"], "'xml' is not one of"),
            (["bench", "--format", "csv"], "'csv' is not one of 'table', 'json'"),
            (["diff", "--format", "npy"], "'npy' is not one of 'table', 'json'"),
            (["heads", "--format", "jsonl"], "'jsonl' is not one of 'table', 'json'"),
            (["nocommand"], "No such command 'nocommand'"),
        ],
    )
    def test_one_line_and_exit_2(self, args: list[str], message: str) -> None:
        """A click usage error is one line on stderr naming the problem and where help is, exit 2."""
        done = attnx(*args)
        assert done.returncode == 2
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("attnx: error: ") and message in lines[0]
        assert lines[0].endswith(f"(see 'attnx {args[0]} -h')") or args == ["nocommand"]

    def test_bare_attnx_prints_help(self) -> None:
        """`attnx` alone prints the help on stdout and exits 2, as click does."""
        done = attnx()
        assert done.returncode == 2
        assert "Usage: attnx [OPTIONS] COMMAND" in done.stdout and "bench" in done.stdout
        assert done.stderr == ""

    def test_success_and_version_exit_0(self) -> None:
        """Commands that succeed, and --version, still exit 0."""
        assert attnx("--version").stdout.strip().startswith("attnx ")
        done = attnx("run", "--format", "json")
        assert done.returncode == 0 and done.stdout.startswith('{"format_version"')

    def test_attnx_errors_keep_their_code(self) -> None:
        """attnx's own errors come through unchanged: a missing file is exit 2 with one line."""
        done = attnx("run", "no-such-file.yaml")
        assert done.returncode == 2
        assert done.stderr == "attnx: error: no-such-file.yaml: no such file\n"
