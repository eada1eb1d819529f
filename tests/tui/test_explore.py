"""`attnx explore` driven headless with Textual's pilot: a learner's session and a researcher's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from attnx.analysis.explore import Explorer, Setting
from attnx.analysis.heads import head_stats
from attnx.cli.explore import explorer
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags
from attnx.core.result import AttentionResult
from attnx.core.spec import AttentionSpec
from attnx.engines import compute
from attnx.render import explore as panels
from attnx.workflows import load_model_spec
from tests.models.checkpoints import TEXT, Reference
from tests.runner import run_attnx
from tests.tui.screens import BYTE_LEVEL, byte_level, ends, grids, printed, screen_lines

pytest.importorskip("textual")
from textual.pilot import Pilot
from textual.widgets import Input

from attnx.tui.app import ExploreApp


def drive(
    state: Explorer, session: Callable[[ExploreApp, Pilot[None]], Awaitable[None]], size=(80, 24), trace: bool = True
) -> None:
    """Run the app headless at ``size`` and play ``session`` on it (``trace`` off: no trace is drawn)."""

    async def play() -> None:
        app = ExploreApp(state, colour=True)
        if not trace:
            app.trace_delay = 3600.0
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
            await pilot.pause(3 * app.trace_delay)  # the cursor rests: the trace follows
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
            weights = app.state.matrix(0, 5)
            assert app.state.spec.settings.causal and np.all(np.triu(weights[0], 1) == 0)
            assert shown(app, "status").rstrip().endswith("· causal")
            assert "Since causal off → on: query 4 'mat' in H0" in shown(app, "change")
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
            np.testing.assert_allclose(app.state.matrix(0, len(app.state.tokens)), layer1.weights, rtol=1e-12)
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


def long_input(n: int = 1024, heads: int = 8, causal: bool = True) -> Explorer:
    """A random input of ``n`` tokens (d_k 16), as a user's NPY files would give."""
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, n, 16 * heads))
    tokens = tuple(f"t{i}" for i in range(n))
    spec = AttentionSpec.build(q=q, k=k, v=v, heads=heads, tokens=tokens, key_tokens=tokens, causal=causal)
    return Explorer(lambda _layer: spec, 1, "long", {})


class TestSettings:
    """An input's heads, scale, layout and mask change by key, and the change panel compares with the last."""

    def test_heads_then_a_head_that_was_not_there(self) -> None:
        spec = worked_example().spec
        two, four = compute(spec), compute(spec.with_heads(4))

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right", "h")
            state = app.state
            assert state.spec.settings.heads == 4 and state.last_change == "heads 2 → 4"
            np.testing.assert_array_equal(state.matrix(0, 5), four.weights)
            change = state.change()
            assert change is not None
            np.testing.assert_array_equal(change.before, two.weights[0, 1])
            np.testing.assert_array_equal(change.after, four.weights[0, 1])
            moved = np.asarray(four.output[1]) - np.asarray(two.output[1])
            assert change.shift == pytest.approx(np.linalg.norm(moved), rel=1e-12)
            assert change.largest == pytest.approx(np.abs(moved).max(), rel=1e-12)
            assert "Since heads 2 → 4: query 1 'cat' in H0" in shown(app, "change")
            await pilot.press("left_square_bracket")  # wraps to H3, which two heads did not have
            assert state.head == 3 and "H3 did not exist before heads 2 → 4" in shown(app, "change")
            await pilot.press("h")  # four heads → one: the cursor's head follows
            assert state.spec.settings.heads == 1 and state.head == 0

        drive(worked_example(), session)

    def test_scale_and_layout_are_the_engines(self) -> None:
        spec = worked_example().spec

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("s")
            assert app.state.last_change == "scale sqrt_dk → sqrt_d_model"
            wrong = compute(spec.with_settings(scale="sqrt_d_model"))
            np.testing.assert_array_equal(app.state.matrix(0, 5), wrong.weights)
            await pilot.press("l")
            assert app.state.last_change == "layout contiguous → interleaved"
            both = compute(spec.with_settings(scale="sqrt_d_model", layout="interleaved"))
            np.testing.assert_array_equal(app.state.matrix(0, 5), both.weights)
            assert "H=2 · scale sqrt_d_model · interleaved · no mask" in shown(app, "status")

        drive(worked_example(), session)

    def test_a_model_keeps_its_settings(self, gpt2: Reference) -> None:
        state = explorer(None, InputFlags(), ModelFlags(model=str(gpt2.path), text=TEXT), EngineFlags(), CapFlags())
        try:
            assert state.change_setting("heads") is None and state.previous is None
        finally:
            state.close()


