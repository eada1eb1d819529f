"""`attnx ablate`: what dropping heads does to a model, as a layer × head heatmap, per-token tables and JSON."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.effects import Ablations, Effect, Head, TargetAblations, TargetEffect
from attnx.render.heads import cell
from attnx.render.heatmap import HeatScale, cell_style, legend
from attnx.render.layout import Headline, add_columns, column_legend, compact_table
from attnx.render.model import head_grid, model_keys, tokens_line
from attnx.render.numbers import fmt
from attnx.render.serialize import to_plain
from attnx.text import label

LARGEST = 8  # heads the sweep lists, largest effect first
CHANGED = "≠"  # marks a token whose most likely next token changed
RULE = "dropped: the head's output zeroed before W_o (as transformers' head_mask); the rest of the model runs as it is"
SHIFT = "‖h' − h‖ / ‖h‖ of the last hidden state"  # h intact, h' with the heads dropped
KL = "KL(intact ‖ dropped) of the next-token distribution, nats"
DROPPED = "h intact, h' with the heads dropped"


def head_label(head: Head) -> str:
    """``L2H3`` (both from 0)."""
    return f"L{head[0]}H{head[1]}"


def _measure(view: Ablations) -> tuple[str, str]:
    """What the sweep's grid shows: the mean KL with an LM head, else the mean relative shift."""
    if view.lm_head:
        return "kl", f"mean {KL}"
    return "shift", f"mean {SHIFT}"


def _value(effect: Effect, measure: str) -> float:
    found = effect.mean_kl if measure == "kl" else effect.mean_shift
    return float("nan") if found is None else found


def sweep_view(view: Ablations, precision: int, *, colour: bool) -> RenderableType:
    """Every head dropped alone: a layer × head heatmap of its effect, then the heads of largest effect."""
    measure, meaning = _measure(view)
    layers = view.swept_layers
    grid = view.grid(lambda effect: _value(effect, measure))[list(layers)]
    scale = HeatScale(float(np.nanmax(grid)) if np.isfinite(grid).any() else 0.0, measure)
    title = Text(f"Effect of dropping each head alone: {meaning}", style="bold")
    rows = [[_cell(float(value), scale, precision, colour) for value in row] for row in grid]
    drawn = head_grid(view.heads, rows, [f"L{layer}" for layer in layers])
    ranked = sorted(view.effects, key=lambda effect: -_value(effect, measure))[:LARGEST]
    key = [legend(scale, precision, colour)] if colour else []  # without colour the cells are plain numbers
    return Group(_about(view), Text(RULE, style="dim"), title, drawn, *key, Text("largest effects:"),
                 _effects_table(view, ranked, precision), _effects_legend(view))  # fmt: skip


def _cell(value: float, scale: HeatScale, precision: int, colour: bool) -> Text:
    """A number on its heatmap colour (plain without colour: the table of largest effects ranks them)."""
    number = cell(value, precision)
    return Text(number, style=cell_style(scale.fraction(value))) if colour and np.isfinite(value) else Text(number)


def _effects_table(view: Ablations, effects: list[Effect], precision: int) -> RenderableType:
    table = compact_table()
    add_columns(table, "heads", numeric=False)
    add_columns(table, "shift")
    if view.lm_head:
        add_columns(table, "KL")
        add_columns(table, "top changed")
    for effect in effects:
        cells: list[str | Text] = [Text(", ".join(map(head_label, effect.dropped))), fmt(effect.mean_shift, precision)]
        if view.lm_head:
            cells += [fmt(effect.mean_kl or 0.0, precision), f"{effect.top_changed} of {len(view.tokens)}"]
        table.add_row(*cells)
    return table


def _effects_legend(view: Ablations) -> Text:
    """What the table of largest effects shows: each a mean over the tokens."""
    columns = [("shift", f"mean {SHIFT} ({DROPPED})")]
    if view.lm_head:
        columns += [("KL", f"mean {KL}"), ("top changed", "tokens whose most likely next token changed")]
    return column_legend(*columns)


