"""What `attnx explore` shows and has computed: the cursor (query, head, layer, view) and the results it reads.

Nothing here imports Textual: the explorer's state moves and computes the same under a test as under the
app. Results come from ``attnx.engines.compute`` on the same specs the CLI builds; each is computed once
per (layer, causal) and kept, and a trace once per (layer, causal, query, head).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.trace import Trace
    from attnx.core.result import AttentionResult
    from attnx.core.spec import AttentionSpec

VIEWS = ("weights", "scores")  # what the heatmap shows, in the order `v` cycles through them


@dataclass
class Explorer:
    """The cursor and the caches of one exploring session.

    ``spec_of(layer)`` gives a layer's spec (a plain input has one layer, 0); ``layers`` how many there are.
    ``options`` go to ``compute`` (engine, device, dtype); ``close`` lets go of what ``spec_of`` reads. Every
    move keeps the cursor in range.
    """

    spec_of: Callable[[int], AttentionSpec]
    layers: int = 1
    source: str = "<input>"
    options: dict[str, Any] = field(default_factory=dict)
    query: int = 0
    head: int = 0
    layer: int = 0
    view: str = "weights"
    causal_flip: bool = False  # True: the layer's causal setting inverted (plain inputs only)
    close: Callable[[], None] = field(default=lambda: None, repr=False)  # lets go of a checkpoint
    _results: dict[tuple[int, bool], AttentionResult] = field(default_factory=dict, repr=False)
    _traces: dict[tuple[int, bool, int, int], Trace] = field(default_factory=dict, repr=False)

    @property
    def spec(self) -> AttentionSpec:
        """The spec under the cursor (the causal setting flipped when asked)."""
        spec = self.spec_of(self.layer)
        if self.causal_flip:
            spec = spec.with_settings(causal=not spec.settings.causal)
        return spec

    @property
    def result(self) -> AttentionResult:
        """The layer's result with every matrix, computed once."""
        key = (self.layer, self.causal_flip)
        if key not in self._results:
            from attnx.engines import compute

            self._results[key] = compute(self.spec, needs={"weights", "scaled", "scores", "mask"}, **self.options)
        return self._results[key]

    @property
    def trace(self) -> Trace:
        """The trace of the query and head under the cursor (its row alone is computed), once."""
        key = (self.layer, self.causal_flip, self.query, self.head)
        if key not in self._traces:
            from attnx.analysis.trace import build_trace
            from attnx.engines import compute

            row = compute(self.spec.select_queries([self.query]), **self.options)
            self._traces[key] = build_trace(row, heads=(self.head,), terms=None, keys=8)
        return self._traces[key]

    @property
    def tokens(self) -> tuple[str, ...]:
        """The query tokens."""
        return self.spec_of(self.layer).tokens

    @property
    def heads(self) -> int:
        """Heads in the layer."""
        return self.spec_of(self.layer).settings.heads

    def move_query(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) query, stopping at the ends."""
        self.query = min(max(self.query + step, 0), len(self.tokens) - 1)

    def go_to(self, query: int) -> None:
        """Query ``query`` (from 0), kept in range."""
        self.query = min(max(query, 0), len(self.tokens) - 1)

    def move_head(self, step: int) -> None:
        """The next or previous head, wrapping around."""
        self.head = (self.head + step) % self.heads

    def move_layer(self, step: int) -> None:
        """The next or previous layer, stopping at the ends; the head and query stay where they fit."""
        self.layer = min(max(self.layer + step, 0), self.layers - 1)
        self.head = min(self.head, self.heads - 1)
        self.query = min(self.query, len(self.tokens) - 1)

    def toggle_causal(self) -> None:
        """Flip the causal mask of the input (a model's layers are what they are)."""
        if self.layers == 1:
            self.causal_flip = not self.causal_flip

    def cycle_view(self) -> None:
        """Show the next of ``VIEWS`` in the heatmap."""
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]

    def find(self, text: str, start: int | None = None) -> int | None:
        """The first query from ``start`` (default: after the cursor, wrapping) whose token contains ``text``
        (case-insensitive), or None."""
        tokens = self.tokens
        first = self.query + 1 if start is None else start
        wanted = text.strip().lower()
        for offset in range(len(tokens)):
            i = (first + offset) % len(tokens)
            if wanted and wanted in tokens[i].strip().lower():
                return i
        return None
