"""The `attnx` console script: the CLI, ended quietly by Ctrl-C, SIGTERM or SIGHUP from its first instant.

The signals become exceptions, so that whatever is under way unwinds as for Ctrl-C: an output file being
written removes its temp file (``attnx.io.output.atomic_write``), then attnx leaves with one line on stderr
and 128 + the signal's number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), never a traceback, even while the CLI is
still importing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

from attnx.streams import quiet_stdout

CAUGHT = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


class Terminated(BaseException):
    """A termination signal, raised where the program was so that it unwinds (a BaseException: no ``except
    Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def say(line: str) -> None:
    """Write ``line`` on stderr; where stderr can no longer be written (its terminal hung up), send stdout and
    stderr nowhere instead, so that nothing fails writing to them again."""
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a stream without a file descriptor stays as it is
                os.dup2(devnull, stream.fileno())


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def main() -> None:
    """Run the CLI (``attnx.cli.main``) with the signals caught and the exits above."""
    for signum in CAUGHT:
        signal.signal(signum, _raise)
    try:
        from attnx.cli import main as cli

        cli()
    except KeyboardInterrupt:
        say("attnx: interrupted\n")
        raise SystemExit(128 + signal.SIGINT) from None
    except Terminated as exc:
        say(f"attnx: terminated by {exc}\n")
        raise SystemExit(128 + exc.signum) from None
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(0) from None
