"""`attnx diff --model A --model B`: a layer × head grid of how far attention moved, the worst heads, the layers."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnx.analysis.model_diff import HeadShift, ModelComparison
from attnx.models.stacks import AttentionKind
from attnx.render.heatmap import heatmap, legend, scale_of
from attnx.render.layout import compact_table
from attnx.render.numbers import fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.text import label

WORST = 10  # heads listed, largest shift first
JS_WORDS = "JS divergence of each query's weights, in bits (0 the same, 1 disjoint; a learned sink is one more key)"


SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def unit_of(top: float) -> tuple[float, str]:
    """A power of ten that shows divergences up to ``top`` with leading digits (quantization moves heads by 10⁻⁴
    bits), and its words: ``(1.0, "")`` from 0.01 up (and for 0), else ``(10⁴, " ×10⁻⁴")``."""
    if not top > 0 or top >= 0.01:
        return 1.0, ""
    power = math.floor(math.log10(top))
    return 10.0**-power, f" ×10{str(power).translate(SUPERSCRIPTS)}"


def js_unit(comparison: ModelComparison) -> tuple[float, str]:
    """The one power of ten every JS divergence on the screen is shown in (the grid's means and the table's means
    and largest alike): ``unit_of`` the largest of them, a head's largest over its queries."""
    return unit_of(max((head.js_max for layer in comparison.layers for head in layer.heads), default=0.0))


def where(shift: HeadShift, tokens: tuple[str, ...], keys: tuple[str, ...]) -> str:
    """``query 5 'cat' → key 2 'the'`` (``→ the sink`` for a learned sink), the query among ``tokens``, the key
    among ``keys``."""
    key = "the sink" if shift.key < 0 else f"key {shift.key} {label(keys[shift.key])!r}"
    return f"query {shift.query} {label(tokens[shift.query])!r} → {key}"


def worst_table(comparison: ModelComparison, precision: int) -> Table:
    """The heads whose attention moved most, largest mean JS divergence first."""
    title = f"Heads that moved most (of {sum(len(layer.heads) for layer in comparison.layers)})"
    table = compact_table(title, min_width=len(title))
    worst = comparison.worst(WORST)
    factor, unit = js_unit(comparison)
    for header in ("head", f"mean JS{unit}", f"max JS{unit}", "max |Δα|"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("where")
    for shift in worst:
        table.add_row(f"L{shift.layer} H{shift.head}", fmt(shift.js_mean * factor, precision),
                      fmt(shift.js_max * factor, precision), fmt(shift.max_delta, precision),
                      Text(where(shift, comparison.tokens, comparison.key_tokens)))  # fmt: skip
    return table


def layers_table(comparison: ModelComparison, precision: int) -> Table:
    """Per layer: how far its output moved (‖B − A‖ / ‖A‖ over the layer, and the largest token's)."""
    title = "How far each layer's output moved: ‖B − A‖ / ‖A‖"
    table = compact_table(title, min_width=len(title))
    for header in ("layer", "whole", "worst token"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("token")
    for layer in comparison.layers:
        token = int(layer.output_shift.argmax())
        worst = fmt(float(layer.output_shift[token]), precision)
        table.add_row(
            f"L{layer.layer}", fmt(layer.output_overall, precision), worst, Text(repr(label(comparison.tokens[token])))
        )
    return table


def kl_line(comparison: ModelComparison, precision: int) -> Text:
    """The next-token KL(A ‖ B): mean and largest over the tokens, or why there is none."""
    kl = comparison.kl
    if kl is None:
        return Text("next-token KL: not measured (a side has no LM head)", style="dim")
    token = int(kl.argmax())
    after = label(comparison.tokens[token])
    return Text(f"next-token KL(A ‖ B): mean {fmt(float(kl.mean()), precision)} nats, largest "
                f"{fmt(float(kl[token]), precision)} after {after!r} (token {token})")  # fmt: skip


def comparison_view(comparison: ModelComparison, precision: int, *, colour: bool) -> RenderableType:
    """Both checkpoints named, the grid of mean JS divergence per layer and head, the worst heads, the layers."""
    factor, unit = js_unit(comparison)
    grid = comparison.grid() * factor
    scale = scale_of([grid], f"mean JS divergence ({unit.strip() + ' ' if unit else ''}bits)")
    heads = [f"H{h}" for h in range(grid.shape[1])]
    layers = [f"L{layer}" for layer in range(grid.shape[0])]
    title = f"Mean JS divergence per layer and head{unit} · {len(comparison.tokens)} tokens"
    if comparison.keys is not None:
        title = f"{title.removesuffix(' tokens')} target tokens × {len(comparison.keys)} source tokens"
    return Group(
        Text(f"A: {comparison.a}\nB: {comparison.b} · {comparison.architecture}{site_words(comparison)}", style="dim"),
        heatmap(title, grid, layers, heads, precision, scale=scale, colour=colour),
        legend(scale, precision, colour),
        Text(JS_WORDS, style="dim"),
        Text(""),
        worst_table(comparison, precision),
        Text(""),
        layers_table(comparison, precision),
        kl_line(comparison, precision),
    )


def site_words(comparison: ModelComparison) -> str:
    """`` · decoder, cross-attention``: what was compared, in a model of several stacks ('' in a model of one)."""
    if comparison.stack is None or comparison.kind is None:
        return ""
    return f" · {comparison.stack}, {AttentionKind(comparison.kind).label}"


def head_to_dict(shift: HeadShift) -> dict[str, Any]:
    """One head's shift: its mean and largest JS divergence, its largest |Δα| and where (``key`` null and
    ``sink`` true when the learned sink moved most)."""
    key = None if shift.key < 0 else shift.key
    return {"head": shift.head, "js_mean": shift.js_mean, "js_max": shift.js_max, "max_delta": shift.max_delta,
            "query": shift.query, "key": key, "sink": shift.key < 0}  # fmt: skip


def comparison_to_dict(comparison: ModelComparison) -> dict[str, Any]:
    """The JSON object of `attnx diff --model A --model B` (``format_version`` first; everything from 0)."""
    return {
        "format_version": FORMAT_VERSION,
        "mode": "models",
        "a": comparison.a,
        "b": comparison.b,
        "architecture": comparison.architecture,
        "tokens": list(comparison.tokens),
        **({} if comparison.stack is None else {"stack": comparison.stack, "attention": comparison.kind}),
        **({} if comparison.keys is None else {"key_tokens": list(comparison.keys)}),
        "layers": [
            {
                "layer": layer.layer,
                "output_shift": layer.output_overall,
                "output_shift_per_token": to_plain(layer.output_shift),
                "heads": [head_to_dict(h) for h in layer.heads],
            }
            for layer in comparison.layers
        ],
        "worst": [{"layer": h.layer, "head": h.head, "js_mean": h.js_mean} for h in comparison.worst(WORST)],
        "kl": None if comparison.kl is None else to_plain(comparison.kl),
    }
