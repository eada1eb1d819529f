"""`attnx detect`: previous-token, duplicate-token and induction heads and sinks of a model, over many sequences."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags, CheckpointFlags, EngineFlags
from attnx.cli.inputs import STDIN, flag_worded, open_checkpoint, progress_for, require_checkpoint
from attnx.cli.options import OutputFormat, PrecisionOpt, RecordFormat, TextsOpt, choices
from attnx.cli.viewflags import ViewFlags
from attnx.core.measures import DETECT

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.detect import Detection, TextRecord


GRID_MEASURE = "induction"  # what the grid shows unless --measure says otherwise


@choices(dict.fromkeys((GRID_MEASURE, *DETECT.measures)))  # the default first, then in the rule's order
class Measure(str, Enum):
    """What the grid's numbers and colours show: a measure `detect` scores heads by."""


SamplesOpt = Annotated[int, typer.Option("--samples", min=1, max=10_000, help="Random sequences to run.")]
LengthOpt = Annotated[int, typer.Option("--length", min=2, max=100_000, help="Tokens in each random sequence "
                                        "(run twice over: 2 × LENGTH tokens, with the special tokens).")]  # fmt: skip
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the random sequences.")]
DetectFormatOpt = Annotated[RecordFormat, typer.Option("--format", "-f", help="table, json, or jsonl: one line per "
                                                      "sequence.")]  # fmt: skip
MeasureOpt = Annotated[Measure, typer.Option("--measure", "-m", help="What the grid shows under each label.")]


@guarded
@grouped
def detect(
    *,
    checkpoint: CheckpointFlags,
    texts: TextsOpt = None,
    samples: SamplesOpt = 8,
    length: LengthOpt = 24,
    seed: SeedOpt = 0,
    measure: MeasureOpt = Measure(GRID_MEASURE),
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
    """
    found, records = detection(checkpoint.model, texts, backend, caps, quiet=display.quiet, samples=samples,
                               length=length, seed=seed)  # fmt: skip
    from attnx.render import detect as render
    from attnx.render.serialize import dumps

    display.emit(
        output_format,
        {
            OutputFormat.json: lambda: dumps(render.detection_to_dict(found)),
            OutputFormat.jsonl: lambda: render.records_jsonl(records),
        },
        lambda colour: render.detection_view(found, measure.value, precision, colour=colour, max_rows=display.max_rows),
    )


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
) -> tuple[Detection, list[TextRecord]]:
    """Head detection on ``--model`` over the texts of ``--texts`` or, without it, over ``samples`` random
    sequences of ``length`` tokens repeated; with each sequence's own record."""
    from attnx import workflows
    from attnx.io.texts import read_texts

    model = require_checkpoint(model, "--texts" if texts is not None else "attnx detect")
    limits = caps.limits()
    lines = read_texts(texts, limits) if texts is not None else None
    source = "the texts on stdin" if texts == STDIN else f"the texts of {texts}"
    progress = progress_for(f"detecting over {'texts' if lines is not None else 'sequences'}", quiet)
    with open_checkpoint(model, backend, limits) as opened, progress as bar, flag_worded(f"--length {length}: {{}}"):
        return workflows.detect(opened, lines, samples=samples, length=length, seed=seed, source=source,
                                on=backend.placement(), progress=bar)  # fmt: skip
