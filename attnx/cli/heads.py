"""`attnx heads`: per-head statistics, scale diagnostics and pattern labels."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import InputFlags, ModelFlags, PickFlags
from attnx.cli.inputs import attention_kind, load_input, model_session, reads_target, refuse
from attnx.cli.options import ConfigArg, OutputFormat, ReportFormat, TextsOpt
from attnx.cli.output import warn_fully_masked
from attnx.cli.viewflags import ReportFlags
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

ValueWeightedOpt = Annotated[
    bool,
    typer.Option("--value-weighted", help="With --view heatmap: beside each head's weights, each key's share of "
                 "what the query receives by value, ‖α·v·W_O‖ (JSON: value_weighted)."),
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LayerOrAllFlags(ModelFlags):
    """--model, --text and a --layer that may also be ``all`` (the model view)."""

    layer: Annotated[
        str | None,
        typer.Option("--layer", metavar="L|all", help="With --model: the layer, counted from 0, -1 the last "
                     "(default 0); all: the model view, a layer × head grid of labels and entropy."),
    ] = None  # fmt: skip


@guarded
@grouped
def heads(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    checkpoint: LayerOrAllFlags,
    pick: PickFlags,
    texts: TextsOpt = None,
    value_weighted: ValueWeightedOpt = False,
    report: ReportFlags,
) -> None:
    """Per head: entropy, max weight, top key and effective keys per query; scale diagnostics; a pattern label.

    Labels: self, previous-token, sink, induction, uniform, focused (thresholds in docs/commands.md).
    A cross-attention's (--attention cross): monotonic, end-sink, uniform, focused (how it reads the source).
    --model DIR --text "..." --layer L: layer L of a local checkpoint; --layer all: every layer's heads in a grid.
    --layer all --attention cross (or causal-self) with --target T or --generate N: an encoder-decoder's decoder.
    --model DIR --texts FILE: every layer's heads over many texts, means with their spread and counts.
    --head N: head N's rows alone, in the tables and the JSON.
    """
    from attnx.analysis.heads import head_stats
    from attnx.analysis.measures import head_measures, value_shares
    from attnx.core.measures import CROSS, HEADS
    from attnx.engines import compute
    from attnx.models.stacks import AttentionKind

    layer = checkpoint.layer
    if value_weighted and report.output_format is ReportFormat.table and not report.heatmap:
        raise UsageError("--value-weighted draws heatmaps beside the weights: add --view heatmap (or -f json)")
    if pick.head is not None and (texts is not None or (layer is not None and layer.strip().lower() == "all")):
        raise UsageError("--head shows one head of one layer; --texts and --layer all show every head")
    if texts is not None:
        over_texts(texts, checkpoint, report, input_flags=inputs.given())
        return
    if layer is not None and layer.strip().lower() == "all":
        if report.heatmap:
            raise UsageError("--layer all shows a grid of labels; --view heatmap draws one layer's weights")
        model_view(config, checkpoint, report, input_flags=inputs.given())
        return
    spec = load_input(config, inputs, checkpoint, caps=report, backend=report, quiet=report.quiet)
    result = compute(spec, **report.options())
    warn_fully_masked(result.fully_masked_rows, report.quiet)
    shown = pick.heads_of(result.heads)
    cross = spec.origin is not None and spec.origin.attention == AttentionKind.CROSS.value
    rule = CROSS if cross else HEADS  # a cross-attention's keys are the source: scored by how it reads it
    sinks = spec.special_keys if cross else spec.sinks  # the source's special tokens (its end token), or key 0 too
    stats = [s for s in head_stats(result, sinks, rule) if shown is None or s.head in shown]
    w_o = None if spec.w_o is None else spec.w_o.weight
    measures = head_measures(result, w_o, sinks)
    shares = value_shares(result, w_o) if value_weighted else None

    from attnx.render import heads as render
    from attnx.render.serialize import dumps

    def table(colour: bool) -> RenderableType:
        from rich.console import Group

        from attnx.render.tables import summary_line

        shown = render.heads_view(stats, result, report.precision, measures=measures, shares=shares,
                                  heatmap=report.heatmap, colour=colour, max_rows=report.max_rows,
                                  rule=rule)  # fmt: skip
        return Group(summary_line(result, spec.source), shown)

    report.show({OutputFormat.json: lambda: dumps(render.heads_to_dict(stats, result, measures, shares, rule))}, table)


def model_view(
    config: str | None, checkpoint: ModelFlags, report: ReportFlags, *, input_flags: dict[str, object]
) -> None:
    """`attnx heads --model DIR --text ... --layer all`: the layer × head grid, as a table or JSON; with
    ``--attention``, of that kind (a decoder's reading ``--target``, or what it writes with ``--generate N``)."""
    from attnx import workflows
    from attnx.workflows.layers import decoder_input

    refuse(input_flags, "changes one layer's input; --layer all shows the model as it is: give --layer N")
    kind = attention_kind(checkpoint.attention)
    with model_session(config, checkpoint, backend=report, caps=report, task="layers", quiet=report.quiet) as run:
        source = run.source()  # the text's tokens, or the audio a speech model hears
        decoder = kind is not None and reads_target(run.model, kind, checkpoint.attention or "")
        check_target(checkpoint, decoder=decoder, multi=len(run.model.stacks) > 1)
        run.progress.description = "writing" if decoder and checkpoint.generate is not None else "layers"
        target, written = (decoder_input(run.model, source, checkpoint.target, checkpoint.generate,
                                         checkpoint.language, run.on) if decoder else (None, range(0)))  # fmt: skip
        run.progress.description = "layers"
        view = workflows.model_view(run.model, source, on=run.on, progress=run.progress, kind=kind, target=target,
                                    written=tuple(written))  # fmt: skip
    from attnx.render import model as render
    from attnx.render.serialize import dumps

    report.show(
        {OutputFormat.json: lambda: dumps(render.model_view_to_dict(view))},
        lambda colour: render.model_view_table(view, colour=colour),
    )


def check_target(checkpoint: ModelFlags, *, decoder: bool, multi: bool) -> None:
    """--target or --generate, one of them, for a decoder's attention; neither for another's."""
    if checkpoint.target is not None and checkpoint.generate is not None:
        raise UsageError("--generate writes the target the decoder reads; --target gives it: give one or the other")
    if decoder and checkpoint.target is None and checkpoint.generate is None:
        raise UsageError(f"--attention {checkpoint.attention}: the decoder reads a target text: give --target T, "
                         "or --generate N to let it write one")  # fmt: skip
    if not decoder:
        where = ("the model reads --text alone" if not multi else
                 "they go with a decoder's attention: --attention causal-self or cross")  # fmt: skip
        refuse({"--target": checkpoint.target, "--generate": checkpoint.generate, "--language": checkpoint.language},
               f"is what a decoder reads; {where}")  # fmt: skip


def over_texts(texts: str, checkpoint: ModelFlags, report: ReportFlags, *, input_flags: dict[str, object]) -> None:
    """`attnx heads --model DIR --texts FILE`: every layer's heads over the texts (as `attnx detect --texts`; with
    ``--attention``, a decoder's over each text's target or what ``--generate N`` writes)."""
    from attnx.cli.detect import detection

    if checkpoint.text is not None:
        raise UsageError("--texts replaces --text: give one or the other")
    if checkpoint.layer is not None and checkpoint.layer.strip().lower() != "all":
        raise UsageError("--texts shows every layer; leave out --layer")
    if report.heatmap:
        raise UsageError("--texts shows a grid of labels; --view heatmap draws one text's weights")
    refuse(input_flags, "changes one layer's input; --texts shows the model as it is")
    refuse({"--target": checkpoint.target, "--language": checkpoint.language, "--audio": checkpoint.audio},
           'reads one text; with --texts, a decoder reads each line\'s "target" (or --generate N)')  # fmt: skip
    found, _ = detection(checkpoint.model, texts, backend=report, caps=report, quiet=report.quiet,
                         attention=checkpoint.attention, generate=checkpoint.generate)  # fmt: skip
    from attnx.render import detect as render
    from attnx.render.serialize import dumps

    report.show(
        {OutputFormat.json: lambda: dumps(render.detection_to_dict(found))},
        lambda colour: render.detection_view(found, "entropy", 2, colour=colour, max_rows=report.max_rows),
    )
