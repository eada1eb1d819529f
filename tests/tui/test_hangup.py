"""The explorer when its terminal goes away: a hung-up terminal told from no terminal, the hang-up and termination
signals, and a real process on a pseudo-terminal that is closed under it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.tui.screens import byte_level

pytest.importorskip("textual")

from attnx.cli.explore import on_terminal
from attnx.console import Terminated
from attnx.tui.app import MIN_SIZE, ExploreApp
from attnx.tui.terminal import HANG_UP, terminal_gone, watchdog

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals and SIGHUP are POSIX")


@contextlib.contextmanager
def terminals() -> Iterator[dict[str, IO[str]]]:
    """Streams as a command may find them: on a live pseudo-terminal, on one that hung up (its master closed),
    on a pipe, on /dev/null, and a closed one."""
    live_master, live = pty.openpty()
    gone_master, gone = pty.openpty()
    os.close(gone_master)  # the terminal window closed: the slave answers EOF to reads, EIO to the rest
    read_end, write_end = os.pipe()
    closed = open(os.devnull)  # noqa: SIM115
    closed.close()
    streams = {
        "live": open(live, closefd=True),  # noqa: SIM115
        "gone": open(gone, closefd=True),  # noqa: SIM115
        "pipe": open(read_end, closefd=True),  # noqa: SIM115
        "null": open(os.devnull),  # noqa: SIM115
        "closed": closed,
    }
    try:
        yield streams
    finally:
        for stream in streams.values():
            with contextlib.suppress(OSError):
                stream.close()
        os.close(live_master)
        os.close(write_end)


class TestTerminalGone:
    """A terminal that hung up is told apart from a stream that never was a terminal."""

    def test_only_a_hung_up_terminal_is_gone(self) -> None:
        """EIO (hung up) is gone; a live terminal, a pipe, /dev/null and a closed stream are not."""
        with terminals() as streams:
            gone = {name: terminal_gone(stream) for name, stream in streams.items()}
        assert gone == {"live": False, "gone": True, "pipe": False, "null": False, "closed": False}

    def test_no_stdin_at_all(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A process without stdin (``sys.__stdin__`` None, as under pythonw) has no terminal to lose."""
        monkeypatch.setattr(sys, "__stdin__", None)
        assert terminal_gone() is False

    @pytest.mark.parametrize(
        ("stdin", "stdout", "expected"),
        [("live", "live", True), ("pipe", "live", False), ("live", "null", False), ("gone", "gone", None),
         ("gone", "live", None), ("live", "gone", None)],
    )  # fmt: skip
    def test_at_start_up(self, monkeypatch: pytest.MonkeyPatch, stdin: str, stdout: str, expected: bool | None) -> None:
        """Before the app opens, a terminal on both ends draws; a pipe or a file is refused (exit 2); a terminal that
        already hung up on either end ends the command as its SIGHUP would (None: Terminated, exit 129)."""
        with terminals() as streams:
            monkeypatch.setattr(sys, "stdin", streams[stdin])
            monkeypatch.setattr(sys, "stdout", streams[stdout])
            if expected is None:
                with pytest.raises(Terminated) as hung_up:
                    on_terminal()
                assert hung_up.value.signum == signal.SIGHUP
            else:
                assert on_terminal() is expected


class TestSignals:
    """SIGHUP and SIGTERM end a running app with 128 + the signal's number; the handlers it found are back after."""

    @pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
    def test_a_signal_ends_the_app(self, signum: int) -> None:
        """The signal, sent to this very process while the app runs (below MIN_SIZE: the message shows): the app ends
        with 128 + its number, and the handler the process had before (attnx.console's, here a stand-in) is back."""
        seen: list[int] = []

        def handler(number: int, _frame: object) -> None:
            seen.append(number)

        async def play() -> ExploreApp:
            app = ExploreApp(byte_level(), colour=False)
            async with app.run_test(size=(MIN_SIZE[0] - 1, MIN_SIZE[1])) as pilot:
                os.kill(os.getpid(), signum)
                await pilot.pause()
            return app

        before = signal.signal(signum, handler)
        try:
            app = asyncio.run(play())
            assert app.return_code == 128 + signum and not app.is_running and seen == []
            assert signal.getsignal(signum) is handler
        finally:
            signal.signal(signum, before)


