"""Showing a trace: Rich renderables with the arithmetic written out, and the same trace as JSON."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from attnx.analysis.trace import HeadTrace, KeyLine, KeySummary, Trace
from attnx.core.positions import Rotary
from attnx.core.result import AttentionResult
from attnx.render.colours import EMPHASIS, LABEL
from attnx.render.layout import Headline, compact_table
from attnx.render.numbers import MASKED, fmt, fmt_row
from attnx.render.tables import SINK_LABEL, head_heading, matrix_table
from attnx.text import label

TOP_STYLE = EMPHASIS
MASKED_STYLE = "dim strike"
TOP_MARK = "◀ max"
UNBOUNDED = 1_000_000  # a width to measure a table's natural width with


def operand(value: float, precision: int) -> str:
    """A number written as an operand of a product or a difference: ``precision`` decimals, as every number of a
    trace, a negative one in parentheses: ``"2.0000"``, ``"(-1.2500)"``."""
    text = fmt(value, precision)
    return f"({text})" if text.startswith("-") else text


def fmt_vector(values: np.ndarray, precision: int, limit: int | None = None) -> str:
    """``fmt_row``, with the middle of a vector longer than ``limit`` (None: no limit) left out as ``…``."""
    if limit is None or len(values) <= limit:
        return fmt_row(list(values), precision)
    head, tail = (limit + 1) // 2, limit // 2
    cells = [fmt(float(v), precision) for v in values[:head]]
    cells.append(f"… {len(values) - limit} more …")
    cells += [fmt(float(v), precision) for v in values[len(values) - tail :]]
    return "[" + ", ".join(cells) + "]"


def dot_terms(query: np.ndarray, line: KeyLine, precision: int) -> str:
    """The dot product ``Q_h[token]·K_h[key]`` term by term: ``"0.0000×0.0000 + 2.0000×1.0000"``.

    Elided products are one last term, ``… (56 more: 0.1234)``, carrying their sum.
    """
    terms = [f"{operand(float(query[i]), precision)}×{operand(float(line.key[i]), precision)}" for i in line.terms]
    if line.elided:
        terms.append(f"… ({line.elided} more: {fmt(line.remainder, precision)})")
    return " + ".join(terms)


def dot_product(query: np.ndarray, line: KeyLine, precision: int) -> str:
    """``dot_terms`` and the raw score they add up to: ``"0.0000×0.0000 + 2.0000×1.0000 = 2.0000"``."""
    return f"{dot_terms(query, line, precision)} = {fmt(line.raw, precision)}"


@dataclass(frozen=True)
class Fitted:
    """``wide`` where its natural width fits the console, else ``narrow`` (the same content, stacked)."""

    wide: RenderableType
    narrow: RenderableType

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Pick the layout for the width at hand."""
        natural = Measurement.get(console, options.update(max_width=UNBOUNDED), self.wide).maximum
        yield self.wide if natural <= options.max_width else self.narrow


def _table(title: str) -> Table:
    """A titled table with one label column per key (``#``, ``key``); the caller adds the rest."""
    table = compact_table(title, min_width=len(title))
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("key", style=LABEL, no_wrap=True)
    return table


def _numbers(table: Table, *headers: str) -> None:
    for header in headers:
        table.add_column(Text(header), justify="right", no_wrap=True)


def _vectors(table: Table, *headers: str) -> None:
    for header in headers:  # vectors and sums of terms wrap between their entries
        table.add_column(Text(header), min_width=12)


def _row_style(line: KeyLine) -> str:
    return MASKED_STYLE if line.masked else TOP_STYLE if line.is_top else ""


def _labels(line: KeyLine) -> list[str]:
    return [str(line.index), label(line.token)]


def _rest_labels(head: HeadTrace) -> list[str]:
    return ["", f"… {head.rest.count} more" if head.rest else ""]


def _weight(line: KeyLine, precision: int) -> str:
    """A key's weight, or the ``MASKED`` marker for a masked key."""
    return MASKED if line.masked else fmt(line.weight, precision)


def exp_term(line: KeyLine, head: HeadTrace, precision: int) -> str:
    """``"exp(0.0000 − 1.4142) = 0.2431"``: one key's softmax numerator; the marker for a masked key."""
    if line.masked:
        return MASKED
    return f"exp({fmt(line.scaled, precision)} − {operand(head.exp_max, precision)}) = {fmt(line.exp, precision)}"