def set_view(view: Ablations, precision: int, *, colour: bool, max_rows: int | None = None) -> RenderableType:
    """One set of heads dropped together: per token, the shift, the KL and the most likely next token."""
    effect = view.effects[0]
    table = compact_table()
    add_columns(table, "#")
    add_columns(table, "token", numeric=False)
    add_columns(table, "shift")
    if view.lm_head:
        add_columns(table, "KL")
        add_columns(table, "next token (intact → dropped)", numeric=False)
    rows = range(len(view.tokens))
    if max_rows is not None and len(rows) > max_rows:
        rows = range(len(view.tokens) - max_rows, len(view.tokens))  # the last tokens: where generation goes on
    for i in rows:
        cells: list[str | Text] = [str(i), Text(label(view.tokens[i])), fmt(float(effect.shift[i]), precision)]
        if effect.kl is not None and effect.top is not None and effect.top_after is not None:
            before, after = int(effect.top[i]), int(effect.top_after[i])
            moved = Text(f"'{label(view.top_labels[before])}' → '{label(view.top_labels[after])}'")
            if before != after:
                moved.append(f" {CHANGED}", style="bold")
            cells += [fmt(float(effect.kl[i]), precision), moved]
        table.add_row(*cells)
    summary = f"mean shift {fmt(effect.mean_shift, precision)}"
    if effect.mean_kl is not None:
        summary += f" · mean KL {fmt(effect.mean_kl, precision)} nats · top token changed at {effect.top_changed} of "
        summary += f"{len(view.tokens)} tokens ({CHANGED})"
    title = f"Dropping {', '.join(map(head_label, effect.dropped))} together"
    skipped = len(view.tokens) - len(rows)
    more = [Text(f"the first {skipped} tokens are not shown (--rows all shows them)", style="dim")] if skipped else []
    columns = [("shift", f"{SHIFT} at the token ({DROPPED})")] + ([("KL", KL)] if view.lm_head else [])
    return Group(_about(view), Text(RULE, style="dim"), Text(title, style="bold"), table, column_legend(*columns),
                 *more, Text(summary))  # fmt: skip


def _about(view: Ablations) -> Headline:
    head = "" if view.lm_head else " · no LM head: the last hidden state only"
    return Headline(f"{view.model} ({view.architecture}) · {view.layers} layers × {view.heads} heads{head}\n"
                    f"{tokens_line(view.tokens)}")  # fmt: skip


def ablations_view(view: Ablations, precision: int, *, colour: bool, max_rows: int | None = None) -> RenderableType:
    """The sweep's grid when every head was dropped alone; else the per-token table of the set dropped."""
    if view.sweep:
        return sweep_view(view, precision, colour=colour)
    return set_view(view, precision, colour=colour, max_rows=max_rows)


def _effect_to_dict(view: Ablations, effect: Effect) -> dict[str, Any]:
    def labels(ids: np.ndarray | None) -> list[str] | None:
        return None if ids is None else [view.top_labels[int(i)] for i in ids]

    return {
        "heads": [list(head) for head in effect.dropped],
        "labels": [head_label(head) for head in effect.dropped],
        "mean_shift": effect.mean_shift,
        "mean_kl": effect.mean_kl,
        "top_changed": effect.top_changed,
        "shift": to_plain(effect.shift),
        "kl": None if effect.kl is None else to_plain(effect.kl),
        "top": None if effect.top is None else [int(i) for i in effect.top],
        "top_tokens": labels(effect.top),
        "top_after": None if effect.top_after is None else [int(i) for i in effect.top_after],
        "top_after_tokens": labels(effect.top_after),
    }


def ablations_to_dict(view: Ablations) -> dict[str, Any]:
    """The JSON object of `attnx ablate` (``format_version`` first; layers, heads and tokens from 0)."""
    return {
        **model_keys(view.model, view.architecture, view.layers, view.heads, tokens=list(view.tokens)),
        "lm_head": view.lm_head,
        "sweep": view.sweep,
        "ablations": [_effect_to_dict(view, effect) for effect in view.effects],
    }


