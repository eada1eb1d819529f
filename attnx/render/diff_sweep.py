"""Showing a sweep (`attnx diff --heads 1,2,4`): the configurations side by side, with the output's shifts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attnx.analysis.diff import Sweep, Variant
from attnx.core.result import AttentionResult
from attnx.core.tensors import WEIGHTS
from attnx.render.fitted import FittedGrid, Labels
from attnx.render.heatmap import HeatScale, legend, scale_of, weight_heatmaps
from attnx.render.layout import Headline, add_columns, column_legend, compact_table
from attnx.render.numbers import MASKED_NOTE, fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tables import SCALE_LABELS, head_title, matrix_table, pooling
from attnx.text import NAME_LIMIT

FLAGS = {"heads": "--heads", "scale": "--scale", "layout": "--layout", "kv_heads": "--kv-heads"}


def letter(index: int) -> str:
    """The key of configuration ``index`` (from 0) where labels do not fit: ``A`` … ``Z``, ``AA``, ``AB``, …"""
    key = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        key = chr(ord("A") + rest) + key
    return key


# The setting each sweep's labels already name ("scale=none" names the scale's kind, not its value).
NAMED_BY_LABEL = {"heads": "heads", "scale": "scale_mode", "layout": "layout", "kv_heads": "K/V"}
NUMERIC_SETTINGS = ("heads", "d_k", "K/V", "scale")


def settings(result: AttentionResult, precision: int) -> dict[str, str]:
    """A configuration's settings as shown: heads, d_k, K/V heads, the scale's kind and value, layout."""
    return {
        "heads": str(result.heads),
        "d_k": str(result.d_k),
        "K/V": str(result.kv_heads),
        "scale_mode": SCALE_LABELS[result.scale_mode],
        "scale": fmt(result.scale, max(precision, 4)),
        "layout": result.layout,
    }


def _plural(count: str, noun: str) -> str:
    return f"{count} {noun}{'' if count == '1' else 's'}"


def shared_settings(shared: dict[str, str]) -> str:
    """The settings every configuration has, as words: ``2 heads · d_k 2 · 2 K/V heads · scale 1/√d_k``."""
    words = []
    if "heads" in shared:
        words.append(_plural(shared["heads"], "head"))
    if "d_k" in shared:
        words.append(f"d_k {shared['d_k']}")
    if "K/V" in shared:
        words.append(_plural(shared["K/V"], "K/V head"))
    if "scale_mode" in shared:
        value = f" = {shared['scale']}" if "scale" in shared else ""
        words.append(f"scale {shared['scale_mode']}{value}")
    if "layout" in shared:
        words.append(f"layout {shared['layout']}")
    return " · ".join(words)


def split_settings(sweep: Sweep, precision: int) -> tuple[dict[str, str], list[str]]:
    """The settings all computed configurations share (name -> shown value), and the names of those that vary.

    The varying setting a label already names is left out of the varying ones (``H=2`` says heads 2).
    """
    rows = [settings(v.result, precision) for v in sweep.variants]
    if not rows:
        return {}, []
    named = NAMED_BY_LABEL[sweep.varied]
    shared = {name: value for name, value in rows[0].items() if all(row[name] == value for row in rows)}
    varying = [name for name in rows[0] if name not in shared and name != named]
    return {name: value for name, value in shared.items() if name != named}, varying


# What the configurations table's numbers are (the saturation pair of `heads`: its std and max w).
SATURATION = (
    ("std scaled", "standard deviation of the head's scaled scores over the pairs it may attend"),
    ("mean max w", "its largest weight, averaged over the queries that see two keys or more (near 1: saturated)"),
)


def variants_table(sweep: Sweep, precision: int) -> Table:
    """One row per head (``H0``, ``H1``, …) of each configuration: the settings that vary, and saturation.

    The numbers are those of seed 004's softmax-saturation demo: the spread (std) of the scaled
    scores and the mean max weight. Settings every configuration shares are said once above the
    table (see ``sweep_view``), so the table keeps to 60 columns; labels wrap, numbers never.
    """
    _, varying = split_settings(sweep, precision)
    table = compact_table("Configurations")
    add_columns(table, "config", numeric=False)
    for name in varying:
        add_columns(table, name, numeric=name in NUMERIC_SETTINGS)
    add_columns(table, "head", *(header for header, _ in SATURATION))
    for variant in sweep.variants:
        r, s = variant.result, variant.saturation
        shown = settings(r, precision)
        config = [variant.label, *(shown[name] for name in varying)]
        for h in range(r.heads):
            numbers = [f"H{h}", fmt(float(s.scaled_std[h]), precision), fmt(float(s.mean_max_weight[h]), precision)]
            table.add_row(*(config if h == 0 else [""] * len(config)), *numbers)
    return table


def variant_view(
    variant: Variant, precision: int, *, heatmap: bool, colour: bool, scale: HeatScale, max_rows: int | None = None
) -> RenderableType:
    """One computed configuration: each head's weights (tables or heatmaps) and the concatenated output."""
    r = variant.result
    if heatmap:
        weights = weight_heatmaps(r, precision, colour=colour, scale=scale, max_rows=max_rows)
    else:
        blocked = None if r.mask is None else ~r.mask
        weights = Columns(
            [matrix_table(head_title(r, h), r.tensor(WEIGHTS)[h], r.tokens, r.key_tokens, precision,
                          emphasise_row_max=True, blocked=blocked, max_rows=max_rows) for h in range(r.heads)],
            padding=(1, 4),
        )  # fmt: skip
    output = matrix_table("Concatenated output", r.output, r.tokens, [f"d{c}" for c in range(r.d_model)], precision,
                          max_rows=max_rows)  # fmt: skip
    parts = [variant.label, f"{r.heads} head{'s' if r.heads > 1 else ''} × d_k {r.d_k}", pooling(r)]
    title = " · ".join(part for part in parts if part)
    return Group(Rule(title, align="left", style="dim"), weights, Text(""), output)