class TestWatchdog:
    """Once the terminal has hung up, the app has a grace period to end on its own; past it the process ends."""

    def test_a_stuck_app_is_ended(self) -> None:
        """The terminal gone and the app not ending: the process leaves with 129 once the grace period is over."""
        left: list[tuple[int, float]] = []
        start = time.monotonic()
        watchdog(threading.Event(), lambda: True, lambda code: left.append((code, time.monotonic())), 0.01, 0.05)
        assert [code for code, _ in left] == [HANG_UP] and left[0][1] - start >= 0.06

    def test_an_app_that_ends_is_left_alone(self) -> None:
        """The terminal gone but the app ending within the grace period (its own watch): nothing more is done."""
        done, left = threading.Event(), []

        def gone() -> bool:
            threading.Timer(0.01, done.set).start()  # the app's own exit, a moment later
            return True

        watchdog(done, gone, left.append, 0.01, 1.0)
        assert left == [] and done.is_set()

    def test_a_live_terminal_is_left_alone(self) -> None:
        """A terminal that never hangs up: the watchdog looks until the app ends, and does nothing."""
        done, left, looks = threading.Event(), [], []

        def gone() -> bool:
            looks.append(1)
            if len(looks) == 3:
                done.set()
            return False

        watchdog(done, gone, left.append, 0.001, 0.05)
        assert left == [] and len(looks) == 3


# A child that makes the pseudo-terminal its controlling one, then becomes `attnx explore`: closing the terminal then
# also sends it SIGHUP, as a terminal window or a tmux server does to the session it leads.
LEADER = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'attnx', 'explore'])"
)


def explore_on_a_pty(controlling: bool) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m attnx explore` on a pseudo-terminal of 100 × 30, in a session of its own, where the terminal is its
    ``controlling`` one (closing it sends SIGHUP) or not (closing it sends no signal: EOF and EIO alone, as for an
    app whose session leader, the shell, ignored the hang-up); the process and the master side."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ATTNX_")} | {"TERM": "xterm-256color"}
    command = [sys.executable, "-c", LEADER] if controlling else [sys.executable, "-m", "attnx", "explore"]
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, cwd=ROOT, env=env
    )
    os.close(slave)
    return process, master


def read_until(masters: list[int], text: bytes, seconds: float = 20.0) -> list[bytes]:
    """What each process wrote on its terminal until ``text`` showed on every one, or ``seconds`` passed."""
    seen, deadline = dict.fromkeys(masters, b""), time.monotonic() + seconds
    while any(text not in shown for shown in seen.values()) and time.monotonic() < deadline:
        for master in select.select(masters, [], [], 0.05)[0]:
            seen[master] += os.read(master, 65536)
    return list(seen.values())


class TestTerminalClosed:
    """Real processes on real pseudo-terminals: when the terminal goes away under it, the explorer ends."""

    def test_closed_under_it(self) -> None:
        """Two explorers, one a session leader on its controlling terminal, one not: once both have drawn, both
        terminals close (EOF on reads, EIO on the rest, SIGHUP to the first). Both exit 129 within a second and a
        half, where before one was found 17 minutes later, its reader spinning on EOF."""
        started = [explore_on_a_pty(controlling) for controlling in (True, False)]
        processes, masters = [process for process, _ in started], [master for _, master in started]
        try:
            assert all(b"cat-sat-on-mat" in shown for shown in read_until(masters, b"cat-sat-on-mat")), "no screen"
            for master in masters:
                os.close(master)
            masters, closed = [], time.monotonic()
            while None in [process.poll() for process in processes] and time.monotonic() - closed < 1.5:
                time.sleep(0.01)
            assert [process.poll() for process in processes] == [HANG_UP, HANG_UP]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                process.wait()
            for master in masters:
                os.close(master)
