"""`attnx rollout`: attention rollout (Abnar & Zuidema, 2020) of a local checkpoint, for one query."""

from __future__ import annotations

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
from attnx.cli.trace import QueryOpt, TokenOpt


@guarded
def rollout(
    model: ModelOpt = None,
    text: TextOpt = None,
    token: TokenOpt = None,
    query: QueryOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 2,
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
    """Attention rollout: how much each token reaches a query through every layer, residual stream included.

    Each layer: the heads' mean weights, half kept on the token itself (the residual), rows renormalised.
    The rollout after layer l multiplies those of layers 0..l (Abnar & Zuidema, 2020); causal models stay causal.
    --model DIR --text "..." and the query: --token cat or --query 3 (from 0).
    """
    backend = EngineFlags.pick(locals())
    display = ViewFlags.pick(locals())
    caps = CapFlags.pick(locals())
    from attnx.analysis.trace import resolve_query
    from attnx.cli.model_input import model_rollout

    found = model_rollout(model=model, text=text, quiet=display.quiet, limits=caps.limits(), **backend.options())
    row = resolve_query(found.tokens, token, query)
    from attnx.render import rollout as render
    from attnx.render.serialize import dumps

    display.emit(
        output_format,
        {OutputFormat.json: lambda: dumps(render.rollout_to_dict(found, row))},
        lambda colour: render.rollout_view(found, row, precision, colour=colour, max_rows=display.max_rows),
    )
