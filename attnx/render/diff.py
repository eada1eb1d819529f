"""Showing diffs (`attnx diff`): sweeps side by side with output shifts, and two sides tensor by tensor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attnx.analysis.diff import Comparison, Location, Side, Sweep, TensorComparison, Variant
from attnx.render.engines import diff_to_dict, sci, tolerance_text
from attnx.render.formats import TENSOR_AXES
from attnx.render.heatmap import HeatScale, heatmap, legend, scale_of, weight_heatmaps
from attnx.render.layout import compact_table
from attnx.render.numbers import fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tables import SCALE_LABELS, head_title, matrix_table

DIFF_KEYS = ("max_abs", "max_rel", "worst_index", "rtol", "atol")  # null where a tensor could not be compared
FLAGS = {"heads": "--heads", "scale": "--scale", "layout": "--layout", "kv_heads": "--kv-heads"}


def _table(title: str | None = None) -> Table:
    return compact_table(title)


def _columns(table: Table, *headers: str, numeric: bool = True) -> None:
    for header in headers:
        table.add_column(header, justify="right" if numeric else "left", header_style="bold cyan", no_wrap=True)


def variants_table(sweep: Sweep, precision: int) -> Table:
    """One row per head of each configuration: sizes, scale, layout and the saturation numbers.

    The numbers are those of seed 004's softmax-saturation demo: the spread (std) of the scaled
    scores and the mean max weight; configurations the input cannot take follow as lines.
    """
    table = _table("Configurations")
    _columns(table, "config", numeric=False)
    _columns(table, "heads", "d_k", "K/V", "scale")
    _columns(table, "layout", numeric=False)
    _columns(table, "head", "std scaled", "mean max w")
    for variant in sweep.variants:
        r, s = variant.result, variant.saturation
        if r is None or s is None:
            continue
        scale = f"{SCALE_LABELS[r.scale_mode]} = {fmt(r.scale, max(precision, 4))}"
        config = [variant.label, str(r.heads), str(r.d_k), str(r.kv_heads), scale, r.layout]
        for h in range(r.heads):
            numbers = [str(h + 1), fmt(float(s.scaled_std[h]), precision), fmt(float(s.mean_max_weight[h]), precision)]
            table.add_row(*(config if h == 0 else [""] * len(config)), *numbers)
    return table


def errors_view(sweep: Sweep) -> RenderableType:
    """One line per configuration that could not be computed, saying why."""
    lines = [Text(f"{v.label}: not computed: {v.error}", style="yellow") for v in sweep.variants if v.error]
    return Group(*lines)


def variant_view(
    variant: Variant, precision: int, *, heatmap: bool, colour: bool, scale: HeatScale, max_rows: int | None = None
) -> RenderableType:
    """One computed configuration: each head's weights (tables or heatmaps) and the concatenated output."""
    r = variant.result
    assert r is not None  # only computed variants are shown
    if heatmap:
        weights = weight_heatmaps(r, precision, colour=colour, scale=scale, max_rows=max_rows)
    else:
        blocked = None if r.mask is None else ~r.mask
        weights = Columns(
            [matrix_table(head_title(r, h), r.weights[h], r.tokens, r.key_tokens, precision,
                          emphasise_row_max=True, blocked=blocked, max_rows=max_rows) for h in range(r.heads)],
            padding=(1, 4),
        )  # fmt: skip
    output = matrix_table("Concatenated output", r.output, r.tokens, [f"d{c}" for c in range(r.d_model)], precision,
                          max_rows=max_rows)  # fmt: skip
    title = f"{variant.label} · {r.heads} head{'s' if r.heads > 1 else ''} × d_k {r.d_k}"
    return Group(Rule(title, align="left", style="dim"), weights, Text(""), output)


def shifts_view(sweep: Sweep, precision: int, max_rows: int | None = None) -> RenderableType:
    """Per token and overall, how far the output moves between configurations: L2 and max abs."""
    if not sweep.shifts:
        return Text("fewer than two configurations computed: no output shifts", style="dim")
    labels = [f"{sweep.variants[s.before].label} → {sweep.variants[s.after].label}" for s in sweep.shifts]
    tables = []
    for metric, per_token, overall in (
        ("L2", [s.l2 for s in sweep.shifts], [s.l2_overall for s in sweep.shifts]),
        ("max abs", [s.max_abs for s in sweep.shifts], [s.max_abs_overall for s in sweep.shifts]),
    ):
        title = f"{metric} shift of {sweep.compared} per token"
        tables.append(matrix_table(title, np.stack(per_token, axis=1), sweep.tokens, labels, precision,
                                   footer=("all", overall), max_rows=max_rows))  # fmt: skip
    return Columns(tables, padding=(1, 4))


