"""Showing two sides compared (`attnx diff A B`): tensor by tensor, as tables, heatmaps and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnx.analysis.diff import Comparison, Location, Side, TensorComparison
from attnx.core.tensors import TENSORS, TensorName
from attnx.render.colours import FAIL, PASS, WARNING
from attnx.render.formats import TENSOR_AXES
from attnx.render.heatmap import heatmap, legend, scale_of
from attnx.render.layout import FirstFit, add_columns, compact_table, under_name, verdict
from attnx.render.location import locate
from attnx.render.numbers import MASKED_NOTE, fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tolerance import diff_to_dict, sci, tolerance_text

DIFF_KEYS = ("max_abs", "max_rel", "worst_index", "rtol", "atol")  # null where a tensor could not be compared


def located(name: TensorName, index: Sequence[int], side: Side) -> str:
    """Where an element of ``side``'s tensor ``name`` sits (``attnx.render.location.locate``): ``head 0 · query 1
    'cat' · key 0 'The'``."""
    return locate(name, index, side.tokens, side.key_tokens)


def shape_text(shape: tuple[int, ...] | None) -> str:
    """``(2,5,5)``, or ``—`` for a side that lacks the tensor."""
    return "—" if shape is None else "(" + ",".join(map(str, shape)) + ")"


def shapes(row: TensorComparison) -> str:
    """``(2,5,5)`` when both sides agree, else ``(2,5,5) vs (4,5,5)`` (``—`` for a missing side)."""
    a, b = shape_text(row.shape_a), shape_text(row.shape_b)
    return a if a == b else f"{a} vs {b}"


SIDE_KINDS = {"input": "input, computed here", "result": "saved result"}


def side_line(label: str, side: Side) -> str:
    """``A: x.yaml (input, computed here, float64)``; a bare array says what its shape was read as."""
    if side.kind == "array":
        (name,) = side.tensors
        axes = ", ".join(TENSORS[name].axes)
        what = f"one array, read as {name} [{axes}]"
    else:
        what = SIDE_KINDS[side.kind]
    return f"{label}: {side.source} ({what}, {side.dtype})"


def skipped_line(comparison: Comparison) -> str | None:
    """``not compared: scores, scaled (only in B)``, or None when both sides hold the same tensors."""
    if not comparison.skipped:
        return None
    groups: dict[str, list[str]] = {}
    for name, reason in comparison.skipped:
        groups.setdefault(reason, []).append(name)
    return "not compared: " + "; ".join(f"{', '.join(names)} ({reason})" for reason, names in groups.items())


def pass_cell(row: TensorComparison) -> Text:
    """The verdict cell of one tensor's row."""
    return Text("pass", style=PASS) if row.passed else Text("FAIL", style=FAIL)


def tolerances(comparison: Comparison) -> set[tuple[float, float]]:
    """The distinct (rtol, atol) pairs the compared tensors were held to."""
    return {(r.diff.tolerance.rtol, r.diff.tolerance.atol) for r in comparison.rows if r.diff is not None}


def comparison_table(comparison: Comparison, *, stacked: int = 0) -> Table:
    """One row per tensor: shape, max abs and rel difference, where the largest is, verdict.

    Tolerances get columns of their own only where they differ between tensors (float32 scales
    atol by each tensor's magnitude); otherwise ``comparison_view`` states them once. For narrow
    terminals, ``stacked`` 1 puts where the largest difference is under the tensor's name instead
    of in a column of its own, and ``stacked`` 2 the tolerances too: that column of text wraps,
    the numbers keep their width (see ``FirstFit``).
    """
    per_row = len(tolerances(comparison)) > 1
    tolerance_columns = per_row and stacked < 2
    table = compact_table()
    add_columns(table, "tensor · largest at" if stacked else "tensor", numeric=False)
    add_columns(table, "shape", "max abs", "max rel", *(("rtol", "atol") if tolerance_columns else ()))
    if not stacked:
        add_columns(table, "largest at", numeric=False)
    add_columns(table, "verdict", numeric=False)
    for row in comparison.rows:
        d = row.diff
        if d is None:  # the problem's first words; the shape column shows the shapes
            numbers = [""] * (4 if tolerance_columns else 2)
            at = Text((row.problem or "").partition(":")[0], style=WARNING)
        else:
            numbers = [sci(d.max_abs), sci(d.max_rel)]
            rtol, atol = tolerance_text(d.tolerance.rtol), tolerance_text(d.tolerance.atol)
            if tolerance_columns:
                numbers += [rtol, atol]
            where = located(row.name, row.largest[0].index, comparison.a) if row.largest else ""
            at = Text(f"at {where}" if stacked and where else where)
            if per_row and not tolerance_columns:
                at.append(f"{chr(10) if where else ''}rtol {rtol} · atol {atol}", style="dim")
        if stacked:
            name = under_name(row.name, at) if at.plain else Text(row.name)
            table.add_row(name, shapes(row), *numbers, pass_cell(row))
        else:
            table.add_row(row.name, shapes(row), *numbers, at, pass_cell(row))
    return table


