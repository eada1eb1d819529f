"""`attnx trace`: explain how one query token's attention was computed, head by head."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, load_input
from attnx.cli.options import (
    CausalOpt,
    ConfigArg,
    Device,
    DeviceOpt,
    DModelOpt,
    DropHeadOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
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
    PrecisionOpt,
    QuietOpt,
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
    parse_limit,
)
from attnx.cli.output import emit, warn_fully_masked

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        "-t",
        help="The query token to trace, as tables show it (must appear once; cat also finds ' cat').",
        show_default=False,
    ),
]
QueryOpt = Annotated[
    int | None,
    typer.Option("--query", help="The query to trace by position, counted from 0.", show_default=False),
]
HeadOpt = Annotated[
    int | None,
    typer.Option(
        "--head",
        help="Trace only head N, counted from 0 as in the tables (0..H-1). Default: every head.",
        show_default=False,
    ),
]
TermsOpt = Annotated[
    str,
    typer.Option(
        "--terms",
        metavar="N|all",
        help="Products written out per dot product (the largest; the rest summed), and entries shown per vector.",
    ),
]
KeysOpt = Annotated[
    str,
    typer.Option(
        "--keys", metavar="N|all", help="Keys shown per head (the largest weights; the rest summed in one row)."
    ),
]


@guarded
def trace(
    config: ConfigArg = None,
    token: TokenOpt = None,
    query: QueryOpt = None,
    head: HeadOpt = None,
    terms: TermsOpt = "8",
    keys: KeysOpt = "10",
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
    drop_head: DropHeadOpt = None,
    model: ModelOpt = None,
    text: TextOpt = None,
    layer: LayerOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 4,
    output_format: RowFormatOpt = RowFormat.table,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Explain one query token step by step: per head, the dot products term by term, the softmax, the output.

    Pick the token with --token cat or --query 1. With no CONFIG: the worked example "The cat sat on mat".
    --model DIR --text "..." --layer L: layer L of a local checkpoint on that text.
    """
    inputs = InputFlags.pick(locals())
    checkpoint = ModelFlags.pick(locals())
    backend = EngineFlags.pick(locals())
    caps = CapFlags.pick(locals())
    from attnx.analysis.trace import build_trace, resolve_head, resolve_query
    from attnx.engines import compute

    term_limit, key_limit = parse_limit(terms, "--terms"), parse_limit(keys, "--keys")
    spec = load_input(config, inputs, checkpoint, caps, backend, drop_heads=drop_head, quiet=quiet, rows=1)
    row = resolve_query(spec.tokens, token=token, query=query)
    chosen = resolve_head(head, spec.settings.heads)
    # Only this query's row of each head is computed: a trace stays cheap on long inputs.
    result = compute(spec.select_queries([row]), **backend.options())
    warn_fully_masked(result.fully_masked_rows, quiet)
    explained = build_trace(result, heads=chosen, terms=term_limit, keys=key_limit)

    from attnx.render import trace as render
    from attnx.render import trace_data
    from attnx.render.serialize import dumps

    def table() -> RenderableType:
        from rich.console import Group

        return Group(render.source_line(result, spec.source), render.trace_view(explained, precision, term_limit))

    emit(
        output_format,
        {
            OutputFormat.table: table,
            OutputFormat.json: lambda: dumps(trace_data.trace_to_dict(explained)),
            OutputFormat.jsonl: lambda: trace_data.trace_jsonl(explained),
            OutputFormat.csv: lambda: trace_data.trace_csv(explained),
        },
        output=output,
        no_color=no_color,
    )
