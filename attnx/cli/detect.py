"""`attnx detect`: previous-token, duplicate-token and induction heads and sinks of a model, over many sequences."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flags import CapFlags, EngineFlags, ViewFlags
from attnx.cli.options import (
    Device,
    DeviceOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    ExportOpt,
    MaxBytesOpt,
    MaxDepthOpt,
    MaxDimensionOpt,
    MaxElementsOpt,
    MaxYamlBytesOpt,
    ModelOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    RowFormat,
    RowsOpt,
    TextsOpt,
    View,
    ViewOpt,
)


class Measure(str, Enum):
    """What the grid's numbers and colours show."""

    induction = "induction"
    previous = "previous-token"
    duplicate = "duplicate-token"
    sink = "sink"
    entropy = "entropy"


SamplesOpt = Annotated[int, typer.Option("--samples", min=1, max=10_000, help="Random sequences to run.")]
LengthOpt = Annotated[int, typer.Option("--length", min=2, max=100_000, help="Tokens in each random sequence "
                                        "(run twice over: 2 × LENGTH tokens, with the special tokens).")]  # fmt: skip
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the random sequences.")]
DetectFormatOpt = Annotated[RowFormat, typer.Option("--format", "-f", help="table, json, or jsonl: one line per "
                                                   "sequence.")]  # fmt: skip
MeasureOpt = Annotated[Measure, typer.Option("--measure", "-m", help="What the grid shows under each label.")]


@guarded
def detect(
    model: ModelOpt = None,
    texts: TextsOpt = None,
    samples: SamplesOpt = 8,
    length: LengthOpt = 24,
    seed: SeedOpt = 0,
    measure: MeasureOpt = Measure.induction,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 2,
    output_format: Annotated[
        RowFormat, typer.Option("--format", "-f", help="table, json, or jsonl: one line per sequence.")
    ] = RowFormat.table,
    output: OutputOpt = None,
    view: ViewOpt = View.table,
    rows: RowsOpt = "40",
    export: ExportOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Find previous-token, duplicate-token and induction heads and sinks, over many sequences, with the counts.

    Each score is the mean weight a head puts on its target key, over every position of every sequence.
    By default the sequences are random tokens repeated (Olsson et al., 2022).
    An induction head attends from each token of the repeat to the token after its earlier copy.
    --texts FILE runs your texts instead.
    """
    backend = EngineFlags.pick(locals())
    display = ViewFlags.pick(locals())
    caps = CapFlags.pick(locals())
    if output_format is RowFormat.csv:
        from attnx.errors import UsageError

        raise UsageError("attnx detect writes table, json or jsonl")
    from attnx.cli.model_input import model_detection

    found, records = model_detection(model=model, texts=texts, samples=samples, length=length, seed=seed,
                                     quiet=display.quiet, limits=caps.limits(), **backend.options())  # fmt: skip
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
