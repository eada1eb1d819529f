"""The panels of `attnx explore`: the token strip, the head's heatmap with the query marked (and a pinned head
beside it), the query's row in every head, the change since the last setting, and the trace; each a Rich
renderable drawn from the explorer's computed blocks (the app only places them).

Past the width, the heatmaps show the keys around the query (key 0, where sinks gather, stays in view);
past ``rows``, the queries around it: a long input draws and computes what is on screen only. The heatmaps
drawn one above another (the head's, a pinned head's, the change's, the query's row in every head) share a
``Frame``: a key's column stands at one place in all of them, its label over its numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attnx.analysis.explore import BLOCK
from attnx.render.fitted import FittedGrid
from attnx.render.heatmap import HeatScale, heatmap, legend, number_width, scale_of
from attnx.render.numbers import fmt
from attnx.render.tables import SINK_LABEL, head_title
from attnx.render.trace import trace_view
from attnx.text import labels

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.explore import Change, Explorer

CURSOR = "▶ "  # marks the query (and the head) under the cursor in row labels
PIN = "◆ "  # marks the pinned head
PRECISION = 2
SCALES = {"weights": "weight", "scores": "scaled score", "value": "value share", "rollout": "rollout"}
GAP = 2  # blanks between two heatmaps side by side
COLUMN = 6  # characters a heatmap column usually takes (" 0.12" and a blank): the first guess at how many fit
ROWS = 12  # queries the head's heatmap shows unless told
CHANGE_LABELS = ("before", "now")  # the change panel's rows
BAR = 40  # characters of the rollout's progress bar


@dataclass(frozen=True)
class Frame:
    """What the explorer's heatmaps share, so that a key's column stands at one place in each: the width of the
    row labels and of the numbers (the widest of any panel's), and titles that never widen the columns."""

    labels: int = 0
    numbers: int = 0


@functools.lru_cache(maxsize=8)
def _shown(tokens: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(labels(tokens))


def tokens_of(state: Explorer) -> tuple[str, ...]:
    """The queries' tokens as the panels show them (``attnx.text.label``: a long token cut in its middle)."""
    return _shown(tuple(state.tokens))


def keys_of(state: Explorer) -> tuple[str, ...]:
    """The keys' tokens as the panels show them."""
    return _shown(tuple(state.key_tokens))


def frame(state: Explorer, rows: int = ROWS) -> Frame:
    """The frame of the panels around the cursor, the head's heatmap showing at most ``rows`` queries.

    Labels: the window's tokens marked, ``before``, the heads' (or, in the rollout view, the layers') marked
    names. Numbers: the view's in the window, every head (the query's row in every head is one of its rows),
    and the change panel's weights.
    """
    lo, hi = state.window(rows)
    names = [f"H{state.heads - 1}", f"L{state.layer}", *tokens_of(state)[lo:hi]]
    labels = max(cell_len(label) for label in [*CHANGE_LABELS, *_marked(names, 0)])
    numbers = max(number_width(state.matrix(lo, hi), PRECISION), len(fmt(1.0, PRECISION)))
    return Frame(labels, numbers)


def _marked(labels: Sequence[str], index: int, pinned: int | None = None) -> list[str]:
    """Row labels with the cursor's row marked (and a pinned one), the others indented to match."""
    marks = {index: CURSOR} if pinned is None else {pinned: PIN, index: CURSOR}
    return [marks.get(i, "  ") + label for i, label in enumerate(labels)]


def _settings(state: Explorer) -> str:
    """An input's settings as the status line says them: ``H=2 · scale sqrt_dk · contiguous · no mask``."""
    s = state.spec.settings
    parts = [f"H={s.heads}", f"scale {s.scale}", s.layout, state.spec.masking.status_word]
    return " · ".join(parts)


def status_line(state: Explorer) -> Text:
    """Where the cursor is: the source, the layer (of an encoder-decoder: the stack, its layer and the kind of
    attention) and head, the query token, the view and the settings."""
    kind = state.current
    if kind is not None:
        layer = f"{kind.stack} layer {state.layer} of {state.layers} · {kind.attention} · "
    else:
        layer = f"layer {state.layer} of {state.layers} · " if state.layers > 1 else ""
    pinned = f" (pinned {state.pinned})" if state.pinned is not None else ""
    token = tokens_of(state)[state.query]
    return Text(f"{state.source} · {layer}head {state.head} of {state.heads}{pinned} · query {state.query} "
                f"'{token}' · {state.view} · {_settings(state)}", style="bold")  # fmt: skip


def token_strip(state: Explorer, width: int) -> Text:
    """The tokens around the query on one line, the query's reversed; a click on a token moves the cursor there."""
    tokens, query = tokens_of(state), state.query
    lo = hi = query
    used = cell_len(tokens[query]) + 1
    while True:  # take tokens from both sides in turn while they fit
        grown = False
        for side in (-1, 1):
            j = lo - 1 if side < 0 else hi + 1
            if 0 <= j < len(tokens) and used + cell_len(tokens[j]) + 1 <= width - 4:
                used += cell_len(tokens[j]) + 1
                lo, hi = (j, hi) if side < 0 else (lo, j)
                grown = True
        if not grown:
            break
    strip = Text("… " if lo > 0 else "", style="dim")
    for i in range(lo, hi + 1):
        click = Style(meta={"@click": f"app.go({i})"})
        strip.append(tokens[i], style=click + Style(reverse=True, bold=True) if i == query else click)
        strip.append(" ")
    if hi < len(tokens) - 1:
        strip.append("…", style="dim")
    return strip


def around(state: Explorer, count: int) -> list[int]:
    """``count`` keys around the query (ending at its last visible key under a mask), key 0 kept first."""
    m = len(keys_of(state))
    if count >= m:
        return list(range(m))
    blocked = state.blocked(state.query, state.query + 1)
    visible = np.flatnonzero(~blocked[0]) if blocked is not None else np.arange(m)
    end = int(visible.max()) + 1 if visible.size else m
    hi = min(end, max(state.query + 1 + count // 2, count))
    lo = max(0, hi - count)
    keys = list(range(lo, min(m, lo + count)))
    return keys if lo == 0 else [0, *keys[1:]]


def key_grid(state: Explorer, title: str, rows: np.ndarray, labels: Sequence[str], scale: HeatScale, colour: bool,
             width: int, blocked: np.ndarray | None = None, sink: np.ndarray | None = None,
             shared: Frame | None = None) -> FittedGrid:  # fmt: skip
    """``rows`` (``[row, key]``) as a heatmap with as many keys around the query as ``width`` holds, then a
    learned sink's share per row (``sink``, ``[row]``) where there is one; in ``shared`` (the panels') frame,
    else in its own. A title wider than the keys runs past them: it never moves a column."""
    own = shared or Frame()
    key_tokens = keys_of(state)
    extra = 0 if sink is None else 1
    count = min(len(key_tokens), width // COLUMN - extra)
    while True:
        keys = around(state, count)
        shown, names = rows[:, keys], [key_tokens[k] for k in keys]
        shut = None if blocked is None else blocked[:, keys]
        if sink is not None:
            shown, names = np.concatenate([shown, sink[:, None]], axis=1), [*names, SINK_LABEL]
            shut = None if shut is None else np.concatenate([shut, np.zeros((len(shut), 1), dtype=bool)], axis=1)
        grid = heatmap(title + _keys_note(keys, len(key_tokens)), shown, labels, names, PRECISION, scale=scale,
                       colour=colour, blocked=shut, numbers=own.numbers, label_width=own.labels,
                       widen=False)  # fmt: skip
        left, right = grid.shown(width)
        if not right or count <= 2:
            return grid
        count = max(2, len(left) + len(right))


def _keys_note(keys: list[int], total: int) -> str:
    """``" · keys 0, 14-23 of 40"`` when some keys are left out, else nothing."""
    if len(keys) == total:
        return ""
    runs = [keys[0]] if len(keys) > 1 and keys[1] != keys[0] + 1 else []
    first = keys[len(runs)]
    shown = [str(k) for k in runs] + [f"{first}-{keys[-1]}" if keys[-1] > first else str(first)]
    return f" · keys {', '.join(shown)} of {total}"


def _head_grid(state: Explorer, head: int, rows: tuple[int, int], matrix: np.ndarray, colour: bool, width: int,
               scale: HeatScale, sinks: np.ndarray | None, shared: Frame) -> FittedGrid:  # fmt: skip
    """Head ``head``'s heatmap over queries ``rows``, ``matrix`` (``[row, key]``) as the view under the cursor
    shows them."""
    lo, hi = rows
    blocked = None if state.view == "rollout" else state.blocked(lo, hi)
    labels = _marked(tokens_of(state)[lo:hi], state.query - lo)
    if state.view == "rollout":
        title = f"Rollout through layer{'s 0-' if state.layer else ' '}{state.layer}"
    else:
        title = f"{head_title(state.result(), head)} · {state.view}" + (" · pinned" if head == state.pinned else "")
    if hi - lo < len(tokens_of(state)):
        title += f" · queries {lo}-{hi - 1} of {len(tokens_of(state))}"
    sink = None if sinks is None else sinks[head]
    return key_grid(state, title, matrix, labels, scale, colour, width, blocked, sink, shared)


def head_panel(
    state: Explorer, *, colour: bool, width: int = 80, rows: int = ROWS, shared: Frame | None = None
) -> RenderableType:
    """The head's heatmap around the query (at most ``rows`` queries), the query's row marked, and its legend; a
    pinned head beside it when both fit the width whole, else above it. Both share one colour scale, and the
    panels' frame (``shared``, by default the one of ``rows``)."""
    shared = shared or frame(state, rows)
    window = state.window(rows)
    rollout = state.view == "rollout"
    heads = [0] if rollout else [state.head] if state.pinned in (None, state.head) else [state.pinned, state.head]
    matrix = state.matrix(*window)  # (heads, rows, M)
    sinks = state.sinks(*window)  # (heads, rows), or None
    scale = scale_of([matrix[heads], *([] if sinks is None else [sinks[heads]])], SCALES[state.view])
    key = legend(scale, PRECISION, colour)
    if len(heads) == 1:
        return Group(_head_grid(state, heads[0], window, matrix[heads[0]], colour, width, scale, sinks, shared), key)
    above, below = (_head_grid(state, h, window, matrix[h], colour, width, scale, sinks, shared) for h in heads)
    if all(grid.span(len(grid.col_labels)) <= (width - GAP) // 2 for grid in (above, below)):
        table = Table.grid(padding=(0, GAP))  # both fit whole in half the width: side by side
        table.add_column(ratio=1)
        table.add_column(ratio=1)
        table.add_row(above, below)
        return Group(table, key)
    return Group(above, Text(""), below, key)


def heads_panel(state: Explorer, *, colour: bool, width: int = 80, shared: Frame | None = None) -> RenderableType:
    """The query's row in every head, the head under the cursor marked; in the rollout view, the query's
    rollout row after each layer so far. In the panels' frame (``shared``, by default the one of ``ROWS``)."""
    q = state.query
    sink = None
    if state.view == "rollout":
        rows = state.rollout().layers[:, q, :]  # (layers so far, M)
        labels = _marked([f"L{layer}" for layer in range(len(rows))], state.layer)
        blocked = None
        title = f"Query {q} '{tokens_of(state)[q]}' rolled out after each layer"
    else:
        rows = state.matrix(q, q + 1)[:, 0, :]  # (H, M)
        labels = _marked([f"H{h}" for h in range(len(rows))], state.head, state.pinned)
        mask = state.blocked(q, q + 1)
        blocked = None if mask is None else np.repeat(mask, len(rows), axis=0)
        title = f"Query {q} '{tokens_of(state)[q]}' in every head"
        sinks = state.sinks(q, q + 1)
        sink = None if sinks is None else sinks[:, 0]  # (H,)
    scale = scale_of([rows, *([] if sink is None else [sink])], SCALES[state.view])
    return key_grid(state, title, rows, labels, scale, colour, width, blocked, sink, shared or frame(state))


def change_panel(
    state: Explorer, *, colour: bool, width: int = 80, shared: Frame | None = None
) -> RenderableType | None:
    """The query's weights in the head before and after the last setting change, their difference, and how far
    the query's output moved; None before any change. In the panels' frame (``shared``, by default the one of
    ``ROWS``)."""
    change = state.change()
    if change is None:
        return None
    return _change_view(state, change, colour, width, shared or frame(state))


def _change_view(state: Explorer, change: Change, colour: bool, width: int, shared: Frame) -> RenderableType:
    labels = list(CHANGE_LABELS) if change.before is not None else [CHANGE_LABELS[1]]
    rows = np.stack([*([change.before] if change.before is not None else []), change.after])
    title = f"Since {change.label}: query {state.query} '{tokens_of(state)[state.query]}' in H{change.head}"
    scale = scale_of([rows], "weight")
    lines: list[RenderableType] = [key_grid(state, title, rows, labels, scale, colour, width, shared=shared)]
    if change.before is not None:
        delta = change.after - change.before
        j = int(np.argmax(np.abs(delta)))
        lines.append(Text(f"largest weight change: {fmt(float(delta[j]), 4)} on key {j} '{keys_of(state)[j]}'"))
    else:
        lines.append(Text(f"H{change.head} did not exist before {change.label}", style="dim"))
    lines.append(Text(f"output row of query {state.query}: moved by {fmt(change.shift, 4)} (L2), largest entry "
                      f"{fmt(change.largest, 4)}"))  # fmt: skip
    return Group(*lines)


def rollout_waiting(state: Explorer, done: int, total: int, refused: str | None = None) -> RenderableType:
    """What the head's panel says while the rollout is computed beside the app: how many blocks of queries are
    done, as a bar; or why the engine refused it."""
    through = f"layer{'s 0-' if state.layer else ' '}{state.layer}"
    if refused is not None:
        return Text(f"Rollout through {through}: not computed ({refused})", style="dim")
    share = done / total if total else 0.0
    filled = round(share * BAR)
    bar = Text("█" * filled, style="bold")
    bar.append("░" * (BAR - filled), style="dim")
    bar.append(f" {share:>4.0%}")
    what = f"{done} of {total} blocks of {BLOCK} queries" if total else "starting"
    meanwhile = Text("every key answers meanwhile; v leaves the rollout (what is computed is kept)", style="dim")
    return Group(Text(f"Rollout through {through}: computing every query's weights, {what}"), bar, meanwhile)


def trace_panel(state: Explorer) -> RenderableType:
    """The trace of the query in the head under the cursor, as `attnx trace` prints it."""
    return trace_view(state.trace, 4, 8)


KEYS = (
    ("← →", "previous / next query (or click a token)"),
    ("g", "go to a query by its position"),
    ("/", "find a token"),
    ("[ ]", "previous / next head"),
    ("{ }", "previous / next layer (a model's, in the stack under the cursor)"),
    ("k", "encoder self → decoder causal self → cross-attention (an encoder-decoder)"),
    ("p", "pin the head (again: unpin)"),
    ("v", "weights, scaled scores, value shares, rollout (an encoder-decoder: the encoder's)"),
    ("h", "heads: the next count that divides d_model (an input)"),
    ("s", "scale: sqrt_dk, sqrt_d_model, none (an input)"),
    ("l", "layout: contiguous or interleaved (an input)"),
    ("c", "causal mask on or off (an input)"),
    ("e", "export the screen as SVG"),
    ("?", "these keys (again, or Esc: close)"),
    ("q", "quit"),
)


def keys_panel() -> RenderableType:
    """The keys, one per line."""
    return Text("\n".join(f"{key:>5}  {what}" for key, what in KEYS))
