"""Rich tables for `attnx run`: per-head scores, scaled scores and weights, outputs, averages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum

import numpy as np
from rich import box
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attnx.render.numbers import fmt
from attnx.result import AttentionResult


class Section(str, Enum):
    """The parts of a run that `--show` can pick, in the order they are printed."""

    scores = "scores"
    scaled = "scaled"
    weights = "weights"
    heads = "heads"
    output = "output"
    average = "average"


ALL_SECTIONS: tuple[Section, ...] = tuple(Section)


def matrix_table(
    title: str,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    precision: int,
    *,
    emphasise_row_max: bool = False,
) -> Table:
    """One labelled matrix; with ``emphasise_row_max`` the largest value of each row is bold."""
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        min_width=len(title),
    )
    table.add_column("", style="bold cyan", no_wrap=True)
    for label in col_labels:
        table.add_column(label, justify="right", no_wrap=True, header_style="bold cyan")
    for label, row in zip(row_labels, matrix, strict=True):
        top = int(np.argmax(row)) if emphasise_row_max and row.size else -1
        cells = [
            Text(fmt(float(value), precision), style="bold yellow" if j == top else "") for j, value in enumerate(row)
        ]
        table.add_row(label, *cells)
    return table


def _head_sections(result: AttentionResult, head: int, sections: set[Section], precision: int) -> list[Table]:
    rows, keys = result.tokens, result.key_tokens
    tables = []
    if Section.scores in sections:
        tables.append(matrix_table("raw scores Q·Kᵀ", result.scores[head], rows, keys, precision))
    if Section.scaled in sections:
        title = f"scaled scores (× {fmt(result.scale, precision)})"
        tables.append(matrix_table(title, result.scaled[head], rows, keys, precision))
    if Section.weights in sections:
        tables.append(
            matrix_table("weights (softmax)", result.weights[head], rows, keys, precision, emphasise_row_max=True)
        )
    if Section.heads in sections:
        cols = [f"d{c}" for c in result.head_columns(head)]
        tables.append(matrix_table("head output (weights · V)", result.head_outputs[head], rows, cols, precision))
    return tables


def head_title(result: AttentionResult, head: int) -> str:
    """``"Head 1 · columns 0-1 · d_k = 2"``: heads are numbered from 1 for people."""
    cols = result.head_columns(head)
    return f"Head {head + 1} · columns {cols.start}-{cols.stop - 1} · d_k = {result.d_k}"


def run_view(result: AttentionResult, sections: Iterable[Section], precision: int) -> RenderableType:
    """Everything `attnx run` prints, as one renderable."""
    chosen = set(sections)
    parts: list[RenderableType] = []
    per_head = {Section.scores, Section.scaled, Section.weights, Section.heads}
    if chosen & per_head:
        for head in range(result.heads):
            parts.append(Rule(head_title(result, head), align="left", style="dim"))
            parts.append(Columns(_head_sections(result, head, chosen, precision), padding=(1, 4)))
    if Section.output in chosen:
        cols = [f"d{c}" for c in range(result.d_model)]
        title = f"Concatenated output ({result.heads} head{'s' if result.heads > 1 else ''} × d_k {result.d_k})"
        parts.append(Rule(style="dim"))
        parts.append(matrix_table(title, result.output, result.tokens, cols, precision))
    if Section.average in chosen:
        title = f"Weights averaged over {result.heads} head{'s' if result.heads > 1 else ''}"
        parts.append(Rule(style="dim"))
        parts.append(
            matrix_table(
                title, result.average_weights, result.tokens, result.key_tokens, precision, emphasise_row_max=True
            )
        )
    return Group(*parts)


def summary_line(result: AttentionResult, source: str) -> Text:
    """Two lines naming the problem: its source, then sizes, scale and engine."""
    return Text(
        f"{source}\n{len(result.tokens)} tokens · d_model {result.d_model} · {result.heads} heads × d_k {result.d_k}"
        f" · scale 1/√{result.d_k} = {fmt(result.scale, 4)} · {result.engine} {result.dtype} {result.device}",
        style="dim",
    )
