"""`attnx detect`: heads found over many sequences, as a layer × head grid, a table with counts, JSON and JSONL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.detect import Detection, TextRecord
from attnx.core.measures import MEASURES
from attnx.render.heads import NONE, cell, plain_number
from attnx.render.heatmap import HeatScale, legend
from attnx.render.layout import Headline, add_columns, compact_table
from attnx.render.model import CODES, coded_cell, codes_line, head_grid, model_keys
from attnx.render.serialize import FORMAT_VERSION, dumps

MEANINGS = {name: measure.description for name, measure in MEASURES.items()}


def detection_view(
    view: Detection, measure: str, precision: int, *, colour: bool, max_rows: int | None = None
) -> RenderableType:
    """The grid (each head's label code over ``measure``'s mean), then every labelled head with its counts."""
    grid = view.grid(measure)
    scale = HeatScale(1.0, measure)
    rows = [
        [coded_cell(CODES.get(view.label(layer, h)[0] or ""), grid[layer, h], scale, precision, colour=colour)
         for h in range(view.heads)]
        for layer in range(view.layers)
    ]  # fmt: skip
    plural = "s" if view.sequences != 1 else ""
    where = f" · {view.stack} {view.kind}-attention" if view.stacks > 1 else ""
    about = (f"{view.model} ({view.architecture}){where} · {view.layers} layers × {view.heads} heads · "
             f"{view.source}: {view.sequences} sequence{plural}, {view.tokens:,} tokens")  # fmt: skip
    rule = view.rule
    meanings = (
        [Text("; ".join(f"{name}: {MEANINGS[name]}" for name in rule.measures), style="dim")]
        if rule.command == "cross"
        else []
    )
    return Group(
        Headline(about),
        Text(f"Heads found: each head's label over its {measure} ({MEANINGS[measure]})", style="bold"),
        head_grid(view.heads, rows),
        legend(scale, precision, colour),
        Text(
            f"labels: {rule.words} ({rule.rules_text()}); {codes_line(rule.labels)}; {NONE} none",
            style="dim",
        ),
        *meanings,
        found_table(view, precision, max_rows),
    )


def found_table(view: Detection, precision: int, max_rows: int | None = None) -> RenderableType:
    """One row per labelled head, highest score first (at most ``max_rows``): its label, the score's mean and
    spread across sequences, and the positions and sequences it rests on."""
    found = [(layer, h, *view.label(layer, h)) for layer in range(view.layers) for h in range(view.heads)]
    labelled = sorted(((layer, h, label, score) for layer, h, label, score in found if label is not None),
                      key=lambda row: -(row[3] or 0.0))  # fmt: skip
    if not labelled:
        return Text("no head reaches a label's threshold", style="dim")
    table = compact_table("Labelled heads (mean over every scored position; spread: std of the per-sequence means)")
    add_columns(table, "head", "label", numeric=False)
    add_columns(table, "mean", "spread", "positions", "sequences")
    shown = labelled if max_rows is None else labelled[:max_rows]
    for layer, h, label, score in shown:
        tally = view.label_tally(layer, h)
        if tally is None:  # pragma: no cover - a labelled head has the tally of its label
            continue
        table.add_row(f"L{layer}H{h}", label, cell(score, precision), cell(tally.spread, precision),
                      f"{tally.count:,}", str(len(tally.per_text)))  # fmt: skip
    more = len(labelled) - len(shown)
    note = [Text(f"{more} more labelled heads not shown (--rows all shows them)", style="dim")] if more else []
    return Group(table, *note)


def _tally(view: Detection, layer: int, h: int, name: str) -> dict[str, Any]:
    tally = view.tallies[layer][h][name]
    return {"mean": tally.mean, "spread": tally.spread, "count": tally.count, "sequences": len(tally.per_text)}


def detection_to_dict(view: Detection) -> dict[str, Any]:
    """The JSON object of `attnx detect` (``format_version`` first; layers and heads from 0): ``stack`` and
    ``attention`` say which attention of the model, each head's measures are its rule's (keyed by name)."""
    return {
        **model_keys(view.model, view.architecture, view.layers, view.heads, source=view.source,
                     sequences=view.sequences, tokens=view.tokens),
        "stack": view.stack,
        "attention": view.kind,
        "thresholds": view.rule.thresholds(),
        "layers": [
            {
                "layer": layer,
                "heads": [
                    {"head": h, "label": view.label(layer, h)[0], "label_score": view.label(layer, h)[1],
                     "label_count": view.label_count(layer, h),
                     **{name: _tally(view, layer, h, name) for name in view.rule.measures}}
                    for h in range(view.heads)
                ],
            }
            for layer in range(view.layers)
        ],
    }  # fmt: skip


def records_jsonl(records: Sequence[TextRecord]) -> Iterator[str]:
    """`attnx detect --format jsonl`: one line per sequence, its own per-layer, per-head means."""
    for record in records:
        line = {
            "format_version": FORMAT_VERSION,
            "record": "sequence",
            "index": record.index,
            "tokens": list(record.tokens),
            "layers": [[{name: plain_number(v) for name, v in head.items()} for head in layer]
                       for layer in record.layers],
        }  # fmt: skip
        yield dumps(line)
