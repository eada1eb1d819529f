"""The panels of `attnx explore`: the head's heatmap with the query marked, the query's row in every head, and
the trace; each a Rich renderable drawn from the explorer's results (the app only places them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attnx.core.result import AttentionResult
from attnx.render.heatmap import heatmap, legend, scale_of
from attnx.render.tables import head_title
from attnx.render.trace import trace_view

if TYPE_CHECKING:  # pragma: no cover
    from attnx.tui.state import Explorer

CURSOR = "▶ "  # marks the query (and the head) under the cursor in row labels
PRECISION = 2


def _marked(labels: list[str], index: int) -> list[str]:
    """Row labels with the cursor's row marked and the others indented to match."""
    return [(CURSOR if i == index else "  ") + label for i, label in enumerate(labels)]


def _matrix(result: AttentionResult, view: str) -> np.ndarray:
    matrix = result.weights if view == "weights" else result.scaled
    assert matrix is not None  # the explorer computes both
    return np.asarray(matrix)


def status_line(state: Explorer) -> Text:
    """Where the cursor is: the source, the layer and head, the query token, the view and the mask."""
    result = state.result
    layer = f"layer {state.layer} of {state.layers} · " if state.layers > 1 else ""
    mask = "causal" if state.spec.settings.causal else "no mask"
    flipped = " (toggled)" if state.causal_flip else ""
    token = state.tokens[state.query]
    return Text(f"{state.source} · {layer}head {state.head} of {result.heads} · query {state.query} '{token}' · "
                f"{state.view} · {mask}{flipped}", style="bold")  # fmt: skip


def head_panel(state: Explorer, *, colour: bool, max_rows: int | None = None) -> RenderableType:
    """The head's weights (or scaled scores) as a heatmap, the query's row marked."""
    result = state.result
    matrix = _matrix(result, state.view)
    scale = scale_of([matrix[state.head]], "weight" if state.view == "weights" else "scaled score")
    blocked = None if result.mask is None else ~np.asarray(result.mask, dtype=bool)
    title = head_title(result, state.head) + f" · {state.view}"
    grid = heatmap(title, matrix[state.head], _marked(list(result.tokens), state.query), list(result.key_tokens),
                   PRECISION, scale=scale, colour=colour, blocked=blocked, max_rows=max_rows)  # fmt: skip
    return Group(grid, legend(scale, PRECISION, colour))


def heads_panel(state: Explorer, *, colour: bool) -> RenderableType:
    """The query's row in every head, the head under the cursor marked."""
    result = state.result
    rows = _matrix(result, state.view)[:, state.query, :]  # (H, M)
    scale = scale_of([rows], "weight" if state.view == "weights" else "scaled score")
    labels = _marked([f"H{h}" for h in range(result.heads)], state.head)
    blocked = None if result.mask is None else np.repeat(~np.asarray(result.mask, dtype=bool)[[state.query]],
                                                          result.heads, axis=0)  # fmt: skip
    title = f"Query {state.query} '{state.tokens[state.query]}' in every head"
    return heatmap(title, rows, labels, list(result.key_tokens), PRECISION, scale=scale, colour=colour,
                   blocked=blocked)  # fmt: skip


def trace_panel(state: Explorer) -> RenderableType:
    """The trace of the query in the head under the cursor, as `attnx trace` prints it."""
    return trace_view(state.trace, 4, 8)


KEYS = (
    ("← →", "previous / next query"),
    ("[ ]", "previous / next head"),
    ("{ }", "previous / next layer (a model)"),
    ("v", "weights or scaled scores"),
    ("c", "causal mask on or off (an input, not a model)"),
    ("/", "find a token"),
    ("e", "export the screen as SVG"),
    ("?", "these keys"),
    ("q", "quit"),
)


def keys_panel() -> RenderableType:
    """The keys, one per line."""
    return Text("\n".join(f"{key:>5}  {what}" for key, what in KEYS))
