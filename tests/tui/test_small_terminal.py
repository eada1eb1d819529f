"""The explorer in a terminal too small for it, a failure inside it, and a terminal that goes away."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tui.screens import byte_level

pytest.importorskip("textual")

from attnx.tui.app import HANG_UP, MIN_SIZE, ExploreApp

ROOT = Path(__file__).parents[2]


def session(sizes: list[tuple[int, int]], layers: int = 1, keys: tuple[str, ...] = ("right",)) -> list[str]:
    """What the screen says at each of ``sizes`` in turn (the first the start's, the next by resizing), after
    ``keys`` pressed at each: the status line, then every panel shown, as one line of text; the app must still run
    at the end, and q end it."""
    screens: list[str] = []

    async def play() -> None:
        app = ExploreApp(byte_level(layers), colour=False)
        async with app.run_test(size=sizes[0]) as pilot:
            for size in sizes:
                await pilot.resize_terminal(*size)
                await pilot.pause(0.1)  # the trace's timer fires, if it was set
                for key in keys:
                    await pilot.press(key)
                await pilot.pause(0.05)
                shown = [name for name in ("status", "head", "heads") if app.query_one(f"#{name}").display]
                screens.append(" ".join(" ".join(text_of(app, name).split()) for name in shown).strip())
            assert app.is_running and app.failure is None
            await pilot.press("q")
        assert app.return_code in (0, None)

    asyncio.run(play())
    return screens


def text_of(app: ExploreApp, panel: str) -> str:
    """A panel's text, drawn 200 columns wide."""
    import io

    from rich.console import Console
    from textual.widgets import Static

    console = Console(width=200, file=io.StringIO(), color_system=None)
    console.print(app.query_one(f"#{panel}", Static).content)
    return console.file.getvalue()  # type: ignore[attr-defined]


NEEDS = f"attnx explore needs {MIN_SIZE[0]} × {MIN_SIZE[1]} cells; this terminal is"


class TestTooSmall:
    """Below MIN_SIZE the explorer says how large a terminal it needs, keeps running, and comes back when it grows."""

    def test_says_so_and_keeps_running(self) -> None:
        """At start-up at 10 × 4, then too narrow, too short or both: no crash, the keys still work, the status says
        the size it needs and the size it has, and no panel is drawn."""
        sizes = [(10, 4), (1, 1), (20, 5), (39, 30), (120, 9)]
        assert session(sizes) == [f"{NEEDS} {w} × {h}: enlarge it, or press q to quit" for w, h in sizes]

    def test_shrinks_and_grows_back(self) -> None:
        """A model's 80 × 24, then 1 × 1 and 10 × 4, then MIN_SIZE and 80 × 24 again: the panels go and come back."""
        screens = session([(80, 24), (1, 1), (10, 4), MIN_SIZE, (80, 24)], layers=3)
        assert [NEEDS in shown for shown in screens] == [False, True, True, False, False]
        assert "Head 0" in screens[0] and "Head 0" in screens[3] and "Head 0" in screens[4]


class TestFailures:
    """An error nothing inside the app caught ends it: the command line says so in one line and exits 1."""

    def test_a_failure_is_kept_and_ends_the_app(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A panel that raises: the app stops with return code 1 and keeps the error for the command line."""
        from attnx.render import explore as panels

        def broken(*_args: object, **_options: object) -> None:
            raise RuntimeError("the head panel broke")

        monkeypatch.setattr(panels, "head_panel", broken)

        async def play() -> ExploreApp:
            app = ExploreApp(byte_level(), colour=False)
            try:
                async with app.run_test(size=(80, 24)) as pilot:
                    await pilot.pause(0.1)
            except RuntimeError:
                pass  # the pilot raises it again for test frameworks
            return app

        app = asyncio.run(play())
        assert app.return_code == 1 and isinstance(app.failure, RuntimeError)

    def test_the_command_line_says_it_in_one_line(self, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
        """`ended` turns a kept failure into one line and exit 1; a hang-up into exit 129."""
        import typer

        import attnx.tui.app
        from attnx.cli.explore import ended
        from attnx.console import Terminated

        monkeypatch.setattr(attnx.tui.app, "terminal_gone", lambda: False)  # pytest's stdin is no terminal

        class Ended:
            failure: BaseException | None = RuntimeError("the head panel broke")
            return_code = 1

        with pytest.raises(typer.Exit) as stopped:
            ended(Ended())  # type: ignore[arg-type]
        err = capsys.readouterr().err
        assert stopped.value.exit_code == 1 and err.count("\n") == 1
        assert err.startswith("attnx: error: attnx explore stopped: RuntimeError: the head panel broke")
        Ended.failure, Ended.return_code = None, HANG_UP
        with pytest.raises(Terminated) as hung:
            ended(Ended())  # type: ignore[arg-type]
        assert hung.value.signum == signal.SIGHUP


def explore_on_a_pty() -> tuple[subprocess.Popen[bytes], int]:
    """`python -m attnx explore` in a fresh session on a pseudo-terminal of 100 × 30; the process and the master,
    once the app has drawn its first screen (its status line shows)."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ATTNX_")} | {"TERM": "xterm-256color"}
    process = subprocess.Popen([sys.executable, "-m", "attnx", "explore"], stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True, cwd=ROOT, env=env)  # fmt: skip
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 30
    while b"cat-sat-on-mat" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    assert b"cat-sat-on-mat" in seen, seen[-400:]
    return process, master


def gone_within(process: subprocess.Popen[bytes], seconds: float, master: int | None = None) -> int | None:
    """The process's exit code if it ended within ``seconds``, else None (it is killed either way); what it writes
    on ``master`` (a terminal still there) is read meanwhile, as a terminal would."""
    deadline = time.monotonic() + seconds
    try:
        while process.poll() is None and time.monotonic() < deadline:
            ready = select.select([master], [], [], 0.05)[0] if master is not None else time.sleep(0.05)
            if ready:
                try:
                    os.read(master, 65536)  # type: ignore[arg-type]
                except OSError:
                    master = None
        return process.poll()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
class TestTerminalGone:
    """A real process on a real pseudo-terminal: when the terminal goes away, the explorer exits within a second."""

    def test_the_terminal_closes(self) -> None:
        """The master side closes (a terminal window or a tmux server killed): the app ends within 2 s, exit 129."""
        process, master = explore_on_a_pty()
        os.close(master)
        assert gone_within(process, 2.0) == HANG_UP

    def test_sighup_alone(self) -> None:
        """SIGHUP with the terminal still there: the app ends within 2 s, exit 129, the terminal restored."""
        process, master = explore_on_a_pty()
        try:
            process.send_signal(signal.SIGHUP)
            assert gone_within(process, 2.0, master) == 128 + signal.SIGHUP
        finally:
            os.close(master)
