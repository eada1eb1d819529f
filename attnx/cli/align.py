"""`attnx align`: the word alignment of an encoder-decoder, from its cross-attention."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import LanguageOpt, SourceFlags
from attnx.cli.inputs import flag_worded, model_session, refuse, require_checkpoint
from attnx.cli.options import OutputFormat
from attnx.cli.viewflags import ReportFlags
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.alignment import Alignment
    from attnx.analysis.timestamps import Timestamps
    from attnx.cli.inputs import Session

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
TimestampsOpt = Annotated[
    bool,
    typer.Option("--timestamps", help="With --audio: each word's start and end in seconds, from the cross-attention "
                 "of the alignment heads generation_config.json names (as transformers' return_token_timestamps)."),
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
    checkpoint: SourceFlags,
    target: TargetOpt = None,
    generate: GenerateOpt = None,
    layer: LayersOpt = None,
    head: HeadsOpt = None,
    language: LanguageOpt = None,
    timestamps: TimestampsOpt = False,
    report: ReportFlags = ReportFlags(),  # noqa: B008 - a frozen flag group, as every command's
) -> None:
    """Align a target with its source: for each target token, the source token the cross-attention weighs most.

    --model DIR (an encoder-decoder) --text SOURCE --target TARGET: the decoder reads the target teacher-forced.
    With --generate N in place of --target, it writes up to N tokens greedily and reads those.
    The weights are averaged over the decoder layers (--layer) and heads (--head) given (default: all of them).
    A speech model (Whisper) hears --audio FILE.wav in place of --text.
    With --timestamps, each word it reads or writes, timed in seconds by its alignment heads (generation_config.json).
    """
    require_checkpoint(checkpoint.model, "attnx align")
    if (target is None) == (generate is None):
        raise UsageError("give --target T (the text aligned with --text's) or --generate N (the decoder writes it), "
                         "one of them")  # fmt: skip
    if checkpoint.audio is None:
        refuse({"--timestamps": timestamps}, "times the words in audio: give --audio FILE.wav (a Whisper model)")
        refuse({"--language": language}, "is the language a speech model's decoder writes in: it goes with --audio")
    if timestamps:
        refuse({"--layer": layer, "--head": head}, "picks weights to average; --timestamps reads the alignment heads "
               "generation_config.json names")  # fmt: skip
    asked = Asked(target, generate, language, layer, head)
    with model_session(None, checkpoint, backend=report, caps=report, task="layers", quiet=report.quiet) as run:
        run.model.encoder_decoder("alignment needs an encoder-decoder")  # before the target is read
        found = asked.timed(run) if timestamps else asked.aligned(run)
        model = run.model.checkpoint.name
    from attnx.analysis.alignment import Alignment
    from attnx.render.serialize import dumps

    if isinstance(found, Alignment):
        from attnx.render import alignment as render

        aligned = found
        report.show(
            {OutputFormat.json: lambda: dumps(render.alignment_to_dict(aligned, model))},
            lambda colour: render.alignment_view(aligned, report.precision, colour=colour, max_rows=report.max_rows),
        )
        return
    from attnx.render import timestamps as timed

    times = found
    report.show(
        {OutputFormat.json: lambda: dumps(timed.timestamps_to_dict(times, model))},
        lambda colour: timed.timestamps_view(times, max_rows=report.max_rows),
    )


@dataclass(frozen=True)
class Asked:
    """What `align` asks of a model: the target it reads (``--target``) or writes (``--generate``), in ``--language``
    for a speech model, and the decoder layers and heads to average over."""

    target: str | None
    generate: int | None
    language: str | None
    layer: list[int] | None
    head: list[int] | None

    def aligned(self, run: Session) -> Alignment:
        """The cross-attention averaged over --layer and --head, the decoder reading (the prompt and) --target, or
        (the prompt and) what it writes (--generate), marked as written."""
        from attnx import workflows
        from attnx.workflows.layers import decoder_input

        source = run.source()
        sequence, written = decoder_input(run.model, source, self.target, self.generate, self.language, run.on)
        with flag_worded("--{}"):  # "--head 5 does not exist: ..."
            aligned = workflows.alignment(run.model, source, sequence or "", layers=self.layer, heads=self.head,
                                          on=run.on, progress=run.progress)  # fmt: skip
        return dataclasses.replace(aligned, written=tuple(written))

    def timed(self, run: Session) -> Timestamps:
        """--timestamps: each token's and word's times, of the prompt, --target and the end token after it, or of
        the prompt and what the decoder writes (--generate)."""
        from attnx import workflows
        from attnx.models.audio import AudioInput
        from attnx.workflows.layers import decoder_input
        from attnx.workflows.timing import sequence_of

        heard = run.source()
        if not isinstance(heard, AudioInput):  # pragma: no cover - refused above without --audio
            raise UsageError("--timestamps times the words in audio: give --audio FILE.wav (a Whisper model)")
        if self.generate is None:
            sequence, prompt = sequence_of(run.model, self.target or "", language=self.language)
            return workflows.timestamps(run.model, heard, sequence, prompt, on=run.on, progress=run.progress)
        found, written = decoder_input(run.model, heard, None, self.generate, self.language, run.on)
        if found is None:  # pragma: no cover - --generate is given here
            raise UsageError("give --target T or --generate N")
        return workflows.timestamps(run.model, heard, found, written.start, written=written, on=run.on,
                                    progress=run.progress)  # fmt: skip
