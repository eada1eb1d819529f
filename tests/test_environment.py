"""The environment object (attnx/environment.py), and the rule that the CLI reads streams only through it."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import TextIO

import pytest

from attnx.environment import ACTIVE, Environment, current, using
from tests.runner import run_attnx

ROOT = Path(__file__).resolve().parent.parent / "attnx"
# Process-level code that works on file descriptors and signals, not on one run's streams.
STREAM_READERS = {"environment.py", "console.py", "streams.py", "models/tokenize.py"}


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class TestEnvironment:
    """What an Environment holds and answers."""

    def test_left_out_streams_are_the_processs(self) -> None:
        """A stream left out is the ``sys`` one at creation; environ defaults to os.environ and debug to off."""
        out = io.StringIO()
        env = Environment(stdout=out)
        assert (env.stdin, env.stdout, env.stderr, env.debug) == (sys.stdin, out, sys.stderr, False)
        assert env.environ is os.environ

    def test_from_process_reads_attnx_debug(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """ATTNX_DEBUG (any non-empty value) turns debug on; unset or empty, off."""
        monkeypatch.setenv("ATTNX_DEBUG", "1")
        assert Environment.from_process().debug is True
        monkeypatch.setenv("ATTNX_DEBUG", "")
        assert Environment.from_process().debug is False
        monkeypatch.delenv("ATTNX_DEBUG")
        assert Environment.from_process().debug is False

    def test_terminals(self) -> None:
        """Each stream's isatty answers its flag; no stdin is no terminal."""
        env = Environment(stdin=None, stdout=Terminal(), stderr=io.StringIO())
        assert (env.stdin_isatty, env.stdout_isatty, env.stderr_isatty) == (False, True, False)
        assert Environment(stdin=Terminal()).stdin_isatty is True

    @pytest.mark.parametrize(
        ("environ", "no_color", "colour"),
        [
            ({}, False, True),
            ({}, True, False),
            ({"NO_COLOR": "1"}, False, False),
            ({"NO_COLOR": ""}, False, True),
            ({"TERM": "dumb"}, False, False),
            ({"TERM": "xterm-256color"}, False, True),
        ],
    )
    def test_colour(self, environ: dict[str, str], no_color: bool, colour: bool) -> None:
        """--no-color, NO_COLOR with a value, or TERM=dumb ask for plain text."""
        assert Environment(environ=environ).colour(no_color) is colour

    @pytest.mark.parametrize(
        ("value", "columns"), [(None, None), ("120", 120), (" 40 ", 40), ("0", None), ("abc", None), ("²", None)]
    )
    def test_columns(self, value: str | None, columns: int | None) -> None:
        """COLUMNS is a width when it is a positive whole number, None otherwise."""
        environ = {} if value is None else {"COLUMNS": value}
        assert Environment(environ=environ).columns == columns


class TestCurrent:
    """``current`` and ``using``: which environment is in force."""

    def test_none_installed_is_the_process_now(self) -> None:
        """With none installed, each call makes the process's, with sys.stdout as it is at that call."""
        saved, swapped = sys.stdout, io.StringIO()
        sys.stdout = swapped
        try:
            made = current()
        finally:
            sys.stdout = saved
        assert made.stdout is swapped
        assert current().stdout is saved

    def test_using_installs_and_restores(self) -> None:
        """Inside ``using`` the given one is in force, nested ones in turn; after it, none is installed."""
        outer, inner = Environment(debug=True), Environment(debug=False)
        with using(outer) as given:
            assert given is outer and current() is outer
            with using(inner):
                assert current() is inner
            assert current() is outer
        assert ACTIVE.get(None) is None

    def test_restored_after_an_error(self) -> None:
        """An exception leaving the block still uninstalls the environment."""
        with pytest.raises(RuntimeError), using(Environment()):
            raise RuntimeError
        assert ACTIVE.get(None) is None

    def test_another_thread_has_its_own(self) -> None:
        """A thread started inside ``using`` does not see it (a new thread starts with an empty context)."""
        seen: list[Environment | None] = []
        with using(Environment()):
            thread = threading.Thread(target=lambda: seen.append(ACTIVE.get(None)))
            thread.start()
            thread.join()
        assert seen == [None]


def piped(
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> Environment:
    """An environment of text streams that are no terminal (new ones where not given), with no variables but
    ``environ``."""
    return Environment(stdin or io.StringIO(), stdout or io.StringIO(), stderr or io.StringIO(), environ or {})


class TestMain:
    """``attnx.cli.main(argv, env=...)`` runs in the environment handed to it."""

    def test_output_and_errors_go_to_its_streams(self) -> None:
        """A run's JSON reaches the given stdout, a usage error the given stderr, with their exit codes."""
        from attnx.cli import main

        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(SystemExit) as done:
            main(["run", "-f", "json", "--tensor", "weights"], env=piped(stdout=out, stderr=err))
        assert done.value.code == 0 and '"weights"' in out.getvalue() and err.getvalue() == ""
        with pytest.raises(SystemExit) as refused:
            main(["run", "--heads", "0"], env=piped(stdout=out, stderr=err))
        assert refused.value.code == 2 and err.getvalue().startswith("attnx: error: ")
        assert ACTIVE.get(None) is None

    def test_debug_flag_sets_the_runs_environment(self) -> None:
        """--debug turns on debug in the environment handed to main, and nowhere else."""
        from attnx.cli import main

        env = piped()
        with pytest.raises(SystemExit):
            main(["--debug", "run", "-f", "json"], env=env)
        assert env.debug is True
        assert ACTIVE.get(None) is None

    def test_limits_come_from_its_environ(self) -> None:
        """ATTNX_MAX_* are read from the environment's variables, not the process's."""
        err = io.StringIO()
        from attnx.cli import main

        env = piped(stderr=err, environ={"ATTNX_MAX_ELEMENTS": "1"})
        with pytest.raises(SystemExit) as done:
            main(["run", "-f", "json"], env=env)
        assert done.value.code == 2 and "ATTNX_MAX_ELEMENTS" in err.getvalue()

    def test_stdin_is_its_stdin(self) -> None:
        """``-`` reads the environment's stdin."""
        from attnx.cli import main

        out = io.StringIO()
        stdin = io.TextIOWrapper(io.BytesIO(b"heads: 1\nq: [[1.0]]\nk: [[1.0]]\nv: [[4.0]]\n"))
        with pytest.raises(SystemExit) as done:
            main(["run", "-", "-f", "json"], env=piped(stdin=stdin, stdout=out))
        assert done.value.code == 0 and json.loads(out.getvalue())["output"] == [[4.0]]

    def test_runner_matches(self) -> None:
        """run_attnx, which hands main an environment of its own streams, sees the same bytes."""
        outcome = run_attnx("run", "-f", "json", "--tensor", "weights")
        assert outcome.code == 0 and '"weights"' in outcome.stdout


class TestStreamRule:
    """Only the environment module and the process-level modules touch the standard streams."""

    def test_no_module_reads_sys_streams(self) -> None:
        """No module under attnx/ but those in STREAM_READERS names sys.stdin, sys.stdout or sys.stderr."""
        readers = sorted(
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*.py")
            if re.search(r"\bsys\.std(in|out|err)\b", path.read_text(encoding="utf-8"))
        )
        assert set(readers) <= STREAM_READERS, readers

    def test_no_debug_global(self) -> None:
        """No module under attnx/ holds a module-level DEBUG: --debug lives on the environment."""
        holders = sorted(
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*.py")
            if re.search(r"^DEBUG\s*[:=]", path.read_text(encoding="utf-8"), re.MULTILINE)
        )
        assert holders == []
