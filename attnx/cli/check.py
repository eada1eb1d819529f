"""`attnx check`: run the input on every engine, device and dtype; compare with a float64 reference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flags import CapFlags, InputFlags, ModelFlags, load_input
from attnx.cli.options import (
    AgainstOpt,
    CausalOpt,
    CheckLayoutOpt,
    CompareTensorOpt,
    ConfigArg,
    DModelOpt,
    HeadsOpt,
    KernelDtypeOpt,
    KvHeadsOpt,
    LayerOpt,
    Layout,
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
from attnx.cli.output import emit, emit_view
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec

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
    layout: CheckLayoutOpt = None,
    rope_theta: RopeThetaOpt = None,
    rope_pairs: RopePairsOpt = None,
    window: WindowOpt = None,
    softcap: SoftcapOpt = None,
    causal: CausalOpt = False,
    model: ModelOpt = None,
    text: TextOpt = None,
    layer: LayerOpt = None,
    against: AgainstOpt = None,
    kernel_dtype: KernelDtypeOpt = None,
    tensor: CompareTensorOpt = None,
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
    """Cross-check every engine/device/dtype against the float64 NumPy reference, or a kernel (--against).

    Exit 0 when every row is within tolerance, 1 when any is not.
    --against FILE: a kernel's output (.npy, or a result as attnx writes one) against the float64 reference.
    Per tensor: the error, in epsilons of --kernel-dtype, the worst element, a heatmap of where it is.
    When a known bug explains the error (wrong scale, a shifted mask, tiled K/V heads, ...), it says so.
    With --model, the layers before --layer run on the reference (numpy float64), the layer on every target.
    """
    parameters = dict(locals())
    head_layouts = {item.value for item in Layout}
    array_layout = layout.value if layout is not None and layout.value not in head_layouts else None
    parameters["layout"] = None if layout is None or array_layout else Layout(layout.value)
    inputs = InputFlags.pick(parameters)
    checkpoint = ModelFlags.pick(parameters)
    caps = CapFlags.pick(parameters)
    if against is None and (array_layout or kernel_dtype or tensor):
        raise UsageError("--kernel-dtype, --tensor and an array --layout describe the file given with --against")
    spec = load_input(config, inputs, checkpoint, caps)
    from attnx.render.serialize import dumps

    if against is not None:
        check_kernel(spec, against, caps, kernel_dtype and kernel_dtype.value, array_layout, tensor, rtol, atol,
                     output_format, output, no_color)  # fmt: skip
        return
    from attnx.analysis.check import run_check
    from attnx.engines import engine_statuses

    report = run_check(spec, engine_statuses(), rtol=rtol, atol=atol)
    from attnx.render import engines as render

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


def check_kernel(
    spec: AttentionSpec,
    against: str,
    caps: CapFlags,
    dtype: str | None,
    layout: str | None,
    names: list[str] | None,
    rtol: float | None,
    atol: float | None,
    output_format: RowFormat,
    output: str | None,
    no_color: bool,
) -> None:
    """`check --against`: the kernel's file against the float64 reference of ``spec``; exit 1 beyond tolerance."""
    from attnx.analysis.kernel import verify_kernel
    from attnx.io.results import BareArray, SavedResult, load_input_or_result
    from attnx.render import kernel as render
    from attnx.render.formats import check_tensor_names
    from attnx.render.serialize import dumps

    if output_format not in (RowFormat.table, RowFormat.json):
        raise UsageError(f"check --against writes table or json, not {output_format.value}")
    check_tensor_names(names)
    saved = load_input_or_result(against, limits=caps.limits())
    if not isinstance(saved, SavedResult | BareArray):
        raise UsageError(f"{against}: is an input; --against takes what a kernel computed (a result or one array)")
    verification = verify_kernel(spec, saved, dtype=dtype, layout=layout, names=names, rtol=rtol, atol=atol)
    emit_view(
        output_format,
        {OutputFormat.json: lambda: dumps(render.verification_to_dict(verification))},
        lambda colour: render.verification_view(verification, colour=colour, max_rows=40),
        output=output,
        no_color=no_color,
    )
    if not verification.passed:
        raise typer.Exit(ExitCode.FAILURE)
