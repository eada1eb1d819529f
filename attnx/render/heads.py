"""Showing head statistics (`attnx heads`): a label table, per-query tables or heatmaps, and JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attnx.analysis.heads import HeadStats
from attnx.analysis.measures import HeadMeasures
from attnx.core.measures import FORMER_KEYS, HEADS, MEASURES, NOTES, WRITES, Measure
from attnx.core.measures import Rule as LabelRule
from attnx.core.result import AttentionResult
from attnx.core.rows import Rows, after_gap
from attnx.core.tensors import WEIGHTS
from attnx.render.colours import EMPHASIS, LABEL
from attnx.render.fitted import ROW_GAP, left_out
from attnx.render.heatmap import legend, scale_of, weight_heatmaps
from attnx.render.layout import compact_table, meanings
from attnx.render.numbers import fmt
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tables import head_title, shown_tokens
from attnx.text import label

NONE = "—"
T = TypeVar("T")
# The label table's score columns, from the registry: every score of the HEADS rule but the max weight, which
# comes last, beside the scaled scores' std (the saturation pair). Headers fit 80 columns.
LAST = MEASURES["max-weight"]
COUNTS_ROW = "queries"  # the footer of the label table: how many queries each score is the mean of


def score_columns(rule: LabelRule = HEADS) -> tuple[Measure, ...]:
    """The label table's score columns of ``rule`` (HEADS; CROSS for a cross-attention): its scores but the max
    weight."""
    return tuple(MEASURES[name] for name in rule.measures if name != LAST.name)


SCORE_COLUMNS = score_columns(HEADS)


def _named(m: Measure) -> str:
    return m.header if m.label in (None, m.header) else f"{m.header} ({m.label})"


def score_meanings(rule: LabelRule = HEADS) -> str:
    """What the label table's scores of ``rule`` mean, in one paragraph."""
    whole = "" if rule is HEADS else " (mono and cover: of the whole target)"
    named = [(_named(m), m.description) for m in (*score_columns(rule), LAST)]
    return (
        "scores (the label's own in bold), each a mean over the queries that see two keys or more and, for a target "
        f"key, have one ({COUNTS_ROW}: how many){whole}: " + meanings([*named, ("std", "of the scaled scores")])
    )


SCORE_MEANINGS = score_meanings(HEADS)


def cell(value: float | None, precision: int) -> str:
    """A number at ``precision`` decimals, or ``—`` where it is undefined (None or NaN)."""
    return NONE if value is None or not np.isfinite(value) else fmt(float(value), precision)


def queries_text(count: int | None) -> str:
    """``1 query``, ``1,024 queries`` (``no query`` for None)."""
    return "no query" if count is None else f"{count:,} quer{'y' if count == 1 else 'ies'}"


def thresholds_line(rule: LabelRule = HEADS) -> Text:
    """The label rules in one line: the positional labels first, then uniform, then focused (``rule``'s: a
    cross-attention's, monotonic or end-sink first)."""
    return Text(f"labels ({rule.words}): {rule.rules_text()}", style="dim")


def labels_table(stats: Sequence[HeadStats], precision: int, rule: LabelRule = HEADS) -> Table:
    """One row per head: its label and score, every label's score (``rule``'s), and the saturation numbers; the
    last row says how many queries each score is the mean of (the same for every head of one input)."""
    counts = stats[0].counts if stats else {}

    def count(m: Measure) -> str:
        return f"{counts[m.key]:,}" if m.key in counts else ""

    table = compact_table("Heads", show_footer=True)
    table.add_column("head", justify="right", style=LABEL, no_wrap=True)
    table.add_column("label", no_wrap=True, header_style=LABEL, footer=COUNTS_ROW, footer_style="dim")
    columns = score_columns(rule)
    for m in columns:
        table.add_column(m.header, justify="right", no_wrap=True, header_style=LABEL, footer=count(m),
                         footer_style="dim")  # fmt: skip
    table.add_column("std", justify="right", no_wrap=True, header_style=LABEL)
    table.add_column(LAST.header, justify="right", no_wrap=True, header_style=LABEL, footer=count(LAST),
                     footer_style="dim")  # fmt: skip

    def score(s: HeadStats, key: str) -> Text:
        return Text(cell(s.scores[key], precision), style=EMPHASIS if key == s.label else "")

    for s in stats:
        table.add_row(
            f"H{s.head}",
            Text(s.label or NONE, style="bold" if s.label else "dim"),
            *(score(s, m.key) for m in columns),
            cell(s.scaled_std, precision),
            score(s, LAST.key),
        )
    return table


WRITES_COLUMNS = tuple(MEASURES[name] for name in WRITES)
WRITES_MEANING = meanings((m.header, m.description) for m in WRITES_COLUMNS)