def column_runs(grid: FittedGrid, room: int) -> list[list[int]]:
    """``grid``'s columns cut into runs that each fit ``room`` characters beside the row labels (one at least)."""
    runs: list[list[int]] = [[]]
    used = grid.label_width
    for j in range(len(grid.col_labels)):
        width = grid.separator + grid.width(j)
        if runs[-1] and used + width > room:
            runs.append([])
            used = grid.label_width
        runs[-1].append(j)
        used += width
    return runs


class ShiftTables:
    """The per-token L2 and max-abs shift tables of a sweep, every number whole at any width.

    Columns are labelled ``H=1 → H=2`` where those labels fit the width; else by the
    configurations' letters (``A → B``) with a legend line (``A = scale=sqrt_dk``); and where even
    those columns do not fit side by side, the rest follow in tables below, never left out.
    """

    def __init__(self, sweep: Sweep, precision: int, max_rows: int | None = None) -> None:
        self.sweep, self.precision, self.max_rows = sweep, precision, max_rows
        variants = sweep.variants
        self.labels = [f"{variants[s.before].label} → {variants[s.after].label}" for s in sweep.shifts]
        self.keys = [f"{letter(s.before)} → {letter(s.after)}" for s in sweep.shifts]
        self.metrics = [
            (f"{metric} shift of {sweep.compared} per token", np.stack(per_token, axis=1), overall)
            for metric, per_token, overall in (
                ("L2", [s.l2 for s in sweep.shifts], [s.l2_overall for s in sweep.shifts]),
                ("max abs", [s.max_abs for s in sweep.shifts], [s.max_abs_overall for s in sweep.shifts]),
            )
        ]

    def grid(self, metric: int, labels: Sequence[str], columns: Sequence[int], title: str | None = None) -> FittedGrid:
        """The table of ``metrics[metric]`` with ``columns`` (indices of shifts), labelled by ``labels``."""
        name, matrix, overall = self.metrics[metric]
        cols = list(columns)
        footer = ("all", [overall[j] for j in cols])
        names = Labels([labels[j] for j in cols], NAME_LIMIT)  # settings, not tokens: cut only past a name's limit
        return matrix_table(title or name, matrix[:, cols], self.sweep.tokens, names,
                            self.precision, footer=footer, max_rows=self.max_rows)  # fmt: skip

    def legend(self) -> Text:
        """``A = H=1 · B = H=2 · …``: what each letter stands for (the configurations computed)."""
        used = sorted({i for s in self.sweep.shifts for i in (s.before, s.after)})
        return Text(" · ".join(f"{letter(i)} = {self.sweep.variants[i].label}" for i in used), style="dim")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room, every = options.max_width, range(len(self.labels))
        full = [self.grid(m, self.labels, every) for m in range(len(self.metrics))]
        if all(grid.span(len(every)) <= room for grid in full):
            yield Columns(full, padding=(1, 4))
            return
        keyed = [self.grid(m, self.keys, every) for m in range(len(self.metrics))]
        runs = [column_runs(grid, room) for grid in keyed]
        if all(len(r) == 1 for r in runs):
            yield Columns(keyed, padding=(1, 4))
        else:
            for m, metric_runs in enumerate(runs):
                for k, cols in enumerate(metric_runs):
                    title = self.metrics[m][0] + (" (continued)" if k else "")
                    yield Text("") if m or k else Text("", end="")
                    yield self.grid(m, self.keys, cols, title)
        yield self.legend()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        every = range(len(self.labels))
        full = sum(self.grid(m, self.labels, every).span(len(every)) for m in range(len(self.metrics)))
        narrowest = max(self.grid(m, self.keys, [0]).span(1) for m in range(len(self.metrics)))
        return Measurement(min(narrowest, full), full + 4 * (len(self.metrics) - 1))


