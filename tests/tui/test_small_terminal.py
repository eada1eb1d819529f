"""The explorer in a terminal too small for it, and a failure inside it: what the screen says, what the CLI says."""

from __future__ import annotations

import asyncio
import io
import signal
from types import SimpleNamespace

import pytest
import typer

from tests.runner import run_attnx
from tests.tui.screens import byte_level, screen_lines

pytest.importorskip("textual")
from textual.pilot import Pilot

from attnx.cli.explore import ended
from attnx.console import Terminated
from attnx.errors import OutputError, UsageError
from attnx.tui.app import MIN_SIZE, ExploreApp

NEEDS = f"attnx explore needs {MIN_SIZE[0]} × {MIN_SIZE[1]} cells; this terminal is"


def message(width: int, height: int) -> str:
    """What the explorer says in a terminal of ``width`` × ``height`` cells, below ``MIN_SIZE``."""
    return f"{NEEDS} {width} × {height}: enlarge it, or press q to quit"


def quick(app: ExploreApp) -> ExploreApp:
    """``app``, its trace drawn as soon as the cursor moves (the pilot waits for every timer to fire)."""
    app.trace_delay = 0.001
    return app


def screen(app: ExploreApp) -> str:
    """The screen's text, its lines joined by one blank (the message wraps at the terminal's width)."""
    return " ".join(" ".join(screen_lines(app.export_screenshot())).split())


async def resized(pilot: Pilot[None], width: int, height: int) -> str:
    """The screen's text once the terminal is ``width`` × ``height``."""
    await pilot.resize_terminal(width, height)
    return screen(pilot.app)  # type: ignore[arg-type]  # an ExploreApp's pilot


class TestTooSmall:
    """Below MIN_SIZE the explorer hides its panels, says how large a terminal it needs and waits; keys still work."""

    def test_an_input_from_a_small_start(self) -> None:
        """An input opened at 10 × 4: it shows what fits of the message; a key pressed meanwhile counts; 79 × 12
        draws the panels; too narrow, too short or both says so again, and q quits there."""
        state = byte_level()
        too_small = [(39, 30), (120, 11), (20, 5)]

        async def play() -> list[str]:
            app = quick(ExploreApp(state, colour=False))
            async with app.run_test(size=(10, 4)) as pilot:
                seen = [screen(app)]
                await pilot.press("right")  # query 1, " cat"
                seen.append(await resized(pilot, 79, 12))
                seen += [await resized(pilot, *size) for size in too_small]
                await pilot.press("q")
            assert app.return_code == 0 and app.failure is None
            return seen

        first, drawn, *small = asyncio.run(play())
        assert first == "attnx explore needs 40 × 12 cells;"  # 4 rows of 10 cells, words whole
        assert NEEDS not in drawn and "query 1 ' cat'" in drawn and "▶ cat ██ 0.37" in drawn
        assert small == [message(*size) for size in too_small]

    def test_a_model_shrunk_and_grown(self) -> None:
        """A model's explorer at 80 × 24 on layer 1, shrunk to 1 × 1 and one cell short of MIN_SIZE each way, then
        grown to MIN_SIZE: the panels go, come back on the same layer with the query's row, and the app runs on."""

        async def play() -> tuple[list[str], bool]:
            app = quick(ExploreApp(byte_level(layers=3), colour=False))
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.press("right_curly_bracket")  # layer 1
                seen = [screen(app)]
                for size in [(1, 1), (MIN_SIZE[0] - 1, MIN_SIZE[1]), (MIN_SIZE[0], MIN_SIZE[1] - 1), MIN_SIZE]:
                    seen.append(await resized(pilot, *size))
                running = app.is_running
            return seen, running

        (big, tiny, narrow, short, least), running = asyncio.run(play())
        assert running and tiny == "a"
        assert [narrow, short] == [message(MIN_SIZE[0] - 1, MIN_SIZE[1]), message(MIN_SIZE[0], MIN_SIZE[1] - 1)]
        for drawn in (big, least):
            assert NEEDS not in drawn and "layer 1 of 3" in drawn and "▶ the ░░ 0.12" in drawn  # the query's row shows


class TestFailures:
    """An error nothing inside the app caught ends it; the command line says it in one line with its exit code."""

    def test_the_command_says_it_in_one_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """`attnx explore` whose head panel raises once the app runs: the app ends, the command prints one line
        (no traceback, nothing on stdout) and exits 1."""
        from textual.app import App

        from attnx.render import explore as panels

        def broken(*_args: object, **_options: object) -> None:
            raise RuntimeError("the head panel broke")

        ran: list[ExploreApp] = []

        def headless(app: ExploreApp) -> None:  # as on a terminal of 80 × 24
            ran.append(app)
            App.run(app, headless=True, size=(80, 24))

        monkeypatch.setattr(panels, "head_panel", broken)
        monkeypatch.setattr("attnx.cli.explore.on_terminal", lambda: True)
        monkeypatch.setattr(ExploreApp, "run", headless)
        outcome = run_attnx("explore")
        assert (outcome.code, outcome.stdout) == (1, "")
        assert outcome.stderr == "attnx: error: attnx explore stopped: RuntimeError: the head panel broke\n"
        assert ran[0].return_code == 1 and not ran[0].is_running

    @pytest.mark.parametrize(
        ("failure", "code", "line"),
        [
            (RuntimeError("the head panel broke"), 1, "attnx explore stopped: RuntimeError: the head panel broke"),
            (ZeroDivisionError("division by zero"), 1, "attnx explore stopped: ZeroDivisionError: division by zero"),
            (UsageError("no query 9\x1b[2J"), 2, "no query 9\\x1b[2J"),  # an AttnxError: its own code, escaped
            (OutputError("shot.svg: cannot write"), 1, "shot.svg: cannot write"),
        ],
    )
    def test_one_line_and_its_code(self, failure: Exception, code: int, line: str) -> None:
        """The command line (``ended`` under the commands' ``guarded``) says a kept failure in one line and leaves
        with its exit code: 1 for the unexpected, an AttnxError's own otherwise."""
        from attnx.cli.errors import guarded
        from attnx.environment import Environment, using

        stderr = io.StringIO()
        with using(Environment(stderr=stderr, debug=False)), pytest.raises(typer.Exit) as left:
            guarded(ended)(SimpleNamespace(failure=failure, return_code=1))  # type: ignore[arg-type]
        assert left.value.exit_code == code
        assert stderr.getvalue() == f"attnx: error: {line}\n"

    @pytest.mark.parametrize(("code", "signum"), [(129, signal.SIGHUP), (143, signal.SIGTERM)])
    def test_a_signal_is_the_commands_exit(self, code: int, signum: int) -> None:
        """An app ended by SIGHUP or SIGTERM (128 + its number) ends the command as the signal does anywhere."""
        with pytest.raises(Terminated) as signalled:
            ended(SimpleNamespace(failure=None, return_code=code))  # type: ignore[arg-type]
        assert signalled.value.signum == signum

    @pytest.mark.parametrize("code", [0, None])
    def test_q_is_success(self, code: int | None) -> None:
        """An app left with q ends the command quietly (exit 0)."""
        assert ended(SimpleNamespace(failure=None, return_code=code)) is None  # type: ignore[arg-type,func-returns-value]