def writes_table(stats: Sequence[HeadStats], measures: HeadMeasures, precision: int) -> Table:
    """One row per head: sink mass by weight and by value, what the head writes, and the flags they raise."""
    table = compact_table("What the heads write")
    table.add_column("head", justify="right", style=LABEL, no_wrap=True)
    for m in WRITES_COLUMNS:
        table.add_column(m.header, justify="right", no_wrap=True, header_style=LABEL)
    table.add_column("note", header_style=LABEL)
    for s in stats:
        notes = head_notes(s, measures)
        table.add_row(
            f"H{s.head}", cell(measures.sink[s.head], precision), cell(measures.sink_value[s.head], precision),
            cell(measures.write[s.head], precision), cell(measures.share[s.head], precision),
            Text(", ".join(notes) or NONE, style="bold" if notes else "dim"),
        )  # fmt: skip
    return table


def head_notes(s: HeadStats, measures: HeadMeasures) -> list[str]:
    """``sink`` (its weight parked on the sinks) and ``faint`` (labelled, but writing little), where they hold."""
    return [note for note, holds in (("sink", measures.is_sink(s.head)), ("faint", measures.is_faint(s.head, s.label)))
            if holds]  # fmt: skip


def writes_lines(measures: HeadMeasures) -> Text:
    """What the writes table's columns mean, the keys counted as sinks, and the rules of its notes."""
    sink, share = (MEASURES[name] for name in NOTES)
    keys = f"key{'s' if len(measures.sinks) > 1 else ''} {', '.join(map(str, measures.sinks))}"
    return Text(
        f"{WRITES_MEANING} (sinks here: {keys}; sink and by value: over the queries with a choice)\n"
        f"notes: {sink.label} = {sink.header} ≥ {sink.threshold:g} · {share.label} = a labelled head whose "
        f"{share.header} < {share.threshold:g}",
        style="dim",
    )


def top_key_cell(s: HeadStats, result: AttentionResult, query: int) -> Text:
    """The top key's token as text (never markup), ``cat +2 tied`` when other keys tie it, ``—`` if none."""
    top = int(s.top_key[query])
    if top < 0:
        return Text(NONE)
    text = Text(label(result.key_tokens[top]))
    others = int(s.top_ties[query]) - 1
    if others > 0:
        text.append(f" +{others} tied", style="dim")
    return text


def queries_table(s: HeadStats, result: AttentionResult, precision: int, max_rows: int | None = None) -> RenderableType:
    """One row per query of one head: entropy, normalised entropy, effective keys, max weight, top key.

    Past ``max_rows`` queries (None: no limit), the first and last, and a line saying how many are left out.
    """
    table = compact_table()
    table.add_column("query", style=LABEL, no_wrap=True)
    for header in ("keys", "entropy", "/ log keys", "eff. keys", "max w"):
        table.add_column(header, justify="right", no_wrap=True, header_style=LABEL)
    table.add_column("top key", no_wrap=True, header_style=LABEL)
    rows, names = Rows.ends(len(result.tokens), max_rows).shown, shown_tokens(result)[0]
    for k, i in enumerate(rows):
        if after_gap(rows, k):
            table.add_row(*[Text(ROW_GAP, style="dim")] * 7)
        table.add_row(
            Text(label(names[i])),
            str(int(s.visible_keys[i])),
            cell(s.entropy[i], precision),
            cell(s.normalized_entropy[i], precision),
            cell(s.effective_keys[i], precision),
            cell(s.max_weight[i], precision),
            top_key_cell(s, result, i),
        )
    note = left_out((len(result.tokens) - len(rows), len(result.tokens)))
    return table if note is None else Group(table, note)


def heads_view(
    stats: Sequence[HeadStats],
    result: AttentionResult,
    precision: int,
    *,
    measures: HeadMeasures | None = None,
    shares: np.ndarray | None = None,
    heatmap: bool = False,
    colour: bool = True,
    max_rows: int | None = None,
    rule: LabelRule = HEADS,
) -> RenderableType:
    """Everything `attnx heads` prints: the label table (``rule``'s scores and labels: HEADS, or CROSS for a
    cross-attention), what the heads write (with ``measures``), then per head its queries (or its weights as
    heatmaps, followed by the value-weighted ``shares`` ``[head, query, key]``), for the heads of ``stats`` (every
    head, or those picked).

    Per-query tables and heatmaps of more than ``max_rows`` queries (None: no limit) show both ends.
    """
    parts: list[RenderableType] = [labels_table(stats, precision, rule), Text(score_meanings(rule), style="dim"),
                                   thresholds_line(rule)]  # fmt: skip
    if measures is not None:
        parts += [writes_table(stats, measures, precision), writes_lines(measures)]
    if heatmap:
        heads = [s.head for s in stats]
        weights = result.tensor(WEIGHTS)[heads]  # computed: the heads view always asks for the weights
        scale = scale_of([weights] if shares is None else [weights, shares[heads]])
        parts += [
            Rule(style="dim"),
            weight_heatmaps(result, precision, colour=colour, scale=scale, max_rows=max_rows, heads=heads),
        ]
        if shares is not None:
            parts += [Rule("by value: each key's share of ‖α·v·W_O‖ in the row (Kobayashi et al., 2020)", style="dim"),
                      weight_heatmaps(result, precision, colour=colour, scale=scale, max_rows=max_rows,
                                      matrices=shares, what=" · by value", heads=heads)]  # fmt: skip
        parts.append(legend(scale, precision, colour))
        return Group(*parts)
    for s in stats:
        label = (
            f" · {s.label} ({fmt(s.label_score or 0.0, precision)}) over {queries_text(s.label_count)}"
            if s.label
            else ""
        )
        parts.append(Rule(head_title(result, s.head) + label, align="left", style="dim"))
        parts.append(queries_table(s, result, precision, max_rows))
    return Group(*parts)


