"""The Textual app of `attnx explore`: panels of Rich renderables that follow the cursor, key by key."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.styled import Styled
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Footer, Input, Static

from attnx.analysis.explore import Explorer, Setting
from attnx.errors import AttnxError
from attnx.render import explore as panels
from attnx.text import Inert, message_line
from attnx.tui.terminal import HANG_UP, WATCH, terminal_gone

# Seconds the cursor rests before the trace, the slowest panel to draw (20-30 ms), follows it: the heatmaps answer
# each key at once, and a held arrow key does not trace every token it passes.
TRACE_DELAY = 0.08
FADED = Style(dim=True)
# Below this width the footer's keys stand one blank apart, not two: on a model, with "→ query" shown, every key
# down to "q quit" then fits in 80 columns (73 characters, against 84).
COMPACT_FOOTER = 90
# The smallest terminal the panels are drawn in (columns, rows). Below 13 columns the trace's table cannot be drawn
# at all (Rich: "Sum of ratios must be > 0"); at 40 columns the status takes 3 rows, and with the tokens, the head's
# titles, its column labels and the footer, 12 rows is the least that shows the query's own row of the heatmap (at 10
# rows only the titles showed). Below it the explorer hides its panels, says so and waits.
MIN_SIZE = (40, 12)
# Blocks a rollout may still need and be computed as its key is answered (a short input: at once). Past it the
# rollout is computed beside the app, block by block, its progress shown, every key answered meanwhile: on 1024
# tokens (16 blocks) it took 0.6-6.5 s, the screen frozen until then.
INLINE_BLOCKS = 2
PROGRESS_EVERY = 0.1  # seconds between two drawings of a rollout's progress


class RolloutProgress(Message):
    """``done`` of ``total`` blocks of the rollout at ``key`` (layer, setting) are computed."""

    def __init__(self, key: tuple[int, Setting], done: int, total: int) -> None:
        super().__init__()
        self.key, self.done, self.total = key, done, total


class RolloutDone(Message):
    """The rollout at ``key`` is computed and kept, or failed: ``error`` (an AttnxError's line) or ``failure``."""

    def __init__(
        self, key: tuple[int, Setting], error: str | None = None, failure: BaseException | None = None
    ) -> None:
        super().__init__()
        self.key, self.error, self.failure = key, error, failure


class _Stopped(Exception):
    """The rollout's thread was asked to stop (the cursor left it)."""


@dataclass
class Rolling:
    """A rollout computed beside the app: its layer and setting, its progress, and how to stop its thread."""

    key: tuple[int, Setting]
    done: int = 0
    total: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    shown_at: float = 0.0  # when its progress was last drawn (time.monotonic)
    pending: bool = False  # whether a drawing of its progress is due


class ExploreApp(App[None]):
    """Move over queries, heads and layers; every panel follows at once."""

    TITLE = "attnx explore"
    CSS = """
    #status { padding: 0 1; }
    VerticalScroll { padding: 0 1; }
    .panel { margin: 1 0 0 0; }
    #tokens { padding: 0 1; height: 1; }
    #ask { dock: bottom; display: none; }
    #ask.shown { display: block; }
    #keys { display: none; border: round $accent; padding: 0 1; }
    #keys.shown { display: block; }
    .small Screen { overflow: hidden; }
    .small #status { padding: 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "query(-1)", "query", show=False),
        Binding("right", "query(1)", "query"),
        Binding("left_square_bracket", "head(-1)", "head", show=False),
        Binding("right_square_bracket", "head(1)", "head"),
        Binding("left_curly_bracket", "layer(-1)", "layer", show=False),
        Binding("right_curly_bracket", "layer(1)", "layer"),
        Binding("k", "kind", "kind"),
        Binding("v", "view", "view"),
        Binding("p", "pin", "pin"),
        Binding("g", "ask('go')", "go to"),
        Binding("slash", "ask('find')", "find"),
        Binding("h", "setting('heads')", "heads", show=False),
        Binding("s", "setting('scale')", "scale", show=False),
        Binding("l", "setting('layout')", "layout", show=False),
        Binding("c", "setting('causal')", "causal", show=False),
        Binding("e", "export", "export"),
        Binding("question_mark", "keys", "keys"),
        Binding("q", "quit", "quit"),
    ]
    PROMPTS: ClassVar[dict[str, str]] = {
        "find": "find a token (Enter: next match, Esc: close)",
        "go": "go to query number (from 0; Enter: go, Esc: close)",
    }

    def __init__(self, state: Explorer, *, colour: bool = True) -> None:
        super().__init__()
        self.state = state
        self.colour = colour
        self.asking = "find"  # what the input box asks for: a token to find or a position to go to
        self.exported: list[str] = []
        self.trace_delay = TRACE_DELAY
        self._tracing: Timer | None = None
        self.failure: BaseException | None = None  # what ended the app, when something failed inside it
        self._signals: dict[int, Any] = {}  # the handlers the app's own replaced, put back when it ends
        self.inline_blocks = INLINE_BLOCKS
        self.rolling: Rolling | None = None  # the rollout under the cursor, while it is computed beside the app
        self._threads: list[threading.Thread] = []  # every rollout's thread, joined before the app ends
        self._refused: dict[tuple[int, Setting], str] = {}  # rollouts the engine refused (an overflow), and why

    def compose(self) -> ComposeResult:
        """The status line and the token strip, then the panels in a scrolling column, the key help and the box
        that asks for a token or a position."""
        yield Static(id="status")
        yield Static(id="tokens")
        with VerticalScroll():
            yield Static(id="keys")
            yield Static(id="head", classes="panel")
            yield Static(id="change", classes="panel")
            yield Static(id="heads", classes="panel")
            yield Static(id="trace", classes="panel")
        yield Input(id="ask")
        yield Footer(show_command_palette=False)  # ctrl+p still opens it; its place goes to the keys

    def on_mount(self) -> None:
        """Draw every panel once; watch the terminal and the hang-up and termination signals."""
        self.query_one("#keys", Static).update(panels.keys_panel())
        self.catch_signals()
        self.watch_terminal()
        self.set_interval(WATCH, self.watch_terminal)
        self.fit()  # the trace follows, as after a key

    def catch_signals(self) -> None:
        """SIGHUP and SIGTERM end the app with 128 + the signal's number (129, 143: the exit codes attnx.console gives
        them everywhere else). The handlers run on the loop: attnx.console's, which raises, would be swallowed there
        by whichever task it interrupted."""
        loop = asyncio.get_running_loop()
        for signum in (getattr(signal, "SIGHUP", None), signal.SIGTERM):
            if signum is None:  # pragma: no cover - Windows has no SIGHUP
                continue
            previous = signal.getsignal(signum)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no loop handlers here
                loop.add_signal_handler(signum, self.exit, None, 128 + signum)
                self._signals[signum] = signal.SIG_DFL if previous is None else previous

    def on_unmount(self) -> None:
        """Put back the signal handlers the app replaced: after it, a signal ends the command as before it. Stop
        a rollout's thread and wait for it (a block at most): nothing computes once the command lets go of a
        checkpoint."""
        loop = asyncio.get_running_loop()
        for signum, previous in self._signals.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, previous)
        self._signals.clear()
        self._stop_rollout()
        for thread in self._threads:
            thread.join()

    def watch_terminal(self) -> None:
        """End the app (exit code ``HANG_UP``) once its terminal can no longer be read or written: a terminal that
        hung up answers EIO, where Textual's reader would spin on the end of its input."""
        if not self.is_headless and terminal_gone():  # headless (tests, the pilot) there is no terminal to lose
            self.exit(return_code=HANG_UP)

    def too_small(self) -> bool:
        """Whether the terminal is smaller than ``MIN_SIZE``; then every panel is hidden and the status says so."""
        width, height = self.size
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        self.set_class(small, "small")  # the message takes every cell: no padding, no scroll bar
        try:
            for widget in (self.query_one("#tokens"), self.query_one(VerticalScroll), self.query_one(Footer)):
                widget.display = not small
            if small:
                needs = f"attnx explore needs {MIN_SIZE[0]} × {MIN_SIZE[1]} cells; this terminal is {width} × {height}"
                self.query_one("#status", Static).update(Text(f"{needs}: enlarge it, or press q to quit"))
        except NoMatches:  # the app is closing (a timer or a resize after q): nothing to draw
            return True
        return small

    def on_resize(self, event: events.Resize) -> None:
        """Fit the panels to the new size once the app has taken it: this handler runs before Textual's own, which
        sets ``self.size`` (drawn at once, every panel would fit the size before, one resize behind)."""
        self.call_later(self.fit)

    def fit(self) -> None:
        """Fit the panels and the footer to the terminal's size."""
        self.query_one(Footer).compact = self.size.width < COMPACT_FOOTER
        self.redraw()

    def redraw(self) -> None:
        """Draw each panel from the state (blocks computed once and kept by the state) at the screen's size; below
        ``MIN_SIZE``, only what size the terminal needs."""
        if self._tracing is not None:
            self._tracing.stop()
        if self.too_small():
            return
        state = self.state
        width = max(self.size.width - 4, 20)  # the column's padding and its scroll bar
        rows = min(max(self.size.height - 12, 4), 16)  # the head's heatmap fits the screen with its titles
        with self.batch_update():  # every panel in one frame
            try:
                if self._awaiting_rollout():
                    self._waiting()
                else:
                    self._panels(state, width, rows)
            except AttnxError as exc:  # a block of a long input the engine refuses (an overflow): say so, stay
                self.notify(message_line(str(exc)), severity="error")
        self._tracing = self.set_timer(self.trace_delay, self.draw_trace)

    def _awaiting_rollout(self) -> bool:
        """Whether the view waits for the rollout under the cursor, computed beside the app: started here when it
        needs more than ``inline_blocks`` blocks; stopped when the cursor leaves it (the blocks done are kept)."""
        state = self.state
        key = (state.layer, state.setting)
        if state.view != "rollout" or (self.rolling is not None and self.rolling.key != key):
            self._stop_rollout()
        if state.view != "rollout":
            return False
        if self.rolling is not None or key in self._refused:
            return True
        if state.rollout_needs() <= self.inline_blocks:
            return False
        self.rolling = rolling = Rolling(key)
        rolling.thread = threading.Thread(target=self._roll_out, args=(rolling,), name="attnx-rollout", daemon=True)
        self._threads = [thread for thread in self._threads if thread.is_alive()] + [rolling.thread]
        rolling.thread.start()
        return True

    def _roll_out(self, rolling: Rolling) -> None:
        """In the rollout's thread: compute it, telling the app each block, until done or told to stop."""

        def progress(done: int, total: int) -> None:
            if rolling.stop.is_set():
                raise _Stopped
            self.post_message(RolloutProgress(rolling.key, done, total))  # thread-safe

        try:
            self.state.rollout(progress, at=rolling.key)
        except _Stopped:
            return
        except AttnxError as exc:  # the engine refused a block (an overflow)
            self.post_message(RolloutDone(rolling.key, error=message_line(str(exc))))
        except Exception as exc:  # anything else ends the app, as a failure on its loop would
            self.post_message(RolloutDone(rolling.key, failure=exc))
        else:
            self.post_message(RolloutDone(rolling.key))

    def _stop_rollout(self) -> None:
        """Ask the rollout's thread to stop after its block (it keeps the blocks done)."""
        if self.rolling is not None:
            self.rolling.stop.set()
            self.rolling = None

    def on_rollout_progress(self, message: RolloutProgress) -> None:
        """Show how far the rollout under the cursor has come."""
        rolling = self.rolling
        if rolling is None or rolling.key != message.key:
            return
        rolling.done, rolling.total = message.done, message.total
        wait = rolling.shown_at + PROGRESS_EVERY - time.monotonic()  # not a frame for every block
        if wait <= 0:
            self._show_progress(rolling)
        elif not rolling.pending:
            rolling.pending = True
            self.set_timer(wait, lambda: self._show_progress(rolling))

    def _show_progress(self, rolling: Rolling) -> None:
        """Draw the progress of ``rolling`` if it is still the rollout under the cursor."""
        rolling.pending, rolling.shown_at = False, time.monotonic()
        if rolling is self.rolling and not self.too_small():
            with self.batch_update():
                self._waiting()

    def on_rollout_done(self, message: RolloutDone) -> None:
        """Draw the rollout once computed (or say why not); a rollout the cursor left is kept for later."""
        if message.failure is not None:
            raise message.failure  # Textual's hook for a failure: the command says it and exits 1
        if self.rolling is None or self.rolling.key != message.key:
            return
        self.rolling = None
        if message.error is not None:
            self._refused[message.key] = message.error
            self.notify(message.error, severity="error")
        self.redraw()

    def _waiting(self) -> None:
        """The status, the tokens and the rollout's progress in place of the panels that need it."""
        state, rolling = self.state, self.rolling
        done, total = (rolling.done, rolling.total) if rolling is not None else (0, 0)
        refused = self._refused.get((state.layer, state.setting))
        status = panels.status_line(state)
        status.append(" · rollout refused" if refused else f" · computing the rollout: {done} of {total or '…'} blocks")
        self._show("status", status)
        self._show("tokens", panels.token_strip(state, self.size.width))
        self._show("head", panels.rollout_waiting(state, done, total, refused))
        self._show("change", None)
        self._show("heads", None)

    def _panels(self, state: Explorer, width: int, rows: int) -> None:
        """Every panel but the trace, drawn; the last trace faded."""
        colour = self.colour
        self._show("status", panels.status_line(state))
        self._show("tokens", panels.token_strip(state, self.size.width))
        shared = panels.frame(state, rows)  # a key's column at one place in every heatmap
        self._show("head", panels.head_panel(state, colour=colour, width=width, rows=rows, shared=shared))
        self._show("change", panels.change_panel(state, colour=colour, width=width, shared=shared))
        self._show("heads", panels.heads_panel(state, colour=colour, width=width, shared=shared))
        trace = self.query_one("#trace", Static)
        if isinstance(trace.content, Once) and not trace.content.dimmed:  # the last trace, faded until the cursor
            trace.update(trace.content.faded(), layout=False)  # rests (once: a faded trace is not drawn again)

    def draw_trace(self) -> None:
        """Draw the trace of the cursor's query and head (its row computed once, then kept)."""
        self._tracing = None
        if self.too_small():
            return
        try:
            self._show("trace", panels.trace_panel(self.state))
        except NoMatches:  # the app closed before the cursor rested
            return
        except AttnxError as exc:  # the engine refused the query's row (an overflow)
            self.notify(message_line(str(exc)), severity="error")

    def _show(self, panel: str, renderable: RenderableType | None) -> None:
        """Put ``renderable`` in ``panel``, every character of it made inert (None: hide the panel).

        The screen is laid out again only when the panel's height changes (a layout costs 15-20 ms): it is drawn
        here at the panel's width, and Textual reads that drawing when it paints. A panel last laid out at another
        size (the screen not laid out since a resize; below ``MIN_SIZE``, a few cells wide, where the trace's table
        cannot even be drawn) is not measured: Textual lays it out anew.
        """
        widget = self.query_one(f"#{panel}", Static)
        if renderable is None:
            widget.display = False
            return
        content = Once(Inert(renderable))
        region = widget.content_region
        same = False
        width = self.size.width
        if widget.display and width - 4 <= region.width <= width - 2:  # the padding, and the scroll bar if any
            options = self.console.options.update(width=region.width, height=None)
            same = len(self.console.render_lines(content, options, pad=False)) == region.height
        widget.display = True
        widget.update(content, layout=not same)

    def action_query(self, step: int) -> None:
        """Previous or next query."""
        self.state.move_query(step)
        self.redraw()

    def action_go(self, query: int) -> None:
        """Query ``query`` (a click on the token strip)."""
        self.state.go_to(query)
        self.redraw()

    def action_head(self, step: int) -> None:
        """Previous or next head."""
        self.state.move_head(step)
        self.redraw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``{`` and ``}`` only where there are layers: the footer offers them on a model alone; ``k`` on a model
        of several kinds of attention (an encoder-decoder) alone."""
        if action == "kind":
            return len(self.state.kinds) > 1
        return action != "layer" or self.state.layers > 1

    def action_kind(self) -> None:
        """The next kind of attention of an encoder-decoder: the encoder's self-attention, the decoder's causal
        self-attention, the cross-attention; or say why the cursor cannot move there (the decoder needs a target)."""
        self._stop_rollout()  # before the kind changes: a rollout's thread never computes another kind's blocks
        try:
            why = self.state.cycle_kind()
        except AttnxError as exc:  # the model refuses the kind's spec (a cap): say so, stay
            self.notify(message_line(str(exc)), severity="error")
            return
        if why is not None:
            self.notify(message_line(why), severity="warning")
            return
        self.redraw()

    def action_layer(self, step: int) -> None:
        """Previous or next layer (a model's)."""
        self.state.move_layer(step)
        self.redraw()

    def action_view(self) -> None:
        """Weights, scaled scores, value shares, rollout."""
        self.state.cycle_view()
        self.redraw()

    def action_pin(self) -> None:
        """Pin the head under the cursor, or let it go."""
        self.state.pin()
        self.redraw()

    def action_setting(self, name: str) -> None:
        """The input's next heads, scale, layout or causal setting; the change panel compares it with the last."""
        if self.state.of_model:
            self.notify(on_a_model(self.state, name), severity="warning")
            return
        try:
            changed = self.state.change_setting(name)
        except AttnxError as exc:
            self.notify(message_line(str(exc)), severity="error")
            return
        if changed is None:
            self.notify(f"this input takes no other {name}", severity="warning")
            return
        self.redraw()  # the change panel says what changed

    def action_ask(self, what: str) -> None:
        """Open the box that asks for a token (``find``) or a query's position (``go``)."""
        self.asking = what
        box = self.query_one("#ask", Input)
        box.placeholder = self.PROMPTS[what]
        box.value = ""
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Go to the next query whose token holds the text, or to the position typed."""
        found = self.state.find(event.value) if self.asking == "find" else _position(event.value, self.state)
        if found is None:
            wanted = "no token holds" if self.asking == "find" else "no query at"
            self.notify(f"{wanted} {message_line(event.value)!r}", severity="warning")
            return
        if self.asking == "go":  # one position: the box closes (find stays open, Enter finds the next)
            self._close_box()
        self.state.go_to(found)
        self.redraw()

    def _close_box(self) -> None:
        self.query_one("#ask", Input).remove_class("shown")
        self.set_focus(None)

    def on_key(self, event: object) -> None:
        """Escape closes the box, else the keys; ``{`` and ``}`` on an input (which has no layers) say so."""
        key = getattr(event, "key", None)
        keys = self.query_one("#keys", Static)
        if key == "escape" and self.query_one("#ask", Input).has_class("shown"):
            self._close_box()
        elif key == "escape" and keys.has_class("shown"):
            keys.remove_class("shown")
        elif key in ("left_curly_bracket", "right_curly_bracket") and not self.state.of_model:
            self.notify("an input has one layer: { and } move through a model's layers")
        elif key == "k" and len(self.state.kinds) < 2:
            self.notify("one kind of attention here: k moves between an encoder-decoder's three")

    def action_export(self) -> None:
        """Save the screen as an SVG in the current folder."""
        path = self.save_screenshot()
        self.exported.append(path)
        self.notify(f"saved {message_line(path)}")

    def action_keys(self) -> None:
        """Show or hide the keys."""
        self.query_one("#keys", Static).toggle_class("shown")

    def _handle_exception(self, error: Exception) -> None:
        """Textual's hook for an error nothing inside the app caught: kept for the command line, which says it in
        one line and exits 1 (Textual's own traceback goes to ``error_console``, which it replaces)."""
        self.failure = error
        super()._handle_exception(error)


def on_a_model(state: Explorer, name: str) -> str:
    """What ``c``, ``h``, ``s`` or ``l`` (setting ``name``) says on a model: the command that tries the setting on
    the cursor's layer instead."""
    layer = state.layer
    kind = state.current
    command = f'--model DIR --text "…" {f"--layer {layer}" if kind is None else kind.pointer(layer)}'
    if name == "causal":
        if state.spec.masking.future_hidden:
            return f"a model's layers keep their own mask: layer {layer}'s is causal already"
        run = f"attnx run {command} --causal"
        return f"a model's layers keep their own mask; to add a causal one to layer {layer}: {run}"
    values = state.values(name)
    shown = values[:2] if name == "heads" else values  # the head count and the next: a model's d_model has dozens
    what = {"heads": "head counts", "scale": "scales", "layout": "head layouts"}[name]
    return (f"a model's layers keep their own settings; to compare {what} on layer {layer}: attnx diff {command} "
            f"--{name} {','.join(str(value) for value in shown)}")  # fmt: skip


def _position(text: str, state: Explorer) -> int | None:
    """The query at position ``text`` (from 0), or None when it is not a position of the input."""
    try:
        query = int(text.strip())
    except ValueError:
        return None
    return query if 0 <= query < len(state.tokens) else None


class Once:
    """A renderable drawn once per width: Textual draws a panel's content to measure its height, then again to
    show it; the second time reads the first's segments."""

    def __init__(self, renderable: RenderableType, *, dimmed: bool = False) -> None:
        self.renderable = renderable
        self.dimmed = dimmed  # a faded drawing
        self._drawn: dict[int, list[Segment]] = {}

    def faded(self) -> Once:
        """The same drawing, dimmed (drawn anew only at a width it was not drawn at)."""
        faded = Once(Styled(self.renderable, "dim"), dimmed=True)
        faded._drawn = {width: list(Segment.apply_style(segments, post_style=FADED))
                        for width, segments in self._drawn.items()}  # fmt: skip
        return faded

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width not in self._drawn:
            self._drawn[options.max_width] = list(console.render(self.renderable, options))
        return self._drawn[options.max_width]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)
