"""`attnx run`: compute multi-head attention and print every step."""

from __future__ import annotations

from typing import Annotated

import typer

from attnx.cli.common import (
    ConfigArg,
    DModelOpt,
    Dtype,
    DtypeOpt,
    Engine,
    EngineOpt,
    FormatOpt,
    HeadsOpt,
    NoColorOpt,
    OutputFormat,
    PrecisionOpt,
    SeedOpt,
    TokensOpt,
    guarded,
    load_input,
    stdout_console,
    write_stdout,
)
from attnx.errors import UsageError

SECTIONS = ("scores", "scaled", "weights", "heads", "output", "average")

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
    engine: EngineOpt = Engine.numpy,
    dtype: DtypeOpt = Dtype.float64,
    show: ShowOpt = None,
    precision: PrecisionOpt = 4,
    output_format: FormatOpt = OutputFormat.table,
    no_color: NoColorOpt = False,
) -> None:
    """Compute multi-head attention and print raw scores, scaled scores, weights and outputs.

    With no CONFIG: the worked example "The cat sat on mat" (H = 2). --seed with --tokens: random Q, K, V.
    """
    from attnx.engines import compute

    sections = parse_sections(show)
    spec = load_input(config, heads=heads, seed=seed, tokens=tokens, d_model=d_model)
    result = compute(spec, engine.value, dtype=dtype.value)

    if output_format is OutputFormat.json:
        from attnx.render.serialize import dumps, result_to_dict

        write_stdout(dumps(result_to_dict(result)))
        return
    from attnx.render.tables import Section, run_view, summary_line

    console = stdout_console(no_color)
    console.print(summary_line(result, spec.source))
    console.print(run_view(result, [Section(name) for name in sections], precision))