def plain_number(value: float | None) -> float | None:
    """A float for JSON (NaN and infinities: None)."""
    return None if value is None else to_plain(np.asarray(value, dtype=np.float64))


def head_to_dict(s: HeadStats, result: AttentionResult, measures: HeadMeasures | None = None) -> dict[str, Any]:
    """One head of `attnx heads --format json` (indices 0-based; undefined numbers null).

    ``top_key_ties`` counts the keys tied for the largest weight (``top_key`` is the first of them).
    """
    queries = []
    for i, token in enumerate(result.tokens):
        top = int(s.top_key[i])
        queries.append(
            {
                "query": result.query_positions[i],
                "token": token,
                "visible_keys": int(s.visible_keys[i]),
                "entropy": plain_number(s.entropy[i]),
                "normalized_entropy": plain_number(s.normalized_entropy[i]),
                "effective_keys": plain_number(s.effective_keys[i]),
                "max_weight": plain_number(s.max_weight[i]),
                "top_key": top if top >= 0 else None,
                "top_key_token": result.key_tokens[top] if top >= 0 else None,
                "top_key_ties": int(s.top_ties[i]),
            }
        )
    return {**head_summary(s, measures), "queries": queries}


def with_former_keys(values: Mapping[str, T]) -> dict[str, T]:
    """``values`` keyed as the registry keys them, then each former key of format 1.x beside its new one
    (``first-token``: the ``sink`` value), so that scripts written for 1.3 keep reading them until 2.0."""
    return {**values, **{old: values[new] for old, new in FORMER_KEYS.items() if new in values}}


def head_summary(s: HeadStats, measures: HeadMeasures | None = None) -> dict[str, Any]:
    """A head's label (with the count of queries it rests on), scores, counts and means, without its per-query
    numbers (0-based; undefined numbers null); with ``measures``, its sink mass, value-weighted sink mass, write,
    share and notes too (format 1.3; ``label_count`` and ``counts``: 1.4)."""
    by_value, write, share = (MEASURES[name] for name in WRITES[1:])
    extra = {} if measures is None else {
        "sink_mass": plain_number(measures.sink[s.head]),  # the `sink` score, beside its value-weighted twin
        by_value.key: plain_number(measures.sink_value[s.head]),
        write.key: plain_number(measures.write[s.head]),
        share.key: plain_number(measures.share[s.head]),
        "notes": head_notes(s, measures),
    }  # fmt: skip
    return {
        "head": s.head,
        "label": s.label,
        "label_score": plain_number(s.label_score),
        "label_count": s.label_count,
        "scores": with_former_keys({key: plain_number(score) for key, score in s.scores.items()}),
        "counts": dict(s.counts),
        "scaled_std": plain_number(s.scaled_std),
        "mean_max_weight": plain_number(s.mean_max_weight),
        "mean_entropy": plain_number(s.mean_entropy),
        "mean_effective_keys": plain_number(s.mean_effective_keys),
        **extra,
    }


def thresholds_json() -> dict[str, float]:
    """The ``thresholds`` object of `attnx heads` and the model view: the HEADS rule's, with the former keys."""
    return with_former_keys(HEADS.thresholds())


def heads_to_dict(
    stats: Sequence[HeadStats],
    result: AttentionResult,
    measures: HeadMeasures | None = None,
    shares: np.ndarray | None = None,
    rule: LabelRule = HEADS,
) -> dict[str, Any]:
    """The JSON object of `attnx heads --format json` (``format_version`` first; ``rule``, the scores' and labels':
    a cross-attention's thresholds are CROSS's)."""
    sinks = {} if measures is None else {"sinks": list(measures.sinks)}
    by_value = {} if shares is None else {"value_weighted": to_plain(shares)}
    return {
        "format_version": FORMAT_VERSION,
        "tokens": list(result.tokens),
        "key_tokens": list(result.key_tokens),
        "n_heads": result.heads,
        "d_k": result.d_k,
        "scale": result.scale,
        "scale_mode": result.scale_mode,
        "thresholds": thresholds_json() if rule is HEADS else rule.thresholds(),
        **sinks,
        "heads": [head_to_dict(s, result, measures) for s in stats],
        **by_value,
    }