def largest_table(comparison: Comparison, precision: int) -> Table | None:
    """The largest differences of every tensor beyond tolerance (None when none is)."""
    failing = [row for row in comparison.rows if row.diff is not None and not row.passed]
    if not failing:
        return None
    table = compact_table("Largest differences")
    add_columns(table, "tensor", "at", numeric=False)
    add_columns(table, "A", "B", "|A − B|")
    for row in failing:
        for n, loc in enumerate(row.largest):
            table.add_row(row.name if n == 0 else "", Text(located(row.name, loc.index, comparison.a)),
                          fmt(loc.a, precision), fmt(loc.b, precision), sci(loc.abs_diff))  # fmt: skip
    return table


def delta_heatmaps(
    comparison: Comparison, precision: int, *, colour: bool, max_rows: int | None = None
) -> RenderableType:
    """Per head (from 0), ``|A − B|`` of the weights as a heatmap, with its legend; a pair both sides mask is
    drawn as `run` draws a masked cell."""
    delta = comparison.weight_delta
    if delta is None:
        return Text("no heatmap: the weights are missing on one side or differ in shape", style="dim")
    scale = scale_of([delta], name="|A − B| of weights")
    a = comparison.a
    rows = a.tokens or [str(i) for i in range(delta.shape[1])]
    keys = a.key_tokens or [str(j) for j in range(delta.shape[2])]
    grids = [
        heatmap(f"Head {h} · |A − B| of weights", delta[h], rows, keys, precision, scale=scale, colour=colour,
                blocked=comparison.masked, max_rows=max_rows)
        for h in range(delta.shape[0])
    ]  # fmt: skip
    parts: list[RenderableType] = [Columns(grids, padding=(1, 4)), legend(scale, precision, colour)]
    if comparison.masked is not None and comparison.masked.any():
        parts.append(Text(MASKED_NOTE.partition(";")[0], style="dim"))
    return Group(*parts)


def comparison_view(
    comparison: Comparison,
    precision: int,
    *,
    heatmap: bool = False,
    colour: bool = True,
    max_rows: int | None = None,
) -> RenderableType:
    """Everything `attnx diff A B` prints: the sides, the tensor table, the largest differences and a verdict.

    Heatmaps of more than ``max_rows`` rows show both ends.
    """
    lines = [side_line("A", comparison.a), f"{side_line('B', comparison.b)} · B is the reference"]
    shared = tolerances(comparison)
    if len(shared) == 1:
        ((rtol, atol),) = shared
        lines.append(f"tolerance: |A − B| ≤ atol + rtol·|B|, rtol {tolerance_text(rtol)}, atol {tolerance_text(atol)}")
    skipped = skipped_line(comparison)
    if skipped:
        lines.append(skipped)
    layouts = (0, 1, 2) if len(tolerances(comparison)) > 1 else (0, 1)
    table = FirstFit(*(comparison_table(comparison, stacked=layout) for layout in layouts))
    parts: list[RenderableType] = [Text("\n".join(lines), style="dim"), table]
    largest = largest_table(comparison, precision)
    if largest is not None:
        parts.append(largest)
    if heatmap:
        parts.append(delta_heatmaps(comparison, precision, colour=colour, max_rows=max_rows))
    total = len(comparison.rows)
    every = "the one tensor compared is" if total == 1 else f"all {total} tensors compared are"
    parts.append(verdict(comparison.passed, f"A and B agree: {every} within tolerance",
                         f"A and B differ: {comparison.failures} of {total} tensors"))  # fmt: skip
    return Group(*parts)


def location_to_dict(loc: Location) -> dict[str, Any]:
    """One located element as JSON keys: ``index``, ``a``, ``b``, ``abs_diff``."""
    return {"index": list(loc.index), "a": to_plain(np.asarray(loc.a)), "b": to_plain(np.asarray(loc.b)),
            "abs_diff": to_plain(np.asarray(loc.abs_diff))}  # fmt: skip


def side_to_dict(side: Side) -> dict[str, Any]:
    """One side as JSON keys: ``source``, ``kind``, ``dtype``."""
    return {"source": side.source, "kind": side.kind, "dtype": side.dtype}


def comparison_to_dict(comparison: Comparison) -> dict[str, Any]:
    """The JSON object of `attnx diff A B` (``format_version`` first; indices 0-based)."""
    rows = []
    for row in comparison.rows:
        numbers = diff_to_dict(row.diff) if row.diff is not None else {**dict.fromkeys(DIFF_KEYS), "passed": False}
        rows.append(
            {
                "tensor": row.name,
                "axes": list(TENSOR_AXES.get(row.name, ())),
                "shape_a": None if row.shape_a is None else list(row.shape_a),
                "shape_b": None if row.shape_b is None else list(row.shape_b),
                "problem": row.problem,
                **numbers,
                "largest": [location_to_dict(loc) for loc in row.largest],
            }
        )
    return {
        "format_version": FORMAT_VERSION,
        "mode": "inputs",
        "a": side_to_dict(comparison.a),
        "b": side_to_dict(comparison.b),
        "passed": comparison.passed,
        "tensors": rows,
        "skipped": [{"tensor": name, "reason": reason} for name, reason in comparison.skipped],
    }
