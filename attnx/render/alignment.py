"""`attnx align`: which source token each target token looks at, as a table over a heatmap, and as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.alignment import Alignment
from attnx.render.heatmap import HeatScale, heatmap, legend
from attnx.render.layout import add_columns, compact_table
from attnx.render.numbers import fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tables import WRITTEN
from attnx.text import label


def averaged_over(found: Alignment) -> str:
    """``decoder layers 0-2 × heads 0-2`` (or the ones chosen, listed)."""

    def listed(items: tuple[int, ...]) -> str:
        whole = items == tuple(range(items[0], items[0] + len(items)))
        return f"{items[0]}-{items[-1]}" if whole and len(items) > 2 else ", ".join(map(str, items))

    layer_word = "layer" if len(found.layers) == 1 else "layers"
    head_word = "head" if len(found.heads) == 1 else "heads"
    return f"cross-attention of decoder {layer_word} {listed(found.layers)} × {head_word} {listed(found.heads)}"


def alignment_view(found: Alignment, precision: int, *, colour: bool, max_rows: int | None = None) -> RenderableType:
    """Each target token with the source token it attends most and that weight, then the mean weights drawn."""
    marked = "; * written by the model" if found.written else ""
    title = Text(f"The source token each target token attends most: {averaged_over(found)}, mean{marked}")
    targets = [f"{token}{WRITTEN}" if row in found.written else token for row, token in enumerate(found.target_tokens)]
    table = compact_table()
    add_columns(table, "#", numeric=True)
    add_columns(table, "target", numeric=False)
    add_columns(table, "#", numeric=True)
    add_columns(table, "source", numeric=False)
    add_columns(table, "weight")
    for row, column in enumerate(found.best):
        weight = fmt(float(found.weights[row, column]), precision)
        table.add_row(str(row), Text(label(targets[row])), str(int(column)),
                      Text(label(found.source_tokens[column])), weight)  # fmt: skip
    scale = HeatScale(float(found.weights.max()) if found.weights.size else 0.0, "mean weight")
    grid = heatmap("target × source, mean weight", found.weights, targets,
                   list(found.source_tokens), precision, scale=scale, colour=colour, max_rows=max_rows)  # fmt: skip
    return Group(title, table, grid, legend(scale, precision, colour), heads_table(found, precision))


TOP_HEADS = 8  # heads the table lists, the most monotonic first


def heads_table(found: Alignment, precision: int) -> RenderableType:
    """The heads whose argmax walks the source most in order (``monotonicity``), with their coverage and entropy."""
    ranked = sorted(found.per_head, key=lambda h: 2.0 if h.monotonicity is None else -h.monotonicity)[:TOP_HEADS]
    table = compact_table()
    add_columns(table, "head", numeric=False)
    add_columns(table, "monotonic", "coverage", "entropy")
    for head in ranked:
        mono = "—" if head.monotonicity is None else fmt(head.monotonicity, precision)
        table.add_row(f"L{head.layer} H{head.head}", mono, fmt(head.coverage, precision), fmt(head.entropy, precision))
    words = (
        "heads that align, the most monotonic first: Spearman of target position and the source position it "
        "weighs most; coverage, the share of source tokens some target token weighs most; entropy ÷ log(source)"
    )
    return Group(Text(words, style="dim"), table)


def alignment_to_dict(found: Alignment, model: str) -> dict[str, Any]:
    """The JSON object of `attnx align` (``format_version`` first; layers, heads and tokens from 0)."""
    return {
        "format_version": FORMAT_VERSION,
        "model": model,
        "source_tokens": list(found.source_tokens),
        "target_tokens": list(found.target_tokens),
        "written": list(found.written),
        "layers": list(found.layers),
        "heads": list(found.heads),
        "alignment": [
            {"target": row, "source": int(column), "weight": float(found.weights[row, column])}
            for row, column in enumerate(found.best)
        ],
        "mean_weights": to_plain(found.weights),
        "per_head": [
            {
                "layer": h.layer,
                "head": h.head,
                "monotonicity": h.monotonicity,
                "coverage": h.coverage,
                "entropy": h.entropy,
            }
            for h in found.per_head
        ],
    }
