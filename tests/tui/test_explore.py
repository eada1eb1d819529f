"""`attnx explore` driven headless with Textual's pilot: a learner's session and a researcher's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.heads import head_stats
from attnx.cli.explore import explorer
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags
from attnx.engines import compute
from attnx.models import load_model_spec
from attnx.tui.state import Explorer
from tests.models.checkpoints import TEXT, Reference
from tests.runner import run_attnx

pytest.importorskip("textual")
from textual.pilot import Pilot

from attnx.tui.app import ExploreApp


def drive(state: Explorer, session: Callable[[ExploreApp, Pilot[None]], Awaitable[None]], size=(80, 24)) -> None:
    """Run the app headless at ``size`` and play ``session`` on it."""

    async def play() -> None:
        app = ExploreApp(state, colour=True)
        async with app.run_test(size=size) as pilot:
            await session(app, pilot)

    asyncio.run(play())


def shown(app: ExploreApp, panel: str) -> str:
    """The text of a panel's renderable, drawn 200 columns wide."""
    import io

    from rich.console import Console
    from textual.widgets import Static

    console = Console(width=200, file=io.StringIO(), color_system=None)
    console.print(app.query_one(f"#{panel}", Static).content)
    return console.file.getvalue()


def worked_example(config: str | None = None) -> Explorer:
    """The explorer's state on an input, as the command makes it."""
    return explorer(config, InputFlags(), ModelFlags(), EngineFlags(), CapFlags())


class TestLearner:
    """The worked example: move to "cat", switch heads, find a token, toggle the mask."""

    def test_move_to_cat_and_switch_heads(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right", "right_square_bracket")
            assert (app.state.query, app.state.head) == (1, 1)
            assert "head 1 of 2 · query 1 'cat'" in shown(app, "status")
            assert "Trace of 'cat' (query 1)" in shown(app, "trace")
            assert "Query 1 'cat' in every head" in shown(app, "heads")
            heads = shown(app, "heads")
            assert "▶ H1" in heads and "0.2711" not in heads  # two decimals in the panels: 0.27
            await pilot.press("right_square_bracket")  # past the last head: back to head 0
            assert app.state.head == 0
            await pilot.press("left", "left")  # the first query stops the cursor
            assert app.state.query == 0

        drive(worked_example(), session)

    def test_the_weights_shown_are_the_engines(self) -> None:
        """The head panel's row of "cat" holds the worked example's published weights, to two decimals."""

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right")
            row = next(line for line in shown(app, "head").splitlines() if line.startswith("▶ cat"))
            assert row.split()[2:] == ["0.37", "0.09", "0.37", "0.09", "0.09"]

        drive(worked_example(), session)

    def test_find_causal_and_view(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("slash", *"mat", "enter")
            assert app.state.query == 4
            await pilot.press("escape", "c")
            weights = app.state.result.weights
            assert app.state.spec.settings.causal and np.all(np.triu(weights[0], 1) == 0)
            assert "causal (toggled)" in shown(app, "status")
            await pilot.press("v")
            assert app.state.view == "scores" and "scaled score" in shown(app, "head")
            await pilot.press("question_mark")
            assert app.query_one("#keys").has_class("shown")

        drive(worked_example(), session)

    def test_export_writes_an_svg(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(tmp_path)

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("e")
            assert len(app.exported) == 1

        drive(worked_example(), session, size=(120, 40))
        (svg,) = tmp_path.glob("*.svg")
        assert svg.read_text().startswith("<svg")


class TestResearcher:
    """A model: switch layers and heads, and land on the head with the best previous-token score."""

    def test_layers_and_a_previous_token_head(self, gpt2: Reference) -> None:
        state = explorer(None, InputFlags(), ModelFlags(model=str(gpt2.path), text=TEXT), EngineFlags(), CapFlags())
        layer1 = compute(load_model_spec(gpt2.path, TEXT, 1))
        best = max(head_stats(layer1), key=lambda s: s.scores["previous-token"] or 0.0).head

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right_curly_bracket")
            assert app.state.layer == 1 and "layer 1 of 3" in shown(app, "status")
            np.testing.assert_allclose(app.state.result.weights, layer1.weights, rtol=1e-12)
            await pilot.press(*["right_square_bracket"] * best)
            assert app.state.head == best and f"head {best} of 4" in shown(app, "status")
            await pilot.press("right_curly_bracket", "right_curly_bracket")  # the last layer stops the cursor
            assert app.state.layer == 2

        drive(state, session)


class TestCommand:
    """What `attnx explore` says where it cannot open."""

    def test_not_a_terminal(self) -> None:
        out = run_attnx("explore")
        assert out.code == 2 and "draws on a terminal" in out.stderr

    def test_without_textual(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import sys

        monkeypatch.setitem(sys.modules, "attnx.tui.app", None)  # the import fails as without Textual
        out = run_attnx("explore")
        assert out.code == 2 and "pip install 'attnx[explore]'" in out.stderr
