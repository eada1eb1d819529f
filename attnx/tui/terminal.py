"""The terminal under the explorer: whether it hung up, and a watchdog that ends a process stuck on one."""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable
from typing import TextIO

WATCH = 0.25  # seconds between two looks at the terminal: one that hung up ends the app within a second
HANG_UP = 129  # the exit code of a terminal gone, as for SIGHUP (128 + 1)
# Seconds the app has to end on its own once its terminal hung up (its watch asks it to within a quarter second)
# before the process ends without it: a hang-up within a second, as the app's own exit takes 0.2-0.4 s.
GRACE = 0.5


def terminal_gone(stream: TextIO | None = None) -> bool:
    """Whether the terminal of ``stream`` (the process's stdin by default) hung up or closed: its attributes answer
    EIO (ENXIO on some systems). A stream that is no terminal (ENOTTY), or none at all, has no terminal to lose."""
    try:
        import termios
    except ImportError:  # pragma: no cover - not POSIX: Textual's own driver watches its console
        return False
    stream = sys.__stdin__ if stream is None else stream
    try:
        termios.tcgetattr(stream.fileno())  # type: ignore[union-attr]  # None: the AttributeError below
    except (OSError, termios.error) as exc:
        return bool(exc.args) and exc.args[0] in (errno.EIO, errno.ENXIO)
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False
    return False


def watchdog(
    done: threading.Event,
    gone: Callable[[], bool] | None = None,
    leave: Callable[[int], object] = os._exit,
    every: float | None = None,
    grace: float = GRACE,
) -> None:
    """Until ``done``, look at the terminal ``every`` seconds (``WATCH``); once it has hung up
    (``gone``: ``terminal_gone``) and the app has not ended within ``grace`` seconds, end the process
    with the hang-up's exit code (``leave``: at once, as nothing is left to restore or tell).

    The app can be stuck where its own watch and signal handlers cannot run: Textual's writer thread dies on the
    first write that fails (EIO), its queue of 30 writes fills, and the next write blocks the app's loop for ever,
    while its reader spins on the end of its input. On a pseudo-terminal closed under a session leader (SIGHUP at
    once) this took 13 exits in 15.
    """
    gone = terminal_gone if gone is None else gone
    while not done.wait(WATCH if every is None else every):
        if gone():
            if not done.wait(grace):
                leave(HANG_UP)
            return
