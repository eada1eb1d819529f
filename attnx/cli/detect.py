"""`attnx detect`: previous-token, duplicate-token and induction heads and sinks of a model, over many sequences."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags, CheckpointFlags, EngineFlags
from attnx.cli.inputs import (
    STDIN,
    attention_kind,
    flag_worded,
    open_checkpoint,
    progress_for,
    reads_target,
    refuse,
    require_checkpoint,
)
from attnx.cli.options import OutputFormat, PrecisionOpt, RecordFormat, TextsOpt, choices
from attnx.cli.viewflags import ViewFlags
from attnx.core.measures import CROSS, DETECT
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.detect import Detection, TextRecord


GRID_MEASURE = "induction"  # what the grid shows unless --measure says otherwise
CROSS_GRID_MEASURE = "monotonicity"  # what a cross-attention's grid shows unless --measure says otherwise


@choices(dict.fromkeys((GRID_MEASURE, *DETECT.measures, *CROSS.measures)))  # the defaults first, in the rules' order
class Measure(str, Enum):
    """What the grid's numbers and colours show: a measure `detect` scores heads by (a cross-attention's, with
    --attention cross)."""


SamplesOpt = Annotated[int, typer.Option("--samples", min=1, max=10_000, help="Random sequences to run.")]
LengthOpt = Annotated[int, typer.Option("--length", min=2, max=100_000, help="Tokens in each random sequence "
                                        "(run twice over: 2 × LENGTH tokens, with the special tokens).")]  # fmt: skip
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the random sequences.")]
DetectFormatOpt = Annotated[RecordFormat, typer.Option("--format", "-f", help="table, json, or jsonl: one line per "
                                                      "sequence.")]  # fmt: skip
MeasureOpt = Annotated[
    Measure | None,
    typer.Option("--measure", "-m", help="What the grid shows under each label (default: induction; with "
                 "--attention cross, monotonicity)."),
]  # fmt: skip
AttentionOpt = Annotated[
    str | None,
    typer.Option("--attention", metavar="KIND", help="Of an encoder-decoder: cross (the decoder's cross-attention, "
                 "scored by how it reads the source) or causal-self (the decoder's own), over --texts' targets or what "
                 "--generate N writes. Default: the model's first stack (the encoder)."),
]  # fmt: skip
GenerateOpt = Annotated[
    int | None,
    typer.Option("--generate", metavar="N", min=1, help="With --attention of a decoder, in place of the texts' "
                 "targets: the decoder writes up to N tokens greedily after each text, then reads them."),
]  # fmt: skip

AudioOpt = Annotated[
    str | None,
    typer.Option("--audio", metavar="FILE", help="A speech model (Whisper) hears the WAV file (PCM or float, 16 kHz) "
                 "once for every line of --texts, each a transcript its decoder reads (or for --generate N)."),
]  # fmt: skip
LanguageOpt = Annotated[
    str | None,
    typer.Option("--language", metavar="LANG", help="With --audio, for a multilingual Whisper: the language its "
                 "decoder writes in (en, fr, ...)."),
]  # fmt: skip


@guarded
@grouped
def detect(
    *,
    checkpoint: CheckpointFlags,
    texts: TextsOpt = None,
    samples: SamplesOpt = 8,
    length: LengthOpt = 24,
    seed: SeedOpt = 0,
    measure: MeasureOpt = None,
    attention: AttentionOpt = None,
    generate: GenerateOpt = None,
    audio: AudioOpt = None,
    language: LanguageOpt = None,
    backend: EngineFlags,
    precision: PrecisionOpt = 2,
    output_format: DetectFormatOpt = RecordFormat.table,
    display: ViewFlags,
    caps: CapFlags,
) -> None:
    """Find previous-token, duplicate-token and induction heads and sinks, over many sequences, with the counts.

    Each score is the mean weight a head puts on its target key, over every position of every sequence.
    By default the sequences are random tokens repeated (Olsson et al., 2022).
    An induction head attends from each token of the repeat to the token after its earlier copy.
    --texts FILE runs your texts instead.
    Of an encoder-decoder, --attention cross or causal-self scores the decoder's heads over each text's target.
    The targets: --texts as JSON Lines with a "text" and a "target" on each line, or --generate N (greedy).
    A cross-attention's heads: monotonicity, coverage, the weight on the source's end token, entropy.
    A speech model (Whisper) hears --audio FILE.wav, its decoder reading each line of --texts (or --generate N).
    """
    if audio is not None:
        found, records = heard_detection(checkpoint.model, audio, texts, backend, caps, quiet=display.quiet,
                                         attention=attention, generate=generate, language=language)  # fmt: skip
    else:
        refuse({"--language": language}, "is the language a speech model's decoder writes in: it goes with --audio")
        found, records = detection(checkpoint.model, texts, backend, caps, quiet=display.quiet, samples=samples,
                                   length=length, seed=seed, attention=attention, generate=generate)  # fmt: skip
    shown = grid_measure(found, measure)
    from attnx.render import detect as render
    from attnx.render.serialize import dumps

    display.emit(
        output_format,
        {
            OutputFormat.json: lambda: dumps(render.detection_to_dict(found)),
            OutputFormat.jsonl: lambda: render.records_jsonl(records),
        },
        lambda colour: render.detection_view(found, shown, precision, colour=colour, max_rows=display.max_rows),
    )


def heard_detection(
    model: str | None,
    audio: str,
    texts: str | None,
    backend: EngineFlags,
    caps: CapFlags,
    *,
    quiet: bool,
    attention: str | None,
    generate: int | None,
    language: str | None,
) -> tuple[Detection, list[TextRecord]]:
    """`detect --audio FILE`: a speech model's decoder, its attention of ``--attention``'s kind, reading each line of
    ``--texts`` (a line's text, or its "target") after the encoder heard the recording, or what it writes
    (``--generate N``): which cross-attention heads follow the audio in time."""
    from attnx import workflows
    from attnx.cli.flags import SourceFlags
    from attnx.cli.inputs import open_sensed
    from attnx.io.texts import read_pairs
    from attnx.models.stacks import AttentionKind

    path = require_checkpoint(model, "--audio")
    kind = attention_kind(attention)
    if kind is None or kind is AttentionKind.SELF:
        raise UsageError("--audio: detect scores a speech model's decoder over the recording: give --attention cross "
                         "or causal-self (heads --layer all --audio FILE shows the encoder's heads)")  # fmt: skip
    if (texts is None) == (generate is None):
        raise UsageError("--audio: the decoder reads the lines of --texts FILE (each a transcript) or writes "
                         "--generate N tokens: give one of them")  # fmt: skip
    opened, heard = open_sensed(None, SourceFlags(model=path, audio=audio), backend, caps, quiet=quiet)
    with opened, progress_for("detecting over targets", quiet) as bar:
        pairs = None if texts is None else read_pairs(texts, caps.limits())
        targets = None if pairs is None else [text if target is None else target for text, target in pairs]
        source = f"{audio}, heard once for every target" if targets is not None else f"{audio}"
        return workflows.detect_decoder(opened, [], targets, kind=kind, generate=generate, source=source,
                                        on=backend.placement(), progress=bar, heard=heard,
                                        language=language)  # fmt: skip


def grid_measure(found: Detection, measure: Measure | None) -> str:
    """What the grid shows: ``--measure`` (one of the rule's), else the rule's default (induction; monotonicity for
    a cross-attention)."""
    rule = found.rule
    if measure is None:
        return CROSS_GRID_MEASURE if rule is CROSS else GRID_MEASURE
    if measure.value not in rule.measures:
        heads = "a cross-attention's heads" if rule is CROSS else "these heads"
        raise UsageError(f"--measure {measure.value}: {heads} are scored by {', '.join(rule.measures)}")
    return measure.value


def detection(
    model: str | None,
    texts: str | None,
    backend: EngineFlags,
    caps: CapFlags,
    *,
    quiet: bool,
    samples: int = 0,
    length: int = 0,
    seed: int = 0,
    attention: str | None = None,
    generate: int | None = None,
) -> tuple[Detection, list[TextRecord]]:
    """Head detection on ``--model`` over the texts of ``--texts`` or, without it, over ``samples`` random
    sequences of ``length`` tokens repeated; with each sequence's own record. With ``--attention`` of a decoder
    (``attention``: cross or causal-self), its heads over each text's target, or what it writes (``generate``)."""
    from attnx import workflows
    from attnx.io.texts import read_pairs

    model = require_checkpoint(model, "--texts" if texts is not None else "attnx detect")
    kind = attention_kind(attention)
    limits = caps.limits()
    pairs = read_pairs(texts, limits) if texts is not None else None
    lines = None if pairs is None else [text for text, _ in pairs]
    source = "the texts on stdin" if texts == STDIN else f"the texts of {texts}"
    progress = progress_for(f"detecting over {'texts' if lines is not None else 'sequences'}", quiet)
    with open_checkpoint(model, backend, limits) as opened, progress as bar, flag_worded(f"--length {length}: {{}}"):
        if kind is not None and reads_target(opened, kind, attention or ""):
            if pairs is None:
                raise UsageError(f"--attention {attention}: the decoder reads each text's target: give --texts FILE "
                                 '(JSON Lines with a "text" and a "target" on each line), or --texts FILE with '
                                 "--generate N")  # fmt: skip
            targets = [target for _, target in pairs]
            if generate is not None and any(target is not None for target in targets):
                raise UsageError(f'--generate writes the targets the decoder reads; {texts} gives them ("target"): '
                                 "give one or the other")  # fmt: skip
            if generate is None and None in targets:
                index = targets.index(None)
                raise UsageError(
                    f'--attention {attention}: {source}, text {index} (from 0), has no "target" for '
                    'the decoder to read: give each line a "target" beside its "text", or --generate N'
                )
            return workflows.detect_decoder(opened, lines or [], targets, kind=kind, generate=generate,
                                            source=source, on=backend.placement(), progress=bar)  # fmt: skip
        if generate is not None:
            raise UsageError("--generate writes what a decoder reads: it goes with --attention cross or causal-self "
                             "of an encoder-decoder")  # fmt: skip
        return workflows.detect(opened, lines, samples=samples, length=length, seed=seed, source=source,
                                on=backend.placement(), progress=bar)  # fmt: skip
