"""`attnx run`: compute multi-head attention and print every step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.common import (
    CausalOpt,
    ConfigArg,
    Device,
    DeviceOpt,
    DModelOpt,
    DropHeadOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    FormatOpt,
    HeadsOpt,
    KvHeadsOpt,
    LayoutOpt,
    MaxBytesOpt,
    MaxDepthOpt,
    MaxDimensionOpt,
    MaxElementsOpt,
    MaxYamlBytesOpt,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    ScaleOpt,
    SeedOpt,
    TensorOpt,
    TokensOpt,
    check_destination,
    emit,
    guarded,
    load_input,
    warn_fully_masked,
)
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

SECTIONS = ("scores", "scaled", "weights", "heads", "output", "projected", "ablation", "average")

ShowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--show",
        "-s",
        metavar="SECTIONS",
        help=f"Sections to print, comma-separated or repeated: {', '.join(SECTIONS)}. Default: all.",
        show_default=False,
    ),
]


def parse_sections(values: list[str] | None) -> list[str]:
    """``["weights,output", "average"]`` -> ``["weights", "output", "average"]``, checked."""
    if not values:
        return list(SECTIONS)
    chosen = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        raise UsageError(f"unknown section {unknown[0]!r} for --show; choose from {', '.join(SECTIONS)}")
    return chosen


@guarded
def run(
    config: ConfigArg = None,
    heads: HeadsOpt = None,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    kv_heads: KvHeadsOpt = None,
    scale: ScaleOpt = None,
    layout: LayoutOpt = None,
    causal: CausalOpt = False,
    drop_head: DropHeadOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    show: ShowOpt = None,
    precision: PrecisionOpt = 4,
    output_format: FormatOpt = OutputFormat.table,
    tensor: TensorOpt = None,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Compute multi-head attention and print raw scores, scaled scores, weights and outputs.

    With no CONFIG: the worked example "The cat sat on mat" (H = 2). --seed with --tokens: random Q, K, V.
    """
    from attnx.engines import compute

    sections = parse_sections(show)
    check_destination(output_format, output)
    spec = load_input(
        config, heads=heads, seed=seed, tokens=tokens, d_model=d_model, kv_heads=kv_heads, scale=scale,
        layout=layout, causal=causal, drop_heads=drop_head,
        max_bytes=max_bytes, max_yaml_bytes=max_yaml_bytes, max_depth=max_depth, max_dimension=max_dimension,
        max_elements=max_elements,
    )  # fmt: skip
    result = compute(spec, engine.value, dtype=dtype and dtype.value, device=device.value)
    warn_fully_masked(result.fully_masked_rows, quiet)

    from attnx.render import formats
    from attnx.render.serialize import dumps, result_to_dict

    def table() -> RenderableType:
        from rich.console import Group

        from attnx.render.tables import Section, run_view, summary_line

        return Group(summary_line(result, spec.source), run_view(result, [Section(n) for n in sections], precision))

    emit(
        output_format,
        {
            OutputFormat.table: table,
            OutputFormat.json: lambda: dumps(result_to_dict(result)),
            OutputFormat.jsonl: lambda: formats.to_jsonl(formats.jsonl_records(result)),
            OutputFormat.csv: lambda: formats.to_csv(result, tensor),
            OutputFormat.npy: lambda: formats.to_npy(result, tensor),
            OutputFormat.npz: lambda: formats.to_npz(result, tensor),
        },
        output=output,
        no_color=no_color,
    )
