"""Rich tables for `attnx run`: per-head Q/K/V slices, scores, scaled scores and weights, outputs, averages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import TypedDict

import numpy as np
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text

from attnx.analysis.ablation import Ablation
from attnx.core.result import AttentionResult, row_maxima
from attnx.core.tensors import AVERAGE_WEIGHTS, HEAD_OUTPUTS, SCALED, SCORES, WEIGHTS, K, Q, V
from attnx.render.colours import EMPHASIS
from attnx.render.fitted import FittedGrid, row_lookup
from attnx.render.layout import Headline
from attnx.render.numbers import MASKED, MASKED_NOTE, MASKED_STYLE, fmt

TOP_STYLE = EMPHASIS  # every cell that is its row's maximum, ties included (``row_maxima``)
SINK_LABEL = "sink"  # the column of a learned sink's share, after the keys


class Section(str, Enum):
    """The parts of a run that `--show` can pick, in the order they are printed."""

    q = "q"
    k = "k"
    v = "v"
    scores = "scores"
    scaled = "scaled"
    weights = "weights"
    heads = "heads"
    output = "output"
    projected = "projected"
    ablation = "ablation"
    average = "average"


ALL_SECTIONS: tuple[Section, ...] = tuple(Section)
# What `--show` prints when it is not given: every section but the Q, K and V slices.
DEFAULT_SECTIONS: tuple[Section, ...] = tuple(s for s in Section if s not in (Section.q, Section.k, Section.v))


WRITTEN = "*"  # after a token the model wrote itself (--generate), in every row and column label


def shown_tokens(result: AttentionResult) -> tuple[list[str], list[str]]:
    """The query and key labels a view shows: the tokens, those the model wrote itself (``--generate``: the
    ``origin``'s ``written`` positions) followed by ``WRITTEN``, among the keys too where they are the queries' own
    stream (a decoder's self-attention)."""
    written = set(() if result.origin is None else result.origin.written)
    rows = [f"{token}{WRITTEN}" if at in written else token for token, at in zip(result.tokens,
            result.query_positions, strict=True)]  # fmt: skip
    keys = list(result.key_tokens)
    if written and result.origin is not None and result.origin.attention != "cross":  # keys of the same stream
        keys = [f"{token}{WRITTEN}" if at in written else token for at, token in enumerate(keys)]
    return rows, keys


def matrix_table(
    title: str,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    precision: int,
    *,
    emphasise_row_max: bool = False,
    blocked: np.ndarray | None = None,
    blocked_numbers: bool = False,
    footer: tuple[str, Sequence[float]] | None = None,
    max_rows: int | None = None,
    matrix_rows: Sequence[int] | None = None,
) -> FittedGrid:
    """One labelled matrix, as many columns as the width holds.

    With ``emphasise_row_max`` every cell that is its row's maximum is drawn in EMPHASIS, ties included
    (``row_maxima`` says what a tie is). Cells where ``blocked`` is True (masked keys) are shown as
    the dim ``MASKED`` marker, or, with ``blocked_numbers`` (scores, computed before the mask), as
    their number, dim. ``footer`` is a bold row after a blank line: a label and one value per
    column. Past ``max_rows`` rows (None: no limit) the first and last rows are shown. When
    ``matrix`` (and ``blocked``) hold only some rows of ``row_labels``, computed alone,
    ``matrix_rows`` names them, and they are the rows shown.
    """
    top = row_maxima(matrix) if emphasise_row_max else None
    local = row_lookup(matrix_rows)

    def cell(k: int, j: int) -> Text:
        masked = blocked is not None and bool(blocked[k, j])
        if masked and not blocked_numbers:
            return Text(MASKED, style=MASKED_STYLE)
        style = MASKED_STYLE if masked else TOP_STYLE if top is not None and top[k, j] else ""
        return Text(fmt(float(matrix[k, j]), precision), style=style)

    def column(j: int, rows: Sequence[int]) -> list[Text]:
        return [cell(k, j) for k in map(local, rows)]

    last = None if footer is None else (footer[0], [Text(fmt(float(v), precision), style="bold") for v in footer[1]])
    return FittedGrid(title, row_labels, col_labels, column, footer=last, max_rows=max_rows, rows=matrix_rows)


def _slice_tables(result: AttentionResult, head: int, sections: set[Section], precision: int,
                  max_rows: int | None) -> list[RenderableType]:  # fmt: skip
    """The query, key and value slices head ``head`` reads, as `--show q,k,v` asks.

    K and V belong to the K/V head: with grouped heads they are shown under the first head of the
    group, and the others say where to find them.
    """
    tables: list[RenderableType] = []
    if Section.q in sections:
        cols = result.head_columns(head)
        title = f"Q_h (columns {describe_columns(cols)} of Q)"
        tables.append(matrix_table(title, result.tensor(Q)[head], shown_tokens(result)[0], [f"d{c}" for c in cols],
                                   precision,
                                   max_rows=max_rows))  # fmt: skip
    kv = result.kv_head(head)
    wanted = [(name, letter) for name, letter in ((Section.k, "K"), (Section.v, "V")) if name in sections]
    if wanted and head != result.group_of(kv)[0]:
        shown = ", ".join(f"{letter}_h" for _, letter in wanted)
        tables.append(Text(f"{shown}: those of K/V head {kv}, shown under head {result.group_of(kv)[0]}",
                           style="dim"))  # fmt: skip
        return tables
    cols = result.kv_columns(kv)
    owner = f" of K/V head {kv}" if result.kv_heads != result.heads else ""
    for _, letter in wanted:
        title = f"{letter}_h{owner} (columns {describe_columns(cols)} of {letter})"
        matrix = result.tensor(K if letter == "K" else V)[kv]
        tables.append(matrix_table(title, matrix, shown_tokens(result)[1], [f"d{c}" for c in cols], precision,
                                   max_rows=max_rows))  # fmt: skip
    return tables


class _Rows(TypedDict):
    """The rows a matrix table shows (``matrix_table``'s ``max_rows`` and ``matrix_rows``)."""

    max_rows: int | None
    matrix_rows: tuple[int, ...] | None


def _head_sections(
    result: AttentionResult,
    head: int,
    sections: set[Section],
    precision: int,
    max_rows: int | None,
) -> list[RenderableType]:
    rows, keys = shown_tokens(result)
    held, matrix_rows = result, result.matrix_rows
    blocked = None if held.mask is None else ~held.mask
    where = _Rows(max_rows=max_rows, matrix_rows=matrix_rows)
    tables = _slice_tables(result, head, sections, precision, max_rows)
    if Section.scores in sections:
        tables.append(matrix_table("raw scores Q·Kᵀ", held.tensor(SCORES)[head], rows, keys, precision, blocked=blocked,
                                   blocked_numbers=True, **where))  # fmt: skip
    if Section.scaled in sections:
        rule = f"× {fmt(result.scale, max(precision, 4))}" + (" + bias" if result.score_bias is not None else "")
        if result.settings.softcap is not None:
            rule += f", soft-capped at {result.settings.softcap:g}"
        title = f"scaled scores ({rule})"
        tables.append(matrix_table(title, held.tensor(SCALED)[head], rows, keys, precision, blocked=blocked,
                                   blocked_numbers=True, **where))  # fmt: skip
    if Section.weights in sections:
        weights, labels, hidden = with_sink(result, head, held.tensor(WEIGHTS)[head], keys, blocked)
        title = "weights (softmax)" if labels is keys else "weights (softmax over the keys and the head's sink)"
        tables.append(matrix_table(title, weights, rows, labels, precision, emphasise_row_max=True, blocked=hidden,
                                   **where))  # fmt: skip
    if Section.heads in sections:
        cols = [f"d{c}" for c in result.head_columns(head)]
        outputs = result.tensor(HEAD_OUTPUTS)[head]
        tables.append(matrix_table("head output (weights · V)", outputs, rows, cols, precision, max_rows=max_rows))
    return tables


def with_sink(
    result: AttentionResult, head: int, weights: np.ndarray, keys: Sequence[str], blocked: np.ndarray | None
) -> tuple[np.ndarray, Sequence[str], np.ndarray | None]:
    """Head ``head``'s ``weights`` ``[query, key]`` (the rows the result's matrices hold), its key labels and
    blocked cells, with its learned sink's share as one more column (``SINK_LABEL``) where the result has sinks;
    as they are otherwise."""
    if result.sink_weights is None:
        return weights, keys, blocked
    held = result.sink_weights[head] if result.matrix_rows is None else result.sink_weights[head][result.matrix_rows,]
    joined = np.concatenate([weights, held[:, None]], axis=1)  # (N, M + 1)
    open_ = None if blocked is None else np.concatenate([blocked, np.zeros((len(blocked), 1), dtype=bool)], axis=1)
    return joined, [*keys, SINK_LABEL], open_


def describe_columns(cols: range) -> str:
    """``range(0, 2)`` -> ``"0-1"``; ``range(1, 8, 2)`` -> ``"1,3,5,7"``."""
    if cols.step == 1:
        return f"{cols.start}-{cols.stop - 1}" if len(cols) > 1 else str(cols.start)
    shown = list(cols) if len(cols) <= 6 else [*cols[:3], "...", cols[-1]]
    return ",".join(map(str, shown))


def head_title(result: AttentionResult, head: int) -> str:
    """``"Head 0 · columns 0-1 · d_k = 2"``: heads are numbered from 0, as everywhere in attnx.

    With grouped K/V heads the title also says which K/V head this head reads and who shares it.
    """
    kv = result.kv_head(head)
    group = result.group_of(kv) if result.kv_heads != result.heads else range(0)
    return head_heading(head, result.head_columns(head), result.d_k, kv, group, head in result.dropped_heads)


def head_heading(head: int, columns: range, d_k: int, kv_head: int, group: Sequence[int], dropped: bool) -> str:
    """The one wording of a head's heading, in tables and traces: its columns, d_k, the K/V head it shares
    with ``group`` (none without grouped K/V heads) and whether it was dropped."""
    title = f"Head {head} · columns {describe_columns(columns)} · d_k = {d_k}"
    if len(group) > 1:
        title += f" · K/V head {kv_head} (shared by heads {group[0]}-{group[-1]})"
    elif group:
        title += f" · K/V head {kv_head}"
    return title + (" · DROPPED" if dropped else "")


def run_view(
    result: AttentionResult,
    sections: Iterable[Section],
    precision: int,
    *,
    max_rows: int | None = None,
    shift: Ablation | None = None,
    heads: Sequence[int] | None = None,
) -> RenderableType:
    """Everything `attnx run` prints, as one renderable; tables of more than ``max_rows`` rows show both ends.

    ``shift`` is the ablation measured on the result (``attnx.analysis.ablation``), when heads were dropped.
    ``heads`` (None: every head) are the heads whose own tables are shown; the tables of the whole layer (the
    output, the average) come from every head whatever it holds, and their titles say so.

    A result whose matrices hold some rows only (``matrix_rows``) shows those rows.
    """
    chosen = set(sections)
    parts: list[RenderableType] = []
    rows, keys = shown_tokens(result)
    per_head = {Section.q, Section.k, Section.v, Section.scores, Section.scaled, Section.weights, Section.heads}
    if chosen & per_head:
        for head in range(result.heads) if heads is None else heads:
            parts.append(Rule(head_title(result, head), align="left", style="dim"))
            # Stacked, not laid out with rich.columns.Columns: measuring tables side by side doubles
            # the rendering time, the largest part of `attnx run`'s start-up after imports.
            for i, table in enumerate(_head_sections(result, head, chosen, precision, max_rows)):
                parts.extend([Text()] * (i > 0) + [table])
    if Section.output in chosen:
        cols = [f"d{c}" for c in range(result.d_model)]
        title = f"Concatenated output ({result.heads} head{'s' if result.heads > 1 else ''} × d_k {result.d_k})"
        parts.append(Rule(style="dim"))
        parts.append(matrix_table(title, result.output, rows, cols, precision, max_rows=max_rows))
    if Section.projected in chosen and result.projected is not None:
        cols = [f"d{c}" for c in range(result.projected.shape[1])]
        parts.append(Rule(style="dim"))
        parts.append(matrix_table("Projected output (output · W_o + b_o)", result.projected, rows, cols,
                                  precision, max_rows=max_rows))  # fmt: skip
    if Section.ablation in chosen and shift is not None:
        parts.append(Rule(style="dim"))
        parts.append(ablation_table(shift, rows, precision, max_rows=max_rows))
    if Section.average in chosen:
        title = f"Weights averaged over {result.heads} head{'s' if result.heads > 1 else ''}"
        parts.append(Rule(style="dim"))
        held, matrix_rows = result, result.matrix_rows
        blocked = None if held.mask is None else ~held.mask
        parts.append(matrix_table(title, held.tensor(AVERAGE_WEIGHTS), rows, keys, precision,
                                  emphasise_row_max=True, blocked=blocked, max_rows=max_rows,
                                  matrix_rows=matrix_rows))  # fmt: skip
    return Group(*parts)


def ablation_table(
    shift: Ablation, tokens: Sequence[str], precision: int, *, max_rows: int | None = None
) -> FittedGrid:
    """How far each token's output moved when the dropped heads were zeroed."""
    dropped = ", ".join(str(h) for h in shift.dropped_heads)
    title = f"Ablation · head{'s' if len(shift.dropped_heads) > 1 else ''} {dropped} dropped"
    return matrix_table(title, shift.per_token[:, None], tokens, [f"L2 shift of {shift.compared}"], precision,
                        footer=("all", [shift.overall]), max_rows=max_rows)  # fmt: skip


SCALE_LABELS = {"sqrt_dk": "1/√d_k", "sqrt_d_model": "1/√d_model", "none": "none", "number": "given"}


def pooling(result: AttentionResult) -> str:
    """``K/V heads mean-pooled 4 → 2`` when a ``--kv-heads`` override pooled the K/V heads, else ``""``."""
    before = result.kv_pooled_from
    return f"K/V heads mean-pooled {before} → {result.kv_heads}" if before else ""


def summary_line(result: AttentionResult, source: str) -> Headline:
    """Two to four lines naming the problem: its source; sizes, scale and engine; masks, layout, pooling (a long
    source cut in its middle to the width, ``Headline``).

    With a mask, the last line says how masked cells look (``MASKED_NOTE``).
    """
    n, m = len(result.tokens), len(result.key_tokens)
    sizes = f"{n} tokens" if result.tokens == result.key_tokens else f"{n} queries × {m} keys"
    heads = f"{result.heads} head{'s' if result.heads > 1 else ''} × d_k {result.d_k}"
    if result.kv_heads != result.heads:
        heads += f" ({result.kv_heads} K/V head{'s' if result.kv_heads > 1 else ''})"
    lines = [
        f"{source} · {result.engine} {result.dtype} {result.device}",
        f"{sizes} · d_model {result.d_model} · {heads} · scale {SCALE_LABELS[result.scale_mode]} = "
        f"{fmt(result.scale, 4)}",
    ]
    extras = []
    pooled = pooling(result)
    if pooled:
        kind = "multi-query" if result.kv_heads == 1 else "grouped-query"
        extras.append(f"{pooled} ({kind} attention)")
    if result.layout != "contiguous":
        extras.append(f"layout {result.layout}")
    extras += result.settings.described()
    if result.blocked_pairs is not None:
        extras.append(f"mask: {result.blocked_pairs} of {n * m} query-key pairs blocked ({MASKED})")
    if result.parameters:
        extras.append(f"{result.parameters:,} parameters")
    if extras:
        lines.append(" · ".join(extras))
    if result.blocked_pairs:
        lines.append(MASKED_NOTE)
    return Headline("\n".join(lines))
