"""Run `attnx ARGS` in this process exactly as the console script would, and keep what it printed.

``run_attnx`` is for tests that check what a user sees (exit code, stdout, stderr) without paying for a
fresh interpreter each time (about 0.3 s: Python, NumPy, Typer, Rich). It sets up what a process piped
to another program has, and puts everything back afterwards:

- ``attnx.cli.main(args, env=...)`` runs and its ``SystemExit`` is caught (an exception that escapes it is
  printed as the interpreter would, with exit status 1); ``sys.argv`` is ``["attnx", *args]`` meanwhile;
- the ``Environment`` handed to it (``attnx.environment``) has UTF-8 text streams over ``BytesIO`` objects
  for stdin, stdout and stderr, so that stdout's ``buffer`` takes binary formats (npy, npz) and stdin's
  reads bytes; none is a terminal, and ``os.get_terminal_size`` fails as it does on a pipe (Rich and Click
  then take their width from ``COLUMNS``, or 80). ``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` are
  swapped for the same streams as well: Typer's and Click's help and usage write to ``sys.stdout`` and
  ``sys.stderr`` themselves, which no environment reaches;
- ``os.environ`` is this process's environment without any ``ATTNX_*`` variable (nor those named in
  ``unset``), plus ``env``; Rich's consoles are built per call, so they read ``NO_COLOR``,
  ``FORCE_COLOR``, ``TERM`` and ``COLUMNS`` from it; Typer's help console reads ``FORCE_COLOR`` and
  ``TERMINAL_WIDTH`` when it is imported, so its two settings are set as a fresh process would set them;
- the working folder is ``cwd`` (when given);
- warnings are shown on stderr as a fresh interpreter shows them (pytest's ``filterwarnings = error``
  does not apply inside), and the environment's ``debug`` starts from ``ATTNX_DEBUG`` as at start-up.

What only a real process can show (signals, closed pipes, which modules start-up imports, an endless
stdin, the interpreter's own crash handling) is tested with subprocesses instead.
"""

from __future__ import annotations

import io
import os
import sys
import traceback
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.rich_utils

import attnx.cli
from attnx.environment import Environment

# The warning filters of an interpreter started without -W or -X dev (see the `warnings` documentation).
DEFAULT_FILTERS: tuple[tuple[str, type[Warning], str | None], ...] = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, None),
    ("ignore", PendingDeprecationWarning, None),
    ("ignore", ImportWarning, None),
    ("ignore", ResourceWarning, None),
)


@dataclass(frozen=True)
class Outcome:
    """What one `attnx` run did: its exit status and what it wrote on stdout (as text and bytes) and stderr."""

    code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes
    exception: BaseException | None = None  # an exception that escaped main(), if any (code is then 1)


def clean_environment(env: Mapping[str, str] | None = None, unset: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment without ATTNX_* variables nor those named in ``unset``, updated with ``env``."""
    dropped = set(unset)
    clean = {key: value for key, value in os.environ.items() if not key.startswith("ATTNX_") and key not in dropped}
    return {**clean, **(env or {})}


def _not_a_terminal(fd: int = 1) -> os.terminal_size:
    """``os.get_terminal_size`` as a pipe answers it."""
    raise OSError(25, "Inappropriate ioctl for device")


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """Print a warning on (the current) stderr, as the interpreter's own ``showwarning`` does."""
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def _process_state(environ: Mapping[str, str], cwd: Path | None) -> Iterator[None]:
    """Environment variables, working folder, terminal size, Typer's help console and warnings, restored on exit."""
    saved_environ = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_size = os.get_terminal_size
    saved_typer = (typer.rich_utils.FORCE_TERMINAL, typer.rich_utils.MAX_WIDTH)
    try:
        os.environ.clear()
        os.environ.update(environ)
        if cwd is not None:
            os.chdir(cwd)
        os.get_terminal_size = _not_a_terminal  # type: ignore[assignment]
        forced = any(environ.get(name) for name in ("GITHUB_ACTIONS", "FORCE_COLOR", "PY_COLORS"))
        typer.rich_utils.FORCE_TERMINAL = False if environ.get("_TYPER_FORCE_DISABLE_TERMINAL") else forced or None
        width = environ.get("TERMINAL_WIDTH")
        typer.rich_utils.MAX_WIDTH = int(width) if width else None
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(DEFAULT_FILTERS):
                warnings.filterwarnings(action, category=category, module=module or "")  # type: ignore[arg-type]
            warnings.showwarning = _show_warning  # pytest records warnings in its own; a process prints them
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        os.chdir(saved_cwd)
        os.get_terminal_size = saved_size  # type: ignore[assignment]
        typer.rich_utils.FORCE_TERMINAL, typer.rich_utils.MAX_WIDTH = saved_typer


def _exit_status(exc: SystemExit, stderr: io.TextIOBase) -> int:
    """The status a process leaving with ``exc`` reports: None is 0, an int itself, anything else printed and 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    stderr.write(f"{exc.code}\n")
    return 1


def run_attnx(
    *args: str,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    unset: Iterable[str] = (),
) -> Outcome:
    """Run `attnx ARGS` in-process as the console script does, with ``stdin`` piped in, and return its Outcome.

    The environment is this process's without ATTNX_* variables and those named in ``unset``, plus ``env``.
    """
    out, err = io.BytesIO(), io.BytesIO()
    streams = (
        io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True),
    )
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_argv = sys.argv
    escaped: BaseException | None = None
    with _process_state(clean_environment(env, unset), cwd):
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.argv = ["attnx", *args]
        env = Environment(*streams, environ=os.environ, debug=bool(os.environ.get("ATTNX_DEBUG")))
        try:
            attnx.cli.main(list(args), env=env)
            code = 0
        except SystemExit as exc:
            code = _exit_status(exc, sys.stderr)
        except KeyboardInterrupt:  # the person running the tests pressed Ctrl-C: stop them
            raise
        except BaseException as exc:  # what the interpreter does with an uncaught exception
            escaped = exc
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            code = 1
        finally:
            for stream in streams[1:]:
                stream.flush()
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            sys.argv = saved_argv
    stdout_bytes = out.getvalue()
    return Outcome(
        code,
        stdout_bytes.decode("utf-8", errors="replace"),
        err.getvalue().decode("utf-8", errors="replace"),
        stdout_bytes,
        escaped,
    )