def shifts_view(sweep: Sweep, precision: int, max_rows: int | None = None) -> RenderableType:
    """Per token and overall, how far the output moves between configurations: L2 and max abs."""
    if not sweep.shifts:
        return Text("one configuration (the values given repeat it): no output shifts", style="dim")
    return ShiftTables(sweep, precision, max_rows)


def sweep_view(
    sweep: Sweep, precision: int, *, heatmap: bool = False, colour: bool = True, max_rows: int | None = None
) -> RenderableType:
    """Everything `attnx diff --heads 1,2,4` (or another sweep) prints; tables of more than ``max_rows`` rows
    show both ends."""
    computed = sweep.variants
    first = computed[0].result
    engine = f" · {first.engine} {first.dtype} {first.device}"
    shared, _ = split_settings(sweep, precision)
    same = f"; every configuration has {shared_settings(shared)}" if shared_settings(shared) else ""
    parts: list[RenderableType] = [
        Headline(f"{sweep.source}{engine} · {FLAGS[sweep.varied]} varies{same}"),
        variants_table(sweep, precision),
        column_legend(*SATURATION),
    ]
    results = [v.result for v in computed]
    if any(r.blocked_pairs for r in results):
        parts.append(Text(MASKED_NOTE, style="dim"))
    scale = scale_of([r.tensor(WEIGHTS) for r in results])  # one colour scale for every configuration
    parts += [variant_view(v, precision, heatmap=heatmap, colour=colour, scale=scale, max_rows=max_rows)
              for v in computed]  # fmt: skip
    if heatmap:
        parts.append(legend(scale, precision, colour))
    parts += [Rule("Output shifts", align="left", style="dim"), shifts_view(sweep, precision, max_rows)]
    return Group(*parts)


def sweep_to_dict(sweep: Sweep) -> dict[str, Any]:
    """The JSON object of a sweep (``format_version`` first; indices 0-based: ``from``/``to`` index ``configs``).

    ``kv_pooled_from`` is the K/V head count a configuration's K/V heads were mean-pooled from (null: not pooled).
    """
    configs = []
    for v in sweep.variants:
        r, s = v.result, v.saturation
        configs.append(dict(
            label=v.label, value=v.value, error=None,  # format 1.x: a value no input takes is refused now
            heads=r.heads, kv_heads=r.kv_heads, d_k=r.d_k, scale=r.scale, scale_mode=r.scale_mode,
            layout=r.layout, kv_pooled_from=r.kv_pooled_from,
            scaled_std=to_plain(s.scaled_std), mean_max_weight=to_plain(s.mean_max_weight),
            weights=to_plain(r.tensor(WEIGHTS)), output=to_plain(r.tensor(sweep.compared)),
        ))  # fmt: skip
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