def sweep_view(
    sweep: Sweep, precision: int, *, heatmap: bool = False, colour: bool = True, max_rows: int | None = None
) -> RenderableType:
    """Everything `attnx diff --heads 1,2,4` (or another sweep) prints; tables of more than ``max_rows`` rows
    show both ends."""
    computed = [v for v in sweep.variants if v.result is not None]
    first = computed[0].result if computed else None
    engine = f" · {first.engine} {first.dtype} {first.device}" if first is not None else ""
    parts: list[RenderableType] = [
        Text(f"{sweep.source}{engine} · {FLAGS[sweep.varied]} varies, the rest stays", style="dim"),
        variants_table(sweep, precision),
        errors_view(sweep),
    ]
    scale = scale_of([v.result.weights for v in computed])  # one colour scale for every configuration
    parts += [variant_view(v, precision, heatmap=heatmap, colour=colour, scale=scale, max_rows=max_rows)
              for v in computed]  # fmt: skip
    if heatmap and computed:
        parts.append(legend(scale, precision, colour))
    parts += [Rule("Output shifts", align="left", style="dim"), shifts_view(sweep, precision, max_rows)]
    return Group(*parts)


def sweep_to_dict(sweep: Sweep) -> dict[str, Any]:
    """The JSON object of a sweep (``format_version`` first; indices 0-based)."""
    configs = []
    for v in sweep.variants:
        entry: dict[str, Any] = {"label": v.label, "value": v.value, "error": v.error}
        r, s = v.result, v.saturation
        if r is not None and s is not None:
            entry.update(
                heads=r.heads, kv_heads=r.kv_heads, d_k=r.d_k, scale=r.scale, scale_mode=r.scale_mode,
                layout=r.layout, scaled_std=to_plain(s.scaled_std), mean_max_weight=to_plain(s.mean_max_weight),
                weights=to_plain(r.weights), output=to_plain(getattr(r, sweep.compared)),
            )  # fmt: skip
        configs.append(entry)
    return {
        "format_version": FORMAT_VERSION,
        "mode": "sweep",
        "varied": sweep.varied,
        "tokens": list(sweep.tokens),
        "compared": sweep.compared,
        "configs": configs,
        "shifts": [
            {
                "from": s.before,
                "to": s.after,
                "from_label": sweep.variants[s.before].label,
                "to_label": sweep.variants[s.after].label,
                "l2": to_plain(s.l2),
                "max_abs": to_plain(s.max_abs),
                "l2_overall": to_plain(np.asarray(s.l2_overall)),
                "max_abs_overall": to_plain(np.asarray(s.max_abs_overall)),
            }
            for s in sweep.shifts
        ],
    }


def locate(name: str, index: Sequence[int], side: Side) -> str:
    """Where an element sits, for people: ``head 1 · cat → The`` (heads from 1, tokens by name)."""
    parts = []
    for axis, i in zip(TENSOR_AXES.get(name, ()), index, strict=False):
        if axis == "head":
            parts.append(f"head {i + 1}")
        elif axis == "query":
            parts.append(side.tokens[i] if i < len(side.tokens) else f"query {i}")
        elif axis == "key":
            parts.append(f"→ {side.key_tokens[i]}" if i < len(side.key_tokens) else f"→ key {i}")
        else:
            parts.append(f"d{i}")
    return " · ".join(parts).replace(" · →", " →")


def _shape(shape: tuple[int, ...] | None) -> str:
    return "—" if shape is None else "(" + ",".join(map(str, shape)) + ")"


def shapes(row: TensorComparison) -> str:
    """``(2,5,5)`` when both sides agree, else ``(2,5,5) vs (4,5,5)`` (``—`` for a missing side)."""
    a, b = _shape(row.shape_a), _shape(row.shape_b)
    return a if a == b else f"{a} vs {b}"


def _side_line(label: str, side: Side) -> str:
    what = "input, computed here" if side.kind == "input" else "attnx result"
    return f"{label}: {side.source} ({what}, {side.dtype})"


def _verdict(row: TensorComparison) -> Text:
    return Text("pass", style="green") if row.passed else Text("FAIL", style="bold red")


def tolerances(comparison: Comparison) -> set[tuple[float, float]]:
    """The distinct (rtol, atol) pairs the compared tensors were held to."""
    return {(r.diff.tolerance.rtol, r.diff.tolerance.atol) for r in comparison.rows if r.diff is not None}


