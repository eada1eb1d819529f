"""`attnx align`: the word alignment of an encoder-decoder, from its cross-attention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import TextFlags
from attnx.cli.inputs import flag_worded, model_session, refuse, require_checkpoint
from attnx.cli.options import OutputFormat
from attnx.cli.viewflags import ReportFlags
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.alignment import Alignment
    from attnx.analysis.timestamps import Timestamps
    from attnx.cli.inputs import LayerProgress
    from attnx.engines.placement import Placement
    from attnx.models import Model
    from attnx.models.audio import AudioInput
    from attnx.models.generate import Generated
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
AudioOpt = Annotated[
    str | None,
    typer.Option("--audio", metavar="FILE", help="With --model of a speech model (Whisper), in place of --text: the "
                 "WAV file its encoder hears (PCM or float, 16 kHz)."),
]  # fmt: skip
LanguageOpt = Annotated[
    str | None,
    typer.Option("--language", metavar="LANG", help="For a model that asks one (a multilingual Whisper): the language "
                 "the decoder writes in (en, fr, ...)."),
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
    checkpoint: TextFlags,
    target: TargetOpt = None,
    generate: GenerateOpt = None,
    layer: LayersOpt = None,
    head: HeadsOpt = None,
    audio: AudioOpt = None,
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
    from attnx import workflows

    if audio is not None or timestamps:
        if audio is None:
            raise UsageError("--timestamps times the words in audio: give --audio FILE.wav (a Whisper model)")
        Heard(audio, target, generate, language, timestamps, layer, head).show(checkpoint, report)
        return
    refuse({"--language": language}, "is the language a speech model's decoder writes in: it goes with --audio")
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


@dataclass(frozen=True)
class Heard:
    """`align --audio`: what a speech model's decoder aligns with the audio its encoder hears (``--target`` or what
    it writes, ``--generate``), averaged over layers and heads, or timed word by word (``--timestamps``)."""

    audio: str
    target: str | None
    generate: int | None
    language: str | None
    timestamps: bool
    layer: list[int] | None
    head: list[int] | None

    def show(self, checkpoint: TextFlags, report: ReportFlags) -> None:
        """Read the WAV file (within the caps, before the model opens), run the model, show what it found."""
        from attnx.cli.inputs import open_checkpoint, progress_for
        from attnx.cli.output import warn
        from attnx.io.audio import read_wav
        from attnx.render.serialize import dumps

        refuse({"--text": checkpoint.text}, "is what a text model reads; with --audio the model's encoder hears it")
        if self.timestamps:
            refuse({"--layer": self.layer, "--head": self.head}, "picks weights to average; --timestamps reads the "
                   "alignment heads generation_config.json names")  # fmt: skip
        limits = report.limits()
        wav = read_wav(self.audio, limits)
        path = require_checkpoint(checkpoint.model, "--audio")
        with open_checkpoint(path, report, limits) as model, progress_for("running layers", report.quiet) as bar:
            heard = model.encode_audio(wav.samples)
            for note in () if report.quiet else (*wav.notes, *heard.warnings):
                warn(note)
            name = model.checkpoint.name
            if self.timestamps:
                times = self.timed(model, heard, report.placement(), bar)
            else:
                found = self.aligned(model, heard, report.placement(), bar)
        if self.timestamps:
            from attnx.render import timestamps as timed

            report.show(
                {OutputFormat.json: lambda: dumps(timed.timestamps_to_dict(times, name))},
                lambda colour: timed.timestamps_view(times, max_rows=report.max_rows),
            )
            return
        from attnx.render import alignment as render

        report.show(
            {OutputFormat.json: lambda: dumps(render.alignment_to_dict(found, name))},
            lambda colour: render.alignment_view(found, report.precision, colour=colour, max_rows=report.max_rows),
        )

    def written(self, model: Model, heard: AudioInput, on: Placement) -> Generated:
        """The tokens the decoder writes greedily after its prompt (--generate, in --language)."""
        from attnx.models.generate import greedy

        prompt = model.decoder_prompt(language=self.language)
        return greedy(model, heard, self.generate or 1, prompt=prompt, on=on)

    def aligned(self, model: Model, heard: AudioInput, on: Placement, bar: LayerProgress) -> Alignment:
        """The cross-attention averaged over --layer and --head, the decoder reading the prompt and --target, or the
        prompt and what it writes (--generate)."""
        from attnx import workflows

        if self.generate is None:
            sequence = model.encode_target(self.target or "", language=self.language)
        else:
            written = self.written(model, heard, on)
            sequence = model.tokenizer.of_ids(written.ids, written.prompt)
        with flag_worded("--{}"):  # "--head 5 does not exist: ..."
            return workflows.alignment(model, heard, sequence, layers=self.layer, heads=self.head, on=on, progress=bar)

    def timed(self, model: Model, heard: AudioInput, on: Placement, bar: LayerProgress) -> Timestamps:
        """--timestamps: each token's and word's times, of the prompt, --target and the end token after it, or of
        the prompt and what the decoder writes (--generate)."""
        from attnx import workflows
        from attnx.workflows.timing import sequence_of

        if self.generate is None:
            sequence, prompt = sequence_of(model, self.target or "", language=self.language)
            return workflows.timestamps(model, heard, sequence, prompt, on=on, progress=bar)
        found = self.written(model, heard, on)
        sequence = model.tokenizer.of_ids(found.ids, found.prompt)
        return workflows.timestamps(model, heard, sequence, found.prompt, written=range(found.prompt, len(found.ids)),
                                    on=on, progress=bar)  # fmt: skip
