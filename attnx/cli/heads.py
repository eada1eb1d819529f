"""`attnx heads`: per-head statistics, scale diagnostics and pattern labels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.common import (
    CausalOpt,
    ConfigArg,
    Device,
    DeviceOpt,
    DModelOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    ExportOpt,
    HeadsOpt,
    KvHeadsOpt,
    LayoutOpt,
    ModelOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    ReportFormat,
    ReportFormatOpt,
    ScaleOpt,
    SeedOpt,
    TextOpt,
    TokensOpt,
    View,
    ViewOpt,
    emit_view,
    guarded,
    load_input,
    warn_fully_masked,
)
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

LayerOrAllOpt = Annotated[
    str | None,
    typer.Option("--layer", metavar="L|all", help="With --model: the layer, counted from 1 as --head (default 1); "
                 "all: the model view, a layer × head grid of labels and entropy.", show_default=False),
]  # fmt: skip


@guarded
def heads(
    config: ConfigArg = None,
    heads: HeadsOpt = None,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    kv_heads: KvHeadsOpt = None,
    scale: ScaleOpt = None,
    layout: LayoutOpt = None,
    causal: CausalOpt = False,
    model: ModelOpt = None,
    text: TextOpt = None,
    layer: LayerOrAllOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 4,
    output_format: ReportFormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    view: ViewOpt = View.table,
    export: ExportOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
) -> None:
    """Per head: entropy, max weight, top key and effective keys per query; scale diagnostics; a pattern label.

    Labels: self, previous-token, first-token, induction, uniform, focused (thresholds in the README).
    --model DIR --text "..." --layer L: layer L of a local checkpoint; --layer all: every layer's heads in a grid.
    """
    from attnx.analysis.heads import head_stats
    from attnx.engines import compute

    if layer is not None and layer.strip().lower() == "all":
        if view is View.heatmap:
            raise UsageError("--layer all shows a grid of labels; --view heatmap draws one layer's weights")
        flags = {"-H/--heads": heads, "--seed": seed, "--tokens": tokens, "--d-model": d_model,
                 "--kv-heads": kv_heads, "--scale": scale, "--layout": layout, "--causal": causal}  # fmt: skip
        model_view(config, model=model, text=text, engine=engine.value, dtype=dtype and dtype.value,
                   device=device.value, output_format=output_format, output=output, export=export, quiet=quiet,
                   no_color=no_color, input_flags=flags)  # fmt: skip
        return
    spec = load_input(
        config, heads=heads, seed=seed, tokens=tokens, d_model=d_model, kv_heads=kv_heads, scale=scale,
        layout=layout, causal=causal, model=model, text=text, layer=layer, engine=engine.value,
        dtype=dtype and dtype.value, device=device.value, quiet=quiet,
    )  # fmt: skip
    result = compute(spec, engine.value, dtype=dtype and dtype.value, device=device.value)
    warn_fully_masked(result.fully_masked_rows, quiet)
    stats = head_stats(result)

    from attnx.render import heads as render
    from attnx.render.serialize import dumps

    def table(colour: bool) -> RenderableType:
        from rich.console import Group

        from attnx.render.tables import summary_line

        shown = render.heads_view(stats, result, precision, heatmap=view is View.heatmap, colour=colour)
        return Group(summary_line(result, spec.source), shown)

    emit_view(
        output_format,
        {OutputFormat.json: lambda: dumps(render.heads_to_dict(stats, result))},
        table,
        output=output,
        export=export,
        no_color=no_color,
    )


def model_view(
    config: str | None,
    *,
    model: str | None,
    text: str | None,
    engine: str,
    dtype: str | None,
    device: str,
    output_format: OutputFormat,
    output: str | None,
    export: str | None,
    quiet: bool,
    no_color: bool,
    input_flags: dict[str, object],
) -> None:
    """`attnx heads --model DIR --text ... --layer all`: the layer × head grid, as a table or JSON."""
    from attnx.cli.model_input import model_view as build

    view = build(config, model=model, text=text, engine=engine, dtype=dtype, device=device, quiet=quiet,
                 input_flags=input_flags)  # fmt: skip
    from attnx.render import model as render
    from attnx.render.serialize import dumps

    emit_view(
        output_format,
        {OutputFormat.json: lambda: dumps(render.model_view_to_dict(view))},
        lambda colour: render.model_view_table(view, colour=colour),
        output=output,
        export=export,
        no_color=no_color,
    )
