"""What a run of attnx is handed from outside: its streams, their terminal-ness, colour, debug, environment variables.

The CLI reads these through the ``Environment`` in force (``current``), never through ``sys.stdin``,
``sys.stdout``, ``sys.stderr`` or ``os.environ`` directly, so that a caller (a test) hands it another one
(``using``, ``attnx.cli.main(argv, env=...)``) instead of patching globals. Standard library only: the CLI
imports it at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TextIO


def _stdin() -> TextIO | None:
    return sys.stdin


def _stdout() -> TextIO:
    return sys.stdout


def _stderr() -> TextIO:
    return sys.stderr


def _environ() -> MutableMapping[str, str]:
    return os.environ


@dataclass(eq=False)  # one run's surroundings: equal only to itself (and 0.1 ms less to import)
class Environment:
    """Streams, environment variables and ``--debug`` of one run; a stream left out is the process's at creation."""

    stdin: TextIO | None = field(default_factory=_stdin)  # None: the process has no stdin (`attnx run - <&-`)
    stdout: TextIO = field(default_factory=_stdout)
    stderr: TextIO = field(default_factory=_stderr)
    environ: MutableMapping[str, str] = field(default_factory=_environ)
    debug: bool = False  # --debug (or ATTNX_DEBUG): tracebacks and cause chains

    @classmethod
    def from_process(cls) -> Environment:
        """The process's: ``sys`` streams as they are now, ``os.environ``, debug when ATTNX_DEBUG is set."""
        return cls(debug=bool(os.environ.get("ATTNX_DEBUG")))

    @property
    def stdin_isatty(self) -> bool:
        """Whether stdin is a terminal (False when there is none)."""
        return self.stdin is not None and self.stdin.isatty()

    @property
    def stdout_isatty(self) -> bool:
        """Whether stdout is a terminal."""
        return self.stdout.isatty()

    @property
    def stderr_isatty(self) -> bool:
        """Whether stderr is a terminal."""
        return self.stderr.isatty()

    def colour(self, no_color: bool = False) -> bool:
        """False when ``no_color`` (--no-color), NO_COLOR (any value) or TERM=dumb asks for plain text."""
        return not (no_color or self.environ.get("NO_COLOR") or self.environ.get("TERM") == "dumb")

    @property
    def columns(self) -> int | None:
        """COLUMNS as a width, or None when it is unset or no positive whole number."""
        value = self.environ.get("COLUMNS", "").strip()
        return (int(value) or None) if value.isascii() and value.isdigit() else None


ACTIVE: ContextVar[Environment] = ContextVar("attnx_environment")


def current() -> Environment:
    """The environment in force (``using``); with none installed, the process's as it is now."""
    installed = ACTIVE.get(None)
    return installed if installed is not None else Environment.from_process()


@contextmanager
def using(env: Environment) -> Iterator[Environment]:
    """Make ``env`` the one in force inside the block (this thread and the tasks it starts)."""
    token = ACTIVE.set(env)
    try:
        yield env
    finally:
        ACTIVE.reset(token)
