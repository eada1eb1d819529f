"""`attnx rollout`: one query's attention rolled out through the layers, as a heatmap, a table and JSON."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.measures import Rollout
from attnx.render.heatmap import HeatScale, heatmap, legend
from attnx.render.layout import add_columns, compact_table
from attnx.render.numbers import fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.text import label

TOP_KEYS = 8  # keys the table lists, largest rollout first
RULE = "rollout = A_l ··· A_0 with A = (mean of the heads + I) / 2, rows renormalised"


def rollout_view(
    view: Rollout, row: int, precision: int, *, colour: bool, max_rows: int | None = None, stack: str | None = None
) -> RenderableType:
    """The query's rollout after each layer (rows L0 … from 0) over the keys, then its largest keys at the end;
    ``stack``, the stack rolled out where the model has several (an encoder-decoder's encoder), named in the
    title."""
    rows = view.layers[:, row, :]  # (L, M)
    scale = HeatScale(float(rows.max()) if rows.size else 0.0, "rollout")
    of = f" {stack}" if stack else ""
    title = f"Attention rollout of query {row} {label(view.tokens[row])!r} after each{of} layer"
    grid = heatmap(title, rows, [f"L{layer}" for layer in range(len(rows))], list(view.tokens), precision,
                   scale=scale, colour=colour, max_rows=max_rows)  # fmt: skip
    final = view.final[row]
    table = compact_table()
    add_columns(table, "#", numeric=True)
    add_columns(table, "key", numeric=False)
    add_columns(table, "rollout")
    for j in np.argsort(-final, kind="stable")[:TOP_KEYS]:
        table.add_row(str(int(j)), Text(label(view.tokens[j])), fmt(float(final[j]), precision))
    largest = Text(f"after all {len(rows)}{of} layers, the keys that reach it most:")
    return Group(Text(RULE, style="dim"), grid, legend(scale, precision, colour), largest, table)


def rollout_to_dict(view: Rollout, row: int, stack: str | None = None) -> dict[str, Any]:
    """The JSON object of `attnx rollout` (``format_version`` first; layers, queries and keys from 0); ``stack``
    where the model has several (the encoder's, rolled out)."""
    return {
        "format_version": FORMAT_VERSION,
        **({"stack": stack} if stack else {}),
        "tokens": list(view.tokens),
        "query": row,
        "by_layer": to_plain(view.layers[:, row, :]),
        "rollout": to_plain(view.final),
    }