LOGP = "log-probability of the next target token (teacher forcing)"
TARGET_SHIFT = "‖h' − h‖ / ‖h‖ of the decoder's last hidden state"


def target_view(view: TargetAblations, precision: int, *, colour: bool, max_rows: int | None = None) -> RenderableType:
    """An encoder-decoder's ablation measured on the decoder: a layer × head heatmap per attention when every head was
    dropped alone; else the per-position table of the set dropped."""
    if view.sweep:
        return target_sweep_view(view, precision, colour=colour)
    return target_set_view(view, precision, max_rows=max_rows)


def _target_about(view: TargetAblations) -> Headline:
    sizes = " · ".join(dict.fromkeys(f"{p.stack} {p.layers} layers × {p.heads} heads" for p in view.parts))
    wrote = f" (positions {view.written[0]}-{view.written[-1]} written by the model)" if view.written else ""
    return Headline(f"{view.model} ({view.architecture}) · {sizes}\nsource {tokens_line(view.source)}\n"
                    f"target {tokens_line(view.target)}{wrote}")  # fmt: skip


def target_sweep_view(view: TargetAblations, precision: int, *, colour: bool) -> RenderableType:
    """Every head dropped alone: per attention, a layer × head heatmap of the mean KL, then the largest effects."""
    grids: list[RenderableType] = []
    largest = 0.0
    for part in range(len(view.parts)):
        if view.swept(part):
            found = view.grid(part, lambda effect: effect.mean_kl)
            largest = max(largest, float(np.nanmax(found)) if np.isfinite(found).any() else 0.0)
    scale = HeatScale(largest, "kl")
    for part, about in enumerate(view.parts):
        layers = view.swept(part)
        if not layers:
            continue
        grid = view.grid(part, lambda effect: effect.mean_kl)[list(layers)]
        rows = [[_cell(float(value), scale, precision, colour) for value in row] for row in grid]
        grids += [Text(f"{about.title} ({about.short}:)", style="bold"),
                  head_grid(about.heads, rows, [f"L{layer}" for layer in layers])]  # fmt: skip
    ranked = sorted(view.effects, key=lambda effect: -effect.mean_kl)[:LARGEST]
    key = [legend(scale, precision, colour)] if colour else []
    title = Text(f"Effect of dropping each head alone on the decoder: mean {KL}", style="bold")
    return Group(_target_about(view), Text(RULE, style="dim"), title, *grids, *key, Text("largest effects:"),
                 _target_effects_table(view, ranked, precision), _target_legend())  # fmt: skip


def _target_effects_table(view: TargetAblations, effects: list[TargetEffect], precision: int) -> RenderableType:
    table = compact_table()
    add_columns(table, "heads", numeric=False)
    add_columns(table, "shift", "KL", "Δ log p", "top changed")
    for effect in effects:
        delta = "—" if effect.mean_delta is None else fmt(effect.mean_delta, precision)
        table.add_row(Text(", ".join(map(view.label, effect.dropped))), fmt(effect.mean_shift, precision),
                      fmt(effect.mean_kl, precision), delta, f"{effect.top_changed} of {len(view.target)}")  # fmt: skip
    return table


def _target_legend() -> Text:
    return column_legend(("shift", f"mean {TARGET_SHIFT} ({DROPPED})"), ("KL", f"mean {KL}"),
                         ("Δ log p", f"mean change of the {LOGP}"),
                         ("top changed", "positions whose most likely next token changed"))  # fmt: skip


