"""`attnx trace`: explain how one query token's attention was computed, head by head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, PickFlags
from attnx.cli.inputs import flag_worded, load_input
from attnx.cli.options import (
    ConfigArg,
    DropHeadOpt,
    OutputFormat,
    PrecisionOpt,
    QuietOpt,
    RowFormat,
    RowFormatOpt,
    parse_limit,
)
from attnx.cli.output import warn_fully_masked
from attnx.cli.viewflags import OutputFlags
from attnx.errors import AmbiguousError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        "-t",
        help="The query token to trace, as tables show it (must appear once; cat also finds ' cat').",
    ),
]
QueryOpt = Annotated[int | None, typer.Option("--query", help="The query to trace by position, counted from 0.")]
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
@grouped
def trace(
    config: ConfigArg = None,
    *,
    token: TokenOpt = None,
    query: QueryOpt = None,
    pick: PickFlags,
    terms: TermsOpt = "8",
    keys: KeysOpt = "10",
    inputs: InputFlags,
    drop_head: DropHeadOpt = None,
    checkpoint: ModelFlags,
    backend: EngineFlags,
    precision: PrecisionOpt = 4,
    output_format: RowFormatOpt = RowFormat.table,
    outputs: OutputFlags,
    quiet: QuietOpt = False,
    caps: CapFlags,
) -> None:
    """Explain one query token step by step: per head, the dot products term by term, the softmax, the output.

    Pick the token with --token cat or --query 1. With no CONFIG: the worked example "The cat sat on mat".
    --model DIR --text "..." --layer L: layer L of a local checkpoint on that text.
    """
    from attnx.analysis.trace import build_trace
    from attnx.engines import compute

    term_limit, key_limit = parse_limit(terms, "--terms"), parse_limit(keys, "--keys")

    def queried(tokens: Sequence[str]) -> int:  # a model's text: checked before any layer runs
        return query_row(tokens, token, query)

    spec = load_input(config, inputs, checkpoint, caps, backend, drop_heads=drop_head, quiet=quiet, queried=queried)
    row = query_row(spec.tokens, token, query)
    chosen = pick.heads_of(spec.settings.heads)
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

    outputs.write(
        output_format,
        {
            OutputFormat.table: table,
            OutputFormat.json: lambda: dumps(trace_data.trace_to_dict(explained)),
            OutputFormat.jsonl: lambda: trace_data.trace_jsonl(explained),
            OutputFormat.csv: lambda: trace_data.trace_csv(explained),
        },
    )


def query_row(tokens: Sequence[str], token: str | None, query: int | None) -> int:
    """The query ``--token`` or ``--query`` picks (exactly one of them), counted from 0."""
    from attnx.analysis.trace import listing, resolve_query

    if token is not None and query is not None:
        raise UsageError(f"give --token or --query, not both (got --token {token!r} and --query {query})")
    if token is None and query is None:
        raise UsageError(f"pick the query to trace with --token or --query; tokens: {listing(tokens)}")
    with flag_worded("{} with --query", AmbiguousError):
        return resolve_query(tokens, token=token, query=query)
