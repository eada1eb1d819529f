"""`attnx check`: run the input on every engine, device and dtype; compare with a float64 reference."""

from __future__ import annotations

from typing import Annotated

import typer

from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flags import CapFlags, InputFlags, ModelFlags, load_input
from attnx.cli.options import (
    CausalOpt,
    ConfigArg,
    DModelOpt,
    HeadsOpt,
    KvHeadsOpt,
    LayerOpt,
    LayoutOpt,
    MaxBytesOpt,
    MaxDepthOpt,
    MaxDimensionOpt,
    MaxElementsOpt,
    MaxYamlBytesOpt,
    ModelOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    RopePairsOpt,
    RopeThetaOpt,
    RowFormat,
    RowFormatOpt,
    ScaleOpt,
    SeedOpt,
    SoftcapOpt,
    TextOpt,
    TokensOpt,
    WindowOpt,
)
from attnx.cli.output import emit

RtolOpt = Annotated[
    float | None,
    typer.Option("--rtol", min=0.0, help="Relative tolerance (default: 1e-7 float64, 1.3e-6 float32).",
                 show_default=False),
]  # fmt: skip
AtolOpt = Annotated[
    float | None,
    typer.Option("--atol", min=0.0, help="Absolute tolerance (default: 1e-7 float64, 1e-5 × max(1, max|ref|) "
                 "float32).", show_default=False),
]  # fmt: skip


@guarded
def check(
    config: ConfigArg = None,
    heads: HeadsOpt = None,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    kv_heads: KvHeadsOpt = None,
    scale: ScaleOpt = None,
    layout: LayoutOpt = None,
    rope_theta: RopeThetaOpt = None,
    rope_pairs: RopePairsOpt = None,
    window: WindowOpt = None,
    softcap: SoftcapOpt = None,
    causal: CausalOpt = False,
    model: ModelOpt = None,
    text: TextOpt = None,
    layer: LayerOpt = None,
    rtol: RtolOpt = None,
    atol: AtolOpt = None,
    output_format: RowFormatOpt = RowFormat.table,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Cross-check every available engine/device/dtype against the float64 NumPy reference.

    Exit 0 when every row is within tolerance, 1 when any is not.
    With --model, the layers before --layer run on the reference (numpy float64), the layer on every target.
    """
    inputs = InputFlags.pick(locals())
    checkpoint = ModelFlags.pick(locals())
    caps = CapFlags.pick(locals())
    from attnx.analysis.check import run_check
    from attnx.engines import engine_statuses

    spec = load_input(config, inputs, checkpoint, caps)
    report = run_check(spec, engine_statuses(), rtol=rtol, atol=atol)
    from attnx.render import engines as render
    from attnx.render.serialize import dumps

    emit(
        output_format,
        {
            OutputFormat.table: lambda: render.check_view(report, spec.source),
            OutputFormat.json: lambda: dumps(render.check_to_dict(report)),
            OutputFormat.jsonl: lambda: render.check_jsonl(report),
            OutputFormat.csv: lambda: render.check_csv(report),
        },
        output=output,
        no_color=no_color,
    )
    if not report.passed:
        raise typer.Exit(ExitCode.FAILURE)