def division(exp: float, head: HeadTrace, weight: float, precision: int) -> str:
    """``"0.2431 / 2.7294 = 0.0891"``: a numerator (or a sum of them) over the row's sum, and the weight."""
    return f"{fmt(exp, precision)} / {fmt(head.exp_sum, precision)} = {fmt(weight, precision)}"


def exp_sum_line(head: HeadTrace, precision: int) -> Text:
    """``"Σe = 1.0000 + 0.2431 + … = 2.7294"``: the softmax's denominator, written out over the keys shown.

    The keys not shown one by one are one term, with their count; masked keys are left out.
    """
    terms = [fmt(line.exp, precision) for line in head.keys if not line.masked]
    rest: KeySummary | None = head.rest
    if rest is not None and rest.count > rest.masked:
        terms.append(f"{fmt(rest.exp, precision)} (… {rest.count} more)")
    if head.sink is not None:
        terms.append(f"{fmt(head.sink.exp, precision)} (sink)")
    return Text(f"Σe = {' + '.join(terms) or '0'} = {fmt(head.exp_sum, precision)}")


def softmax_table(head: HeadTrace, precision: int, *, stacked: bool = False) -> RenderableType:
    """The softmax of the row written out: per key e = exp(scaled − max), then weight = e / Σe; then Σe.

    The keys are those ``keys_table`` shows, the others one row; masked keys show the ``MASKED``
    marker (the softmax leaves them out); a learned sink is a row of its own, its logit in place of a scaled
    score. ``stacked`` puts each division under its exp, for narrow consoles. A row whose every key is masked
    has no softmax (without a sink): its weights are 0 (attnx's rule).
    """
    if head.exp_sum == 0.0:
        return Text("softmax: every key is masked for this query, so no key is weighed: its weights and "
                    "head output are 0 (attnx's rule for a row with nothing to attend)", style="dim")  # fmt: skip
    some_masked = any(line.masked for line in head.keys) or (head.rest is not None and head.rest.masked > 0)
    over = " of the visible keys" if some_masked else ""
    over += " and the sink's logit" if head.sink is not None else ""
    table = _table(f"softmax (max = {fmt(head.exp_max, precision)}, the largest scaled score{over})")
    _vectors(table, *(["e = exp(scaled − max), then e / Σe"] if stacked else ["e = exp(scaled − max)", "e / Σe"]))
    table.add_column("", no_wrap=True)

    def cells(exp: str, divided: str) -> list[str]:
        if not stacked:
            return [exp, divided]
        return [exp if divided == MASKED else f"{exp}\n{divided}"]

    for line in head.keys:
        divided = MASKED if line.masked else division(line.exp, head, line.weight, precision)
        row = [*_labels(line), *cells(exp_term(line, head, precision), divided), TOP_MARK if line.is_top else ""]
        table.add_row(*map(Text, row), style=_row_style(line))
    if head.rest is not None:
        rest = head.rest
        row = [*_rest_labels(head), *cells(fmt(rest.exp, precision), division(rest.exp, head, rest.weight, precision)),
               ""]  # fmt: skip
        table.add_row(*map(Text, row), style="italic")
    sink = head.sink
    if sink is not None:  # no value: its weight leaves the output
        exp = f"exp({fmt(sink.logit, precision)} − {operand(head.exp_max, precision)}) = {fmt(sink.exp, precision)}"
        row = ["", SINK_LABEL, *cells(exp, division(sink.exp, head, sink.weight, precision)), "no value"]
        table.add_row(*map(Text, row), style="italic")
    return Group(table, exp_sum_line(head, precision))


def scaled_rule(scale: float, softcap: float | None, precision: int, *, bias: bool = False) -> str:
    """How a scaled score is made from the raw one: ``raw × 0.7071``, with a score bias ``raw × 0.7071 + bias``, with
    a cap ``C·tanh(raw × s / C)`` (``C·tanh((raw × s + bias) / C)``)."""
    times = f"raw × {fmt(scale, precision)}" + (" + bias" if bias else "")
    if softcap is None:
        return times
    return f"{softcap:g}·tanh({f'({times})' if bias else times} / {softcap:g})"


