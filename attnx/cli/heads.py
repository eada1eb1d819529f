"""`attnx heads`: per-head statistics, scale diagnostics and pattern labels."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    FormatOpt,
    HeadsOpt,
    KvHeadsOpt,
    LayoutOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    ScaleOpt,
    SeedOpt,
    TokensOpt,
    View,
    ViewOpt,
    emit_view,
    guarded,
    load_input,
    warn_fully_masked,
)

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType


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
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 4,
    output_format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    view: ViewOpt = View.table,
    export: ExportOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
) -> None:
    """Per head: entropy, max weight, top key and effective keys per query; scale diagnostics; a pattern label.

    Labels: self, previous-token, first-token, induction, uniform, focused (thresholds in the README).
    """
    from attnx.analysis.heads import head_stats
    from attnx.engines import compute

    spec = load_input(
        config, heads=heads, seed=seed, tokens=tokens, d_model=d_model, kv_heads=kv_heads, scale=scale,
        layout=layout, causal=causal,
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
