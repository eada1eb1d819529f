"""`attnx bench`: time engines over a range of sequence lengths."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags
from attnx.cli.options import Dtype, OutputFormat, ReportFormat, ReportFormatOpt
from attnx.cli.output import colour_allowed
from attnx.cli.viewflags import OutputFlags
from attnx.core.tensors import OUTPUT
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.analysis.bench import BenchRow, BenchSettings

LengthsOpt = Annotated[str, typer.Option("--lengths", help="Sequence lengths, comma-separated.")]
BenchHeadsOpt = Annotated[int, typer.Option("--heads", "-H", min=1, help="Number of heads.")]
BenchDModelOpt = Annotated[int, typer.Option("--d-model", min=1, help="Width of Q, K, V.")]
EnginesOpt = Annotated[
    str | None,
    typer.Option(
        "--engines",
        help="Engines to time, comma-separated: numpy, torch (default: every available one).",
    ),
]
BenchDtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Floating-point type of Q, K, V and the timed work.")]
PathOpt = Annotated[
    str,
    typer.Option("--path", metavar="output|weights", help="output: head outputs only (no N×N matrices); weights: "
                 "also the weights."),
]  # fmt: skip
RepeatOpt = Annotated[
    int,
    typer.Option("--repeat", min=1, help="Timed rounds, each side running once per round in turn; the best counts."),
]


def parse_ints(text: str, option: str) -> list[int]:
    """``"128,256"`` -> ``[128, 256]``; anything else is a usage error naming ``option``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{option} takes positive whole numbers separated by commas, got {text!r}")
    return values


@guarded
@grouped
def bench(
    *,
    lengths: LengthsOpt = "128,256,512,1024,2048",
    heads: BenchHeadsOpt = 8,
    d_model: BenchDModelOpt = 512,
    engines: EnginesOpt = None,
    dtype: BenchDtypeOpt = Dtype("float32"),
    path: PathOpt = OUTPUT,
    repeat: RepeatOpt = 3,
    output_format: ReportFormatOpt = ReportFormat.table,
    outputs: OutputFlags,
    caps: CapFlags,
) -> None:
    """Time the engines on random Q/K/V over a range of sequence lengths (progress on stderr).

    Per engine and length: the best time, the memory the full weights would take, the growth per length, GFLOP/s.
    With torch installed, also each time's ratio to bare torch SDPA on the same input.
    """
    from attnx.analysis.bench import PATHS, BenchSettings
    from attnx.engines import engine_statuses

    available = [s.name for s in engine_statuses() if s.available]
    chosen = [e.strip() for e in engines.split(",")] if engines else available
    missing = [e for e in chosen if e not in available]
    if missing:
        raise UsageError(f"engine {missing[0]!r} is not available; available: {', '.join(available)}")
    if path not in PATHS:
        raise UsageError(f"--path takes {' or '.join(PATHS)}, not {path!r}")
    sizes = parse_ints(lengths, "--lengths")
    if d_model % heads:
        raise UsageError(f"--d-model {d_model} is not divisible by --heads {heads}")
    settings = BenchSettings(sizes, heads, d_model, chosen, dtype.value, path, repeat)
    rows = run_with_progress(settings, outputs.no_color, caps)

    from attnx.render.bench import bench_table, bench_to_dict
    from attnx.render.serialize import dumps

    outputs.write(
        output_format,
        {
            OutputFormat.table: lambda: bench_table(rows, settings),
            OutputFormat.json: lambda: dumps(bench_to_dict(rows, settings)),
        },
    )


def run_with_progress(settings: BenchSettings, no_color: bool, caps: CapFlags) -> list[BenchRow]:
    """Run the benchmark with a Rich progress bar on stderr (shown only on a terminal)."""
    from rich.progress import Progress

    from attnx.analysis.bench import run_bench
    from attnx.text import console as inert_console

    console = inert_console(stderr=True, color_system="auto" if colour_allowed(no_color) else None)
    total = len(settings.lengths) * (len(settings.engines) + 1)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("benchmarking", total=total)

        def step(label: str) -> None:
            progress.update(task, description=label, advance=1)

        return run_bench(settings, step, limits=caps.limits())