def comparison_table(comparison: Comparison) -> Table:
    """One row per tensor: shape, max abs and rel difference, where the largest is, verdict.

    Tolerances get columns of their own only where they differ between tensors (float32 scales
    atol by each tensor's magnitude); otherwise ``comparison_view`` states them once.
    """
    per_row = len(tolerances(comparison)) > 1
    table = _table()
    _columns(table, "tensor", numeric=False)
    table.add_column("shape", header_style="bold cyan")
    _columns(table, "max abs", "max rel", *(("rtol", "atol") if per_row else ()))
    table.add_column("largest at", header_style="bold cyan")
    _columns(table, "verdict", numeric=False)
    for row in comparison.rows:
        d = row.diff
        if d is None:  # the problem's first words; the shape column shows the shapes
            numbers = [""] * (4 if per_row else 2)
            problem = Text((row.problem or "").partition(":")[0], style="yellow")
            table.add_row(row.name, shapes(row), *numbers, problem, _verdict(row))
            continue
        numbers = [sci(d.max_abs), sci(d.max_rel)]
        if per_row:
            numbers += [tolerance_text(d.tolerance.rtol), tolerance_text(d.tolerance.atol)]
        at = locate(row.name, row.largest[0].index, comparison.a) if row.largest else ""
        table.add_row(row.name, shapes(row), *numbers, at, _verdict(row))
    return table


def largest_table(comparison: Comparison, precision: int) -> Table | None:
    """The largest differences of every tensor beyond tolerance (None when none is)."""
    failing = [row for row in comparison.rows if row.diff is not None and not row.passed]
    if not failing:
        return None
    table = _table("Largest differences")
    _columns(table, "tensor", "at", numeric=False)
    _columns(table, "A", "B", "|A − B|")
    for row in failing:
        for n, loc in enumerate(row.largest):
            table.add_row(row.name if n == 0 else "", Text(locate(row.name, loc.index, comparison.a)),
                          fmt(loc.a, precision), fmt(loc.b, precision), sci(loc.abs_diff))  # fmt: skip
    return table


def delta_heatmaps(
    comparison: Comparison, precision: int, *, colour: bool, max_rows: int | None = None
) -> RenderableType:
    """Per head, ``|A − B|`` of the weights as a heatmap, with its legend."""
    delta = comparison.weight_delta
    if delta is None:
        return Text("no heatmap: the weights are missing on one side or differ in shape", style="dim")
    scale = scale_of([delta], name="|A − B| of weights")
    a = comparison.a
    rows = a.tokens or [str(i) for i in range(delta.shape[1])]
    keys = a.key_tokens or [str(j) for j in range(delta.shape[2])]
    grids = [
        heatmap(f"Head {h + 1} · |A − B| of weights", delta[h], rows, keys, precision, scale=scale, colour=colour,
                max_rows=max_rows)
        for h in range(delta.shape[0])
    ]  # fmt: skip
    return Group(Columns(grids, padding=(1, 4)), legend(scale, precision, colour))


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
    lines = [_side_line("A", comparison.a), f"{_side_line('B', comparison.b)} · B is the reference"]
    shared = tolerances(comparison)
    if len(shared) == 1:
        ((rtol, atol),) = shared
        lines.append(f"tolerance: |A − B| ≤ atol + rtol·|B|, rtol {tolerance_text(rtol)}, atol {tolerance_text(atol)}")
    parts: list[RenderableType] = [Text("\n".join(lines), style="dim"), comparison_table(comparison)]
    largest = largest_table(comparison, precision)
    if largest is not None:
        parts.append(largest)
    if heatmap:
        parts.append(delta_heatmaps(comparison, precision, colour=colour, max_rows=max_rows))
    total = len(comparison.rows)
    if comparison.passed:
        parts.append(Text(f"A and B agree: all {total} tensors within tolerance", style="bold green"))
    else:
        parts.append(Text(f"A and B differ: {comparison.failures} of {total} tensors", style="bold red"))
    return Group(*parts)


def _location(loc: Location) -> dict[str, Any]:
    return {"index": list(loc.index), "a": to_plain(np.asarray(loc.a)), "b": to_plain(np.asarray(loc.b)),
            "abs_diff": to_plain(np.asarray(loc.abs_diff))}  # fmt: skip


def _side(side: Side) -> dict[str, Any]:
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
                "largest": [_location(loc) for loc in row.largest],
            }
        )
    return {
        "format_version": FORMAT_VERSION,
        "mode": "inputs",
        "a": _side(comparison.a),
        "b": _side(comparison.b),
        "passed": comparison.passed,
        "tensors": rows,
    }
