"""The Textual app of `attnx explore`: panels of Rich renderables that follow the cursor, key by key."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static

from attnx.render import explore as panels
from attnx.tui.state import Explorer


class ExploreApp(App[None]):
    """Move over queries, heads and layers; every panel follows at once."""

    TITLE = "attnx explore"
    CSS = """
    #status { padding: 0 1; }
    VerticalScroll { padding: 0 1; }
    .panel { margin: 1 0 0 0; }
    #find { dock: bottom; display: none; }
    #find.shown { display: block; }
    #keys { display: none; border: round $accent; padding: 0 1; }
    #keys.shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "query(-1)", "query", show=False),
        Binding("right", "query(1)", "query ←→"),
        Binding("left_square_bracket", "head(-1)", "head", show=False),
        Binding("right_square_bracket", "head(1)", "head [ ]"),
        Binding("left_curly_bracket", "layer(-1)", "layer", show=False),
        Binding("right_curly_bracket", "layer(1)", "layer { }"),
        Binding("v", "view", "view"),
        Binding("c", "causal", "causal"),
        Binding("slash", "find", "find"),
        Binding("e", "export", "export"),
        Binding("question_mark", "keys", "keys"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, state: Explorer, *, colour: bool = True) -> None:
        super().__init__()
        self.state = state
        self.colour = colour
        self.exported: list[str] = []

    def compose(self) -> ComposeResult:
        """The status line, then the panels in a scrolling column, the key help and the find box."""
        yield Static(id="status")
        with VerticalScroll():
            yield Static(id="keys")
            yield Static(id="head", classes="panel")
            yield Static(id="heads", classes="panel")
            yield Static(id="trace", classes="panel")
        yield Input(placeholder="find a token (Enter: next match, Esc: close)", id="find")
        yield Footer()

    def on_mount(self) -> None:
        """Draw every panel once."""
        self.query_one("#keys", Static).update(panels.keys_panel())
        self.redraw()

    def redraw(self) -> None:
        """Draw each panel from the state (results computed once and kept by the state)."""
        state = self.state
        self.query_one("#status", Static).update(panels.status_line(state))
        self.query_one("#head", Static).update(panels.head_panel(state, colour=self.colour))
        self.query_one("#heads", Static).update(panels.heads_panel(state, colour=self.colour))
        self.query_one("#trace", Static).update(panels.trace_panel(state))

    def action_query(self, step: int) -> None:
        """Previous or next query."""
        self.state.move_query(step)
        self.redraw()

    def action_head(self, step: int) -> None:
        """Previous or next head."""
        self.state.move_head(step)
        self.redraw()

    def action_layer(self, step: int) -> None:
        """Previous or next layer (a model's)."""
        if self.state.layers == 1:
            self.notify("an input has one layer: { and } move through a model's layers")
            return
        self.state.move_layer(step)
        self.redraw()

    def action_view(self) -> None:
        """Weights, then scaled scores."""
        self.state.cycle_view()
        self.redraw()

    def action_causal(self) -> None:
        """The causal mask on or off (inputs only)."""
        if self.state.layers > 1:
            self.notify("a model's layers keep their own mask")
            return
        self.state.toggle_causal()
        self.redraw()

    def action_find(self) -> None:
        """Open the find box."""
        box = self.query_one("#find", Input)
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Jump to the next query whose token holds the text."""
        found = self.state.find(event.value)
        if found is None:
            self.notify(f"no token holds {event.value!r}", severity="warning")
            return
        self.state.go_to(found)
        self.redraw()

    def on_key(self, event: object) -> None:
        """Escape closes the find box."""
        box = self.query_one("#find", Input)
        if getattr(event, "key", None) == "escape" and box.has_class("shown"):
            box.remove_class("shown")
            self.set_focus(None)

    def action_export(self) -> None:
        """Save the screen as an SVG in the current folder."""
        path = self.save_screenshot()
        self.exported.append(path)
        self.notify(f"saved {path}")

    def action_keys(self) -> None:
        """Show or hide the keys."""
        self.query_one("#keys", Static).toggle_class("shown")
