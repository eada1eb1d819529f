"""`attnx align`: the word alignment of an encoder-decoder, from its cross-attention."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import TextFlags
from attnx.cli.inputs import flag_worded, model_session, require_checkpoint
from attnx.cli.options import OutputFormat
from attnx.cli.viewflags import ReportFlags
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.models.tokenize import Encoded

TargetOpt = Annotated[
    str | None, typer.Option("--target", metavar="T", help="The text the decoder reads (teacher forcing): the target.")
]
LayersOpt = Annotated[
    list[int] | None,
    typer.Option("--layer", metavar="L", help="A decoder layer to average over, from 0, -1 the last (repeatable). "
                 "Default: every layer."),
]  # fmt: skip
GenerateOpt = Annotated[
    int | None,
    typer.Option("--generate", metavar="N", min=1, help="In place of --target: the decoder writes up to N "
                 "tokens greedily, then they are aligned."),
]  # fmt: skip
HeadsOpt = Annotated[
    list[int] | None,
    typer.Option("--head", metavar="N", help="A head to average over, from 0, -1 the last (repeatable). Default: "
                 "every head."),
]  # fmt: skip


@guarded
@grouped
def align(
    *,
    checkpoint: TextFlags,
    target: TargetOpt = None,
    generate: GenerateOpt = None,
    layer: LayersOpt = None,
    head: HeadsOpt = None,
    report: ReportFlags = ReportFlags(),  # noqa: B008 - a frozen flag group, as every command's
) -> None:
    """Align a target with its source: for each target token, the source token the cross-attention weighs most.

    --model DIR (an encoder-decoder) --text SOURCE --target TARGET: the decoder reads the target teacher-forced.
    With --generate N in place of --target, it writes up to N tokens greedily and reads those.
    The weights are averaged over the decoder layers (--layer) and heads (--head) given (default: all of them).
    """
    require_checkpoint(checkpoint.model, "attnx align")
    if (target is None) == (generate is None):
        raise UsageError("give --target T (the text aligned with --text's) or --generate N (the decoder writes it), "
                         "one of them")  # fmt: skip
    from attnx import workflows

    with model_session(None, checkpoint, backend=report, caps=report, task="layers", quiet=report.quiet) as run:
        aligned: str | Encoded
        if generate is not None:
            from attnx.models.generate import greedy

            written = greedy(run.model, run.text, generate, prompt=run.model.decoder_prompt(), on=run.on)
            aligned = run.model.tokenizer.of_ids(written.ids, written.prompt)
        else:
            aligned = target or ""
        with flag_worded("--{}"):  # "--head 5 does not exist: ..."
            found = workflows.alignment(run.model, run.text, aligned, layers=layer, heads=head, on=run.on,
                                        progress=run.progress)  # fmt: skip
        model = run.model.checkpoint.name
    from attnx.render import alignment as render
    from attnx.render.serialize import dumps

    report.show(
        {OutputFormat.json: lambda: dumps(render.alignment_to_dict(found, model))},
        lambda colour: render.alignment_view(found, report.precision, colour=colour, max_rows=report.max_rows),
    )