class TestNavigation:
    """Go to a position, click a token, pin a head beside the cursor's."""

    def test_go_to_a_position(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("g", "3", "enter")
            assert app.state.query == 3
            await pilot.press("g", "9", "enter")  # no query 9: the cursor stays
            assert app.state.query == 3

        drive(worked_example(), session)

    def test_click_a_token(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            assert shown(app, "tokens").startswith("The cat sat on mat")
            await pilot.click("#tokens", offset=(1 + len("The cat "), 0))  # the strip's padding, then "sat"
            assert app.state.query == 2

        drive(worked_example(), session)

    def test_pin_a_head(self) -> None:
        result = compute(worked_example().spec)

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right", "p", "right_square_bracket")
            assert (app.state.pinned, app.state.head) == (0, 1)
            head = shown(app, "head")
            assert "Head 0 · columns 0-1 · d_k = 2 · weights · pinned" in head and "Head 1 · columns 2-3" in head
            rows = [line for line in head.splitlines() if "▶ cat" in line]
            assert len(rows) == 1  # side by side: both heads' rows of "cat" on one line
            cells = rows[0].replace("▶ cat", "|").split("|")[1:]
            assert [c.split() for c in cells] == [[f"{w:.2f}" for w in result.weights[h, 1]] for h in (0, 1)]
            assert "◆ H0" in shown(app, "heads") and "▶ H1" in shown(app, "heads")
            await pilot.press("left_square_bracket", "p")  # on the pinned head: let it go
            assert app.state.pinned is None

        drive(worked_example(), session, size=(120, 40))


class TestViews:
    """Value shares and rollout are the analyses' own numbers."""

    def test_value_shares(self) -> None:
        from attnx.analysis.measures import value_shares

        spec = worked_example("configs/projections-with-wo.yaml").spec
        assert spec.w_o is not None
        expected = value_shares(compute(spec), spec.w_o.weight)

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("v", "v")
            assert app.state.view == "value" and "value share" in shown(app, "head")
            n = len(app.state.tokens)
            np.testing.assert_allclose(app.state.matrix(0, n), expected, rtol=1e-12)

        drive(worked_example("configs/projections-with-wo.yaml"), session)

    def test_rollout_through_a_model(self, gpt2: Reference) -> None:
        from attnx.analysis.measures import rollout

        state = explorer(None, InputFlags(), ModelFlags(model=str(gpt2.path), text=TEXT), EngineFlags(), CapFlags())
        layers = [compute(load_model_spec(gpt2.path, TEXT, layer)) for layer in (0, 1)]
        expected = rollout([np.asarray(r.weights).mean(axis=0) for r in layers], layers[0].tokens)

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right_curly_bracket", "v", "v", "v")
            n = len(app.state.tokens)
            assert app.state.view == "rollout" and "Rollout through layers 0-1" in shown(app, "head")
            np.testing.assert_allclose(app.state.matrix(0, n)[0], expected.final, rtol=1e-12)
            heads = shown(app, "heads")
            assert "  L0" in heads and "▶ L1" in heads

        drive(state, session)

    def test_a_long_rollout_shows_its_progress(self) -> None:
        """On 200 tokens (4 blocks) the rollout is computed beside the app: the status and the head's panel count
        the blocks, a key still moves the cursor; leaving the view stops it, the blocks done are kept, and back in
        the view the last is computed at once: the analysis's own rollout."""
        from attnx.analysis.measures import rollout

        state = long_input(200, heads=2)
        gate, original = threading.Event(), state.block

        def held(
            index: int, setting: Setting | None = None, layer: int | None = None, kind: int | None = None
        ) -> AttentionResult:
            if index >= 2 and threading.current_thread().name == "attnx-rollout":
                assert gate.wait(10)  # the rollout's thread waits here until the test lets it go
            return original(index, setting, layer, kind)

        state.block = held  # type: ignore[method-assign]
        state.view = "value"  # one v from the rollout

        async def until(check: Callable[[], bool], pilot: Pilot[None]) -> None:
            for _ in range(200):
                if check():
                    return
                await pilot.pause(0.01)
            raise AssertionError("never came")

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("v")  # value shares → rollout
            await until(lambda: "computing the rollout: 2 of 4 blocks" in shown(app, "status"), pilot)
            assert "Rollout through layer 0: computing every query's weights, 2 of 4 blocks" in shown(app, "head")
            assert not app.query_one("#heads").display
            await pilot.press("right")  # the screen answers meanwhile
            assert app.state.query == 1 and "query 1 't1'" in shown(app, "status")
            thread = app.rolling.thread if app.rolling is not None else None
            await pilot.press("v")  # leave the rollout: its thread stops after its block
            assert app.rolling is None and app.state.view == "weights" and thread is not None
            gate.set()
            thread.join(10)
            assert not thread.is_alive() and state.rollout_needs() == 1  # block 2 kept; 3 is computed at once
            for _ in range(3):  # weights → scores → value shares → rollout, as v does
                app.action_view()
            await pilot.pause()
            assert app.rolling is None and "Rollout through layer 0 " in shown(app, "head")
            weights = np.asarray(compute(state.spec).weights).mean(axis=0)
            np.testing.assert_array_equal(app.state.matrix(0, 200)[0], rollout([weights], state.tokens).final)
            assert "rolled out after each layer" in shown(app, "heads")

        drive(state, session, trace=False)

    def test_learned_sinks(self) -> None:
        """With learned sinks the weights heatmaps end in a sink column holding the result's shares; the scores
        view has none."""
        import io

        from rich.console import Console

        rng = np.random.default_rng(3)
        q, k, v = rng.standard_normal((3, 6, 8))
        tokens = tuple(f"t{i}" for i in range(6))
        spec = AttentionSpec.build(q=q, k=k, v=v, heads=2, tokens=tokens, key_tokens=tokens, causal=True,
                                   sink_logits=(2.0, -1.0))  # fmt: skip
        state = Explorer(lambda _layer: spec, 1, "sinks", {})
        shares = compute(spec).sink_weights
        assert shares is not None
        np.testing.assert_allclose(state.sinks(0, 6), shares, rtol=1e-12)
        console = Console(width=100, file=io.StringIO(), color_system=None)
        console.print(panels.head_panel(state, colour=False, width=100))
        console.print(panels.heads_panel(state, colour=False, width=100))
        headers = [line.split() for line in console.file.getvalue().splitlines() if line.lstrip().startswith("t0")]
        assert len(headers) == 2 and all(header[-1] == "sink" for header in headers)
        state.cycle_view()
        assert state.view == "scores" and state.sinks(0, 6) is None


class TestLongInput:
    """A long input computes and draws the rows and keys on screen only."""

    def test_only_visited_blocks_are_computed(self) -> None:
        state = long_input()
        exact = compute(state.spec.select_queries([700]))

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right", "g", *"700", "enter")
            assert app.state.query == 700
            assert app.state.computed == [(0, 0), (0, 10), (0, 11)]  # rows 0-63 at the start; 694-705 on screen
            head = shown(app, "head")
            assert "queries 694-705 of 1024" in head and "keys 0, " in head
            row = next(line for line in head.splitlines() if line.startswith("▶ t700"))
            keys = next(line for line in head.splitlines() if line.lstrip().startswith("t0")).split()
            shown_keys = [int(key[1:]) for key in keys]
            assert shown_keys[0] == 0 and shown_keys[-1] == 700  # causal: the window ends at the query
            assert row.split()[2:] == [f"{exact.weights[0, 0, k]:.2f}" for k in shown_keys]

        drive(state, session, size=(80, 24))


class TestRefused:
    """What the engine refuses is said in one line and the app stays; nothing escapes as a traceback."""

    def test_a_block_that_overflows(self) -> None:
        from attnx.errors import NumericError

        rng = np.random.default_rng(3)
        q, k = rng.standard_normal((2, 70, 8))
        q[64:] = k[64:] = 1e200  # queries 64-69 against keys 64-69: Q·K overflows float64
        tokens = tuple(f"t{i}" for i in range(70))
        spec = AttentionSpec.build(q=q, k=k, v=k.copy(), heads=2, tokens=tokens, key_tokens=tokens)
        with pytest.raises(NumericError):
            compute(spec.select_queries([64]))

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("g", *"60", "enter")  # rows 54-65 on screen: the block of 64-69 with them
            (note,) = [n for n in app._notifications if n.severity == "error"]
            assert "overflows float64" in note.message
            assert app.is_running and app.state.query == 60
            await pilot.press("g", *"10", "enter")  # the first block alone: drawn again
            assert "query 10 't10'" in shown(app, "status")

        drive(Explorer(lambda _layer: spec, 1, "big", {}), session)


class TestCaps:
    """The explorer computes through attnx.compute, the one checked entry, under the caps the command was given."""

    def test_a_block_over_the_cap_is_refused(self) -> None:
        """--max-elements 20 on the worked example: a block's 2 × 5 × 5 weights (50 elements) are refused."""
        from attnx.errors import LimitError

        state = explorer(None, InputFlags(), ModelFlags(), EngineFlags(), CapFlags(max_elements="20"))
        with pytest.raises(LimitError, match=r"the scores: an array of 2 × 5 × 5 \(50 elements\) exceeds the element"):
            state.block(0)
        within = explorer(None, InputFlags(), ModelFlags(), EngineFlags(), CapFlags(max_elements="50")).block(0)
        assert within.weights is not None and within.weights.shape == (2, 5, 5)


def footer(app: ExploreApp) -> str:
    """The screen's last line: the footer's keys, as many as the width shows."""
    return screen_lines(app.export_screenshot())[-1]


def notes(app: ExploreApp) -> list[str]:
    """What the app has said in its notifications, in order."""
    return [note.message for note in app._notifications]


class TestKeys:
    """Escape closes what a key opened; the footer offers what the source has, down to "q quit" at 80 columns."""

    def test_escape_closes_every_box(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            keys, ask = app.query_one("#keys"), app.query_one("#ask")
            await pilot.press("question_mark")
            assert keys.has_class("shown")
            await pilot.press("escape")
            assert not keys.has_class("shown")
            for box in ("g", "slash"):
                await pilot.press(box)
                assert ask.has_class("shown")
                await pilot.press("escape")
                assert not ask.has_class("shown")
            await pilot.press("question_mark", "g", "escape")  # both open: the box closes first, then the keys
            assert keys.has_class("shown") and not ask.has_class("shown")
            await pilot.press("escape")
            assert not keys.has_class("shown") and app.is_running

        drive(worked_example(), session)

    def test_an_input_has_no_layer_keys(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.pause()  # the footer's first frame
            keys = footer(app)
            assert "layer" not in keys and keys.endswith("? keys q quit")
            await pilot.press("right_curly_bracket")  # still says why nothing moved
            assert app.state.layer == 0 and notes(app) == [
                "an input has one layer: { and } move through a model's layers"
            ]
            await pilot.press("slash", "right_curly_bracket")  # typed into the find box, not a key
            assert app.query_one("#ask", Input).value == "}" and len(notes(app)) == 1

        drive(byte_level(), session)

    def test_a_model_at_80_columns(self) -> None:
        """The widest footer, a model's with "→ query" (nothing focused after a box closes), keeps "q quit"."""

        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("g", "3", "enter")
            assert app.focused is None and footer(app) == (
                "→ query ] head } layer v view p pin g go to / find e export ? keys q quit"
            )
            await pilot.press("right_curly_bracket")
            assert app.state.layer == 1 and notes(app) == []

        drive(byte_level(layers=3), session)

    def test_settings_on_a_model_say_what_to_run(self) -> None:
        async def session(app: ExploreApp, pilot: Pilot[None]) -> None:
            await pilot.press("right_curly_bracket", "c", "h", "s", "l")
            command = '--model DIR --text "…" --layer 1'
            assert notes(app) == [
                f"a model's layers keep their own mask; to add a causal one to layer 1: attnx run {command} --causal",
                f"a model's layers keep their own settings; to compare head counts on layer 1: attnx diff {command} "
                "--heads 2,4",
                f"a model's layers keep their own settings; to compare scales on layer 1: attnx diff {command} "
                "--scale sqrt_dk,sqrt_d_model,none",
                f"a model's layers keep their own settings; to compare head layouts on layer 1: attnx diff {command} "
                "--layout contiguous,interleaved",
            ]
            assert app.state.setting == () and app.state.previous is None

        drive(byte_level(layers=3), session)

    def test_a_causal_model(self) -> None:
        from attnx.tui.app import on_a_model

        spec = byte_level().spec.with_settings(causal=True)
        state = Explorer(lambda _layer: spec, 2, "model", {})
        assert on_a_model(state, "causal") == "a model's layers keep their own mask: layer 0's is causal already"


class TestAlignment:
    """Heatmaps drawn one above another keep each key's column in one place, its label over its numbers."""

    def test_pinned_change_and_heads_in_line(self) -> None:
        """Stacked at 60 columns, in the scores view (numbers to "-1.23") beside the change's weights ("0.12")."""
        state = long_input(n=12, heads=2)
        state.go_to(6)
        state.pin()
        state.move_head(1)
        state.change_setting("causal")
        state.cycle_view()
        shared = panels.frame(state, 8)
        assert shared == panels.Frame(labels=len("before"), numbers=len("-1.23"))  # the widest label and number
        lines = printed(panels.head_panel(state, colour=False, width=60, rows=8, shared=shared),
                        panels.change_panel(state, colour=False, width=60, shared=shared),
                        panels.heads_panel(state, colour=False, width=60, shared=shared), width=60)  # fmt: skip
        shown = [line for line in lines if line.lstrip().startswith("t0 ")]  # the keys around the query
        assert len(shown) == 4 and len(set(shown)) == 1  # pinned, head, change, heads: the same keys, in place
        found = grids(lines, tuple(shown[0].split()))
        assert [len(rows) for _, rows in found] == [8, 8, 2, 2]
        assert all(row == header for header, rows in found for row in rows)

    def test_a_wide_title_moves_no_column(self) -> None:
        """The change panel's title is wider than its keys: it runs past them, the columns stay under the labels."""
        state = byte_level()
        state.go_to(2)
        state.change_setting("causal")
        lines = printed(panels.change_panel(state, colour=True, width=100), width=100)
        assert lines[0] == "Since causal off → on: query 2 ' sat' in H0"
        header, rows = grids(lines, BYTE_LEVEL)[0]
        assert header == ends(lines[3], r"\d\.\d\d") == ends(lines[4], r"\d\.\d\d") == [12, 18, 24, 30, 36]
        assert len(rows) == 2 and len(lines[2]) == len(lines[0])  # the rule as wide as the title