def target_set_view(view: TargetAblations, precision: int, *, max_rows: int | None = None) -> RenderableType:
    """One set of heads dropped together: per target position, the token that follows, its log-probability intact
    and dropped, the KL, the shift and the most likely next token."""
    effect = view.effects[0]
    table = compact_table()
    add_columns(table, "#")
    add_columns(table, "token", "next", numeric=False)
    add_columns(table, "log p", "dropped", "Δ", "KL", "shift")
    add_columns(table, "top (intact → dropped)", numeric=False)
    rows = range(len(view.target))
    if max_rows is not None and len(rows) > max_rows:
        rows = range(len(view.target) - max_rows, len(view.target))
    for i in rows:
        following = int(view.next_ids[i])
        known = following >= 0
        before, after = int(effect.top[i]), int(effect.top_after[i])
        moved = Text(f"'{label(view.top_labels[before])}' → '{label(view.top_labels[after])}'")
        if before != after:
            moved.append(f" {CHANGED}", style="bold")
        numbers = [float(view.logp[i]), float(effect.logp[i]), float(effect.delta[i])]
        table.add_row(str(i), Text(label(view.target[i])), Text(f"'{label(view.top_labels[following])}'" if known
                      else "—"), *(fmt(x, precision) if known else "—" for x in numbers),
                      fmt(float(effect.kl[i]), precision), fmt(float(effect.shift[i]), precision), moved)  # fmt: skip
    summary = f"mean Δ log p {'—' if effect.mean_delta is None else fmt(effect.mean_delta, precision)}"
    summary += f" · mean KL {fmt(effect.mean_kl, precision)} nats · mean shift {fmt(effect.mean_shift, precision)}"
    summary += f" · top token changed at {effect.top_changed} of {len(view.target)} positions ({CHANGED})"
    together = " together" if len(effect.dropped) > 1 else ""
    title = f"Dropping {', '.join(map(view.label, effect.dropped))}{together}: the decoder, position by position"
    skipped = len(view.target) - len(rows)
    more = (
        [Text(f"the first {skipped} positions are not shown (--rows all shows them)", style="dim")] if skipped else []
    )
    legend_text = column_legend(("next", "the next target token (teacher forcing)"), ("log p", "its log-probability, "
                                "intact"), ("dropped", "with the heads dropped"), ("Δ", "dropped − intact"), ("KL", KL),
                                ("shift", f"{TARGET_SHIFT} at the position ({DROPPED})"))  # fmt: skip
    return Group(_target_about(view), Text(RULE, style="dim"), Text(title, style="bold"), table, legend_text, *more,
                 Text(summary))  # fmt: skip


def target_to_dict(view: TargetAblations) -> dict[str, Any]:
    """The JSON object of `attnx ablate --target` (``format_version`` first; layers, heads and positions from 0;
    ``n_layers``/``n_heads``: the encoder's, each attention's in ``attentions``)."""

    def labels(ids: np.ndarray) -> list[str | None]:
        return [view.top_labels[int(i)] if int(i) >= 0 else None for i in ids]

    def effect_dict(effect: TargetEffect) -> dict[str, Any]:
        sites = [{"stack": view.parts[p].stack, "attention": view.parts[p].kind, "layer": layer, "head": head}
                 for p, layer, head in effect.dropped]  # fmt: skip
        return {
            "heads": [[layer, head] for _, layer, head in effect.dropped],
            "sites": sites,
            "labels": [view.label(head) for head in effect.dropped],
            "mean_shift": effect.mean_shift,
            "mean_kl": effect.mean_kl,
            "mean_delta_logp": effect.mean_delta,
            "top_changed": effect.top_changed,
            "shift": to_plain(effect.shift),
            "kl": to_plain(effect.kl),
            "logp": to_plain(effect.logp),
            "delta_logp": to_plain(effect.delta),
            "top_after": [int(i) for i in effect.top_after],
            "top_after_tokens": labels(effect.top_after),
        }

    first = view.parts[0]
    read = {"source_tokens": list(view.source), "tokens": list(view.target)}
    parts = [{"stack": p.stack, "attention": p.kind, "label": p.short, "n_layers": p.layers, "n_heads": p.heads}
             for p in view.parts]  # fmt: skip
    return {
        **model_keys(view.model, view.architecture, first.layers, first.heads, **read),
        "attentions": parts,
        "lm_head": True,
        "sweep": view.sweep,
        "written": list(view.written),
        "next": [int(i) if int(i) >= 0 else None for i in view.next_ids],
        "next_tokens": labels(view.next_ids),
        "logp": to_plain(view.logp),
        "top": [int(i) for i in view.top],
        "top_tokens": labels(view.top),
        "ablations": [effect_dict(effect) for effect in view.effects],
    }