def keys_table(head: HeadTrace, trace: Trace, precision: int, entries: int | None, *, arithmetic: bool = True) -> Table:
    """One row per shown key: raw and scaled score, masked, weight and a ``◀ max`` mark.

    With ``arithmetic`` also the key's slice and the dot product term by term. With a score bias, a ``bias``
    column between raw and scaled: raw × scale + bias is the scaled score (before a cap). The keys not shown
    are one last row with their total weight. A masked key's scores are shown as computed before
    the mask; its weight is the ``MASKED`` marker, as in every table.
    """
    biased = any(line.bias is not None for line in head.keys)
    rule = scaled_rule(trace.scale, trace.settings.softcap, precision, bias=biased)
    table = _table(f"scores (scaled = {rule}) and weights")
    if arithmetic:
        _vectors(table, "K_h[key]", "Q·K term by term")
    _numbers(table, "raw", *(["bias"] if biased else []), "scaled", "masked", "weight")
    table.add_column("", no_wrap=True)
    for line in head.keys:
        cells = _labels(line)
        if arithmetic:
            cells += [fmt_vector(line.key, precision, entries), dot_product(head.query, line, precision)]
        cells += [fmt(line.raw, precision), *([fmt(line.bias or 0.0, precision)] if biased else [])]
        cells += [fmt(line.scaled, precision), "yes" if line.masked else "no"]
        cells += [_weight(line, precision), TOP_MARK if line.is_top else ""]
        table.add_row(*map(Text, cells), style=_row_style(line))
    if head.rest is not None:
        cells = _rest_labels(head) + [""] * (2 * arithmetic + 2 + biased)
        cells += [str(head.rest.masked) if head.rest.masked else "no", fmt(head.rest.weight, precision), ""]
        table.add_row(*map(Text, cells), style="italic")
    return table


def arithmetic_table(head: HeadTrace, token: str, precision: int, entries: int | None) -> Table:
    """Each shown key's slice above its dot product with the query, term by term."""
    table = _table(f"dot products Q_h[{token}]·K_h[key], term by term")
    _vectors(table, "K_h[key], then Q·K")
    for line in head.keys:
        block = f"{fmt_vector(line.key, precision, entries)}\n{dot_product(head.query, line, precision)}"
        table.add_row(*map(Text, [*_labels(line), block]), style=_row_style(line))
    return table


def output_table(head: HeadTrace, token: str, precision: int, entries: int | None, *, stacked: bool = False) -> Table:
    """The head output as the weighted sum of the value rows, one contribution per key.

    ``stacked`` puts each value row above its contribution in one column, for narrow consoles.
    """
    table = _table(f"head output O_h[{token}] = Σ weight × V_h[key]")
    _numbers(table, "weight")
    _vectors(table, *(["V_h[key], then weight × V_h[key]"] if stacked else ["V_h[key]", "weight × V_h[key]"]))

    def vectors(value: str, contribution: str) -> list[str]:
        if not stacked:
            return [value, contribution]
        return [f"{value}\n{contribution}" if value else contribution]

    for line in head.keys:
        value, contribution = (fmt_vector(v, precision, entries) for v in (line.value, line.contribution))
        if line.masked:
            contribution = MASKED
        cells = [*_labels(line), _weight(line, precision), *vectors(value, contribution)]
        table.add_row(*map(Text, cells), style=_row_style(line))
    total = sum(line.weight for line in head.keys)
    if head.rest is not None:
        total += head.rest.weight
        contribution = fmt_vector(head.rest.contribution, precision, entries)
        cells = [*_rest_labels(head), fmt(head.rest.weight, precision), *vectors("", contribution)]
        table.add_row(*map(Text, cells), style="italic")
    table.add_section()
    output = fmt_vector(head.output, precision, entries)
    table.add_row(*map(Text, ["", f"O_h[{token}]", fmt(total, precision), *vectors("", output)]), style="bold")
    return table


def bands_table(head: HeadTrace, rotary: Rotary, precision: int) -> RenderableType:
    """Each shown key's Q·K split by RoPE pair (pair 0 turns fastest, with position; the last pairs carry
    content that position barely moves), the unturned columns last: the bands add up to the raw score."""
    lines = [line for line in head.keys if line.bands is not None]
    bands = np.array([line.bands for line in lines])  # (keys, pairs + 1)
    pairs = rotary.width(head.d_k) // 2
    labels = [f"p{i}" for i in range(pairs)] + ["rest"] * (bands.shape[1] > pairs)
    return matrix_table("Q·K by RoPE pair (p0 turns fastest with position)", bands,
                        [line.token for line in lines], labels, precision)  # fmt: skip


