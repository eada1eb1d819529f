"""`attnx ablate`: what dropping heads does to a local checkpoint's last hidden state and next-token guesses."""

from __future__ import annotations

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
    ReportFormat,
    ReportFormatOpt,
    RowsOpt,
    TextOpt,
    View,
    ViewOpt,
)

HeadOpt = Annotated[
    list[str] | None,
    typer.Option("--head", metavar="L2H3", help="A head to drop, as L2H3 (layer 2, head 3, both from 0) or 2.3; "
                 "repeat it or separate with commas to drop several together. Default: each head alone, in turn.",
                 show_default=False),
]  # fmt: skip


LayerOpt = Annotated[
    int | None,
    typer.Option("--layer", min=0, metavar="L", help="Without --head: drop the heads of layer L (from 0) one by one, "
                 "not every layer's.", show_default=False),
]  # fmt: skip


@guarded
def ablate(
    model: ModelOpt = None,
    text: TextOpt = None,
    head: HeadOpt = None,
    layer: LayerOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 3,
    output_format: ReportFormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    view: ViewOpt = View.heatmap,
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
    """Drop heads and measure the whole model: its last hidden state and, with an LM head, its next-token guesses.

    A dropped head's output is zeroed before W_o, as transformers' head_mask did.
    Without --head every head (of --layer L only, when given) is dropped alone in turn: a layer × head heatmap.
    Per token: the shift ‖h' − h‖ / ‖h‖, the KL of the next-token distribution (nats) and its top token.
    """
    backend = EngineFlags.pick(locals())
    display = ViewFlags.pick(locals())
    caps = CapFlags.pick(locals())
    from attnx.cli.model_input import model_ablations

    found = model_ablations(model=model, text=text, heads=head, layer=layer, quiet=display.quiet, limits=caps.limits(),
                            **backend.options())  # fmt: skip
    from attnx.render import effects as render
    from attnx.render.serialize import dumps

    display.emit(
        output_format,
        {OutputFormat.json: lambda: dumps(render.ablations_to_dict(found))},
        lambda colour: render.ablations_view(found, precision, colour=colour, max_rows=display.max_rows),
    )