def unturned_table(head: HeadTrace, precision: int, entries: int | None) -> Table:
    """Each shown key's slice before RoPE turned it at its own position (after: in the tables above)."""
    table = _table("keys before RoPE turned them")
    _vectors(table, "K_h[key] before RoPE")
    for line in head.keys:
        if line.key_unturned is not None:
            cells = [*_labels(line), fmt_vector(line.key_unturned, precision, entries)]
            table.add_row(*map(Text, cells), style=_row_style(line))
    return table


def turned(trace: Trace) -> str:
    """`` (after RoPE at position 1)`` when rotary positions turned Q (and each K at its own position), else ``""``."""
    if trace.settings.rotary is None:
        return ""
    return f"  (after RoPE at position {trace.query})"


def rope_lines(head: HeadTrace, token: str, precision: int, entries: int | None) -> list[RenderableType]:
    """The query's slice before RoPE turned it, under the turned one (nothing without rotary positions)."""
    if head.query_unturned is None:
        return []
    return [Text(f"Q_h[{token}] before RoPE = {fmt_vector(head.query_unturned, precision, entries)}", style="dim")]


def rope_tables(head: HeadTrace, rotary: Rotary | None, precision: int, entries: int | None) -> list[RenderableType]:
    """The keys before RoPE and each score split by pair (nothing without rotary positions)."""
    if rotary is None:
        return []
    return [Text(""), unturned_table(head, precision, entries), Text(""), bands_table(head, rotary, precision)]


def head_view(head: HeadTrace, trace: Trace, precision: int, entries: int | None = 8) -> RenderableType:
    """One head of a trace: its header, the query slice, the keys, the softmax and the weighted sum of values."""
    token = label(trace.token)
    split = Group(
        keys_table(head, trace, precision, entries, arithmetic=False),
        Text(""),
        arithmetic_table(head, token, precision, entries),
    )
    return Group(
        Rule(head_label(head), align="left", style="dim"),
        Text(f"Q_h[{token}] = {fmt_vector(head.query, precision, entries)}{turned(trace)}"),
        *rope_lines(head, token, precision, entries),
        Fitted(keys_table(head, trace, precision, entries), split),
        *rope_tables(head, trace.settings.rotary, precision, entries),
        Text(""),
        Fitted(softmax_table(head, precision), softmax_table(head, precision, stacked=True)),
        Text(""),
        Fitted(
            output_table(head, token, precision, entries),
            output_table(head, token, precision, entries, stacked=True),
        ),
        Text(""),
    )


def head_label(head: HeadTrace) -> str:
    """``"Head 0 · columns 0-1 · d_k = 2"``, worded as `attnx run` titles its heads (counted from 0)."""
    return head_heading(head.head, head.columns, head.d_k, head.kv_head, head.shared_with, head.dropped)


def source_line(result: AttentionResult, source: str) -> Headline:
    """Where the problem came from and what computed it: ``"built-in example (…) · numpy float64 cpu"`` (a long
    source cut in its middle to the width)."""
    return Headline(f"{source} · {result.engine} {result.dtype} {result.device}")


def trace_view(trace: Trace, precision: int, entries: int | None = 8) -> RenderableType:
    """Everything `attnx trace` prints: each traced head, then the concatenated (and projected) output.

    Vectors longer than ``entries`` (None: no limit) are shown with their middle left out.
    """
    if len(trace.heads) == 1 and trace.n_heads > 1:
        which = f"head {trace.heads[0].head} of {trace.n_heads}"
    else:
        which = f"{trace.n_heads} head{'s' if trace.n_heads > 1 else ''}"
    sizes = f"{trace.n_keys} keys · d_model {len(trace.output)} · {which}"
    if trace.masking.title_note is not None:
        sizes += f" · {trace.masking.title_note}"
    if trace.settings.sink_logits is not None:
        sizes += " · learned sinks"
    if any(line.bias is not None for head in trace.heads for line in head.keys):
        sizes += " · score bias"
    token = label(trace.token)
    written = ", written by the model" if trace.written else ""
    title = f"Trace of {token!r} (query {trace.query}{written}) · {sizes}"
    parts: list[RenderableType] = [Text(title, style="bold")]
    parts += [head_view(head, trace, precision, entries) for head in trace.heads]
    parts.append(Rule(style="dim"))
    concatenated = f"concatenated output O[{token}] = {fmt_vector(trace.output, precision, entries)}"
    parts.append(Text(concatenated, style="bold"))
    if trace.projected is not None:
        projected = f"projected output O[{token}]·W_O = {fmt_vector(trace.projected, precision, entries)}"
        parts.append(Text(projected, style="bold"))
    return Group(*parts)
