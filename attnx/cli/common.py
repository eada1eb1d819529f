"""What every command shares: option types, consoles, and turning errors into exit codes."""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, ParamSpec, TypeVar

import typer

from attnx.errors import AttnxError, UsageError
from attnx.limits import CAPS, Limits, env_name, flag_name, size_text

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console, RenderableType


EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

P = ParamSpec("P")
R = TypeVar("R")


class OutputFormat(str, Enum):
    """What a command writes on stdout (or to --output)."""

    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    npy = "npy"
    npz = "npz"


BINARY_FORMATS = (OutputFormat.npy, OutputFormat.npz)


class RowFormat(str, Enum):
    """What a command of rows (trace, check, engines) writes: its table, JSON, JSON lines or CSV."""

    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


class ReportFormat(str, Enum):
    """What a report command (bench, diff, heads, model) writes: its table, or JSON."""

    table = "table"
    json = "json"


class Dtype(str, Enum):
    """Floating-point types an engine can compute in."""

    float64 = "float64"
    float32 = "float32"


class Engine(str, Enum):
    """Engines that compute attention."""

    numpy = "numpy"
    torch = "torch"


class Layout(str, Enum):
    """How heads own the columns of Q, K and V."""

    contiguous = "contiguous"
    interleaved = "interleaved"


class Device(str, Enum):
    """Where the torch engine runs; auto picks CUDA, then MPS, then CPU."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


ConfigArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[CONFIG|-]",
        help="Input file (YAML, JSON or .npz), or - for stdin. Default: the built-in worked example.",
        show_default=False,
    ),
]
HeadsOpt = Annotated[
    int | None, typer.Option("--heads", "-H", min=1, help="Number of heads (overrides the input).", show_default=False)
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", min=0, help="Draw Q, K, V from a standard normal with this seed.", show_default=False),
]
TokensOpt = Annotated[
    str | None,
    typer.Option("--tokens", help='Token labels separated by spaces, e.g. "the quick brown fox".', show_default=False),
]
DModelOpt = Annotated[
    int | None,
    typer.Option("--d-model", min=1, help="Width of the random Q, K, V (with --seed; default 8).", show_default=False),
]
KvHeadsOpt = Annotated[
    int | None,
    typer.Option("--kv-heads", min=1, help="K/V heads for GQA/MQA (divides --heads); fewer than the input "
                 "has are mean-pooled within each group.", show_default=False),
]  # fmt: skip
ScaleOpt = Annotated[
    str | None,
    typer.Option(
        "--scale", help="Score multiplier: sqrt_dk (1/√d_k), sqrt_d_model, none, or a number.", show_default=False
    ),
]
LayoutOpt = Annotated[
    Layout | None,
    typer.Option("--layout", help="Head columns: contiguous blocks, or interleaved (column j → head j mod H).",
                 show_default=False),
]  # fmt: skip
CausalOpt = Annotated[
    bool, typer.Option("--causal", help="Add a causal mask: each query sees itself and earlier keys.")
]
DropHeadOpt = Annotated[
    list[int] | None,
    typer.Option("--drop-head", min=0, metavar="N", help="Zero head N (counted from 0) before concatenation; "
                 "repeatable.", show_default=False),
]  # fmt: skip
EngineOpt = Annotated[Engine, typer.Option("--engine", "-e", help="Engine that computes (torch is optional).")]
DeviceOpt = Annotated[Device, typer.Option("--device", help="Device: auto picks cuda, then mps, then cpu.")]
DtypeOpt = Annotated[
    Dtype | None,
    typer.Option("--dtype", help="Floating-point type (default: float64; float32 on mps).", show_default=False),
]
FORMAT_HELP = "Output format (stdout or --output)."
# Each command offers only the formats it can write: run all six (FormatOpt); trace, check and engines
# tables of rows (RowFormatOpt); bench, diff, heads and model a table or JSON (ReportFormatOpt).
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
RowFormatOpt = Annotated[RowFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
ReportFormatOpt = Annotated[ReportFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
OutputOpt = Annotated[
    str | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write to FILE atomically instead of stdout.",
                 show_default=False),
]  # fmt: skip
TensorOpt = Annotated[
    list[str] | None,
    typer.Option("--tensor", metavar="NAME", help="Tensors for csv/npy/npz (repeatable; named as the JSON keys).",
                 show_default=False),
]  # fmt: skip
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", "-p", min=0, max=12, help="Decimals shown in tables.")]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colour or styles, even on a terminal.")]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", metavar="DIR", help="A local checkpoint folder (config.json, model.safetensors, "
                 "tokenizer.json): explore one of its layers on --text.", show_default=False),
]  # fmt: skip
TextOpt = Annotated[
    str | None, typer.Option("--text", help="With --model: the text the model reads, or - for stdin.",
                             show_default=False)
]  # fmt: skip
LayerOpt = Annotated[
    str | None,
    typer.Option("--layer", metavar="L", help="With --model: the layer, counted from 0 (default 0).",
                 show_default=False),
]  # fmt: skip


def _cap_option(cap: str, what: str) -> Any:
    """A --max-* option: its help names the default and the environment variable that also sets it."""
    value = getattr(Limits(), cap)
    shown = size_text(value) if CAPS[cap][1] == "bytes" else f"{value:,}"
    suffixes = "" if cap == "max_depth" else "; K, M, G suffixes multiply by 1024"
    return typer.Option(
        flag_name(cap), metavar="N", rich_help_panel="Input limits", show_default=False,
        help=f"{what} (default {shown}; or {env_name(cap)}){suffixes}.",
    )  # fmt: skip


MaxBytesOpt = Annotated[str | None, _cap_option("max_bytes", "Most bytes one input may have")]
MaxYamlBytesOpt = Annotated[str | None, _cap_option("max_yaml_bytes", "Most bytes of YAML text")]
MaxDepthOpt = Annotated[str | None, _cap_option("max_depth", "Deepest nesting of a YAML or JSON input")]
MaxDimensionOpt = Annotated[str | None, _cap_option("max_dimension", "Longest axis of any array")]
MaxElementsOpt = Annotated[str | None, _cap_option("max_elements", "Most elements of any array, the scores too")]


def parse_scale(text: str) -> str | float:
    """``sqrt_dk``, ``sqrt_d_model``, ``none`` or a finite number."""
    from attnx.spec import SCALE_MODES

    if text in SCALE_MODES:
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise UsageError(f"--scale takes {', '.join(SCALE_MODES)} or a finite number, not {text!r}")
    return value


def parse_limit(value: str, option: str) -> int | None:
    """``"all"`` -> None, ``"8"`` -> 8; anything else is a usage error naming ``option``."""
    if value.strip().lower() == "all":
        return None
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise UsageError(f"{option} expects a whole number of at least 1 or 'all', got {value!r}")
    return limit


def warn(message: str) -> None:
    """One warning line on stderr."""
    sys.stderr.write(f"attnx: warning: {message}\n")


def warn_fully_masked(rows: tuple[int, ...], quiet: bool = False) -> None:
    """Say which queries had every key blocked (their weights and head outputs are zero)."""
    if rows and not quiet:
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        one = len(rows) == 1
        warn(
            f"{len(rows)} quer{'y' if one else 'ies'} ({shown}) {'has' if one else 'have'} every key blocked: "
            "weights and head outputs are zero there"
        )


def colour_allowed(no_color: bool) -> bool:
    """False when --no-color, NO_COLOR (any value) or TERM=dumb asks for plain text."""
    return not (no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb")


def stdout_console(no_color: bool = False) -> Console:
    """A console on the current stdout (ANSI only on a terminal; width from COLUMNS when piped)."""
    from rich.console import Console

    color_system: Literal["auto"] | None = "auto" if colour_allowed(no_color) else None
    # emoji=False: attnx prints no :emoji: codes, and rich would import its 2 ms table of them
    return Console(file=sys.stdout, highlight=False, emoji=False, color_system=color_system)


def write_stdout(text: str) -> None:
    """Machine output goes straight to stdout, never through Rich (no wrapping, no markup)."""
    sys.stdout.write(text)
    sys.stdout.flush()


Producer = Callable[[], "str | bytes | RenderableType"]


def check_destination(output_format: OutputFormat, output: str | None) -> None:
    """Refuse binary output to a terminal before any work is done."""
    if output_format in BINARY_FORMATS and output is None and sys.stdout.isatty():
        raise UsageError(
            f"--format {output_format.value} is binary; write it with --output FILE or redirect stdout to a file"
        )


def emit(
    output_format: OutputFormat | RowFormat | ReportFormat,
    producers: Mapping[OutputFormat, Producer],
    *,
    output: str | None = None,
    no_color: bool = False,
) -> None:
    """Produce ``output_format`` with its producer and deliver it to stdout or, atomically, to ``output``.

    A format the command has no producer for is a usage error listing the ones it has.
    """
    output_format = OutputFormat(output_format.value)
    make = producers.get(output_format)
    if make is None:
        names = ", ".join(f.value for f in producers)
        raise UsageError(f"--format {output_format.value} is not available for this command; choose from {names}")
    check_destination(output_format, output)
    payload = make()
    if output_format is OutputFormat.table:
        assert not isinstance(payload, bytes)  # a table is text or a renderable
        if output is None:
            stdout_console(no_color).print(payload)
            return
        payload = render_plain(payload)
    data = payload if isinstance(payload, bytes) else str(payload).encode("utf-8")
    if output is not None:
        from attnx.io.output import atomic_write

        atomic_write(output, data)
    elif isinstance(payload, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
    else:
        write_stdout(str(payload))


class View(str, Enum):
    """How a table-format command draws attention weights: numbers in tables, or heatmaps."""

    table = "table"
    heatmap = "heatmap"


ViewOpt = Annotated[View, typer.Option("--view", help="Weights as tables, or as heatmaps (colour, or shades).")]
RowsOpt = Annotated[
    str,
    typer.Option("--rows", metavar="N|all", help="Rows per table or heatmap: past N, the first and last N/2 "
                 "(all: every row)."),
]  # fmt: skip
ExportOpt = Annotated[
    str | None,
    typer.Option("--export", metavar="FILE.svg|.html|.txt", help="Also save what is printed as SVG, HTML or text.",
                 show_default=False),
]  # fmt: skip


def emit_view(
    output_format: OutputFormat | RowFormat | ReportFormat,
    producers: Mapping[OutputFormat, Producer],
    view: Callable[[bool], RenderableType],
    *,
    output: str | None = None,
    export: str | None = None,
    no_color: bool = False,
) -> None:
    """``emit``, where the table is ``view(colour)`` and can be saved, exactly as printed, with ``export``.

    ``colour`` tells the view whether colours will be seen, so that it can fall back to shade
    characters: on stdout, when the console shows colour; in an SVG or HTML export, unless colour is
    turned off; never in a text file. The export goes through Rich's recording console and is
    written atomically; an extension other than .svg, .html or .txt is a usage error.
    """
    from pathlib import Path

    output_format = OutputFormat(output_format.value)
    suffix = Path(export).suffix.lower() if export is not None else None
    if export is not None and (output_format is not OutputFormat.table or output is not None):
        raise UsageError("--export saves the table view; leave out --format and --output")
    if suffix not in (None, ".svg", ".html", ".txt"):
        raise UsageError(f"--export writes .svg, .html or .txt files, not {export!r}")
    if output_format is not OutputFormat.table or output is not None:
        emit(output_format, {OutputFormat.table: lambda: view(False), **producers}, output=output, no_color=no_color)
        return
    console = stdout_console(no_color)
    shown = console.color_system is not None
    wanted = colour_allowed(no_color) and suffix != ".txt"  # what the export shows
    console.record = export is not None and wanted == shown
    console.print(view(shown))
    if export is not None:
        from attnx.io.output import atomic_write

        # Piped stdout shows shades where an SVG shows colours: the export then draws its own copy.
        assert suffix is not None  # export is not None
        recorder = console if console.record else _recording_console(console.width, wanted)
        if recorder is not console:
            recorder.print(view(wanted))
        saved = {".svg": lambda: recorder.export_svg(title="attnx"), ".html": recorder.export_html,
                 ".txt": recorder.export_text}[suffix]()  # fmt: skip
        atomic_write(export, saved.encode("utf-8"))


def _recording_console(width: int, colour: bool) -> Console:
    """A console that only records, ``width`` columns wide, in true colour or none."""
    from rich.console import Console

    return Console(file=io.StringIO(), record=True, width=width, color_system="truecolor" if colour else None,
                   force_terminal=colour, highlight=False, emoji=False)  # fmt: skip


def render_plain(renderable: RenderableType) -> str:
    """A renderable as plain text (no ANSI), at the width of COLUMNS or 100, for files."""
    from rich.console import Console

    width = int(os.environ.get("COLUMNS", "0") or 0) or 100
    buffer = io.StringIO()
    console = Console(file=buffer, color_system=None, width=width, highlight=False, emoji=False)
    console.print(renderable)
    return buffer.getvalue()


DEBUG = {"on": bool(os.environ.get("ATTNX_DEBUG"))}


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one line on stderr (line breaks inside ``message`` become spaces) and leave with ``code``."""
    sys.stderr.write(f"attnx: error: {' '.join(message.splitlines())}\n")
    raise typer.Exit(code)


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Run a command, turning domain errors into one line on stderr and a documented exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except AttnxError as exc:
            fail(str(exc), EXIT_USAGE)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:
            # The reader went away (`attnx ... | head -1`): stop quietly, and keep Python's exit-time
            # flush of stdout from failing again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(EXIT_OK) from None
        except typer.Exit:
            raise
        except Exception as exc:
            if DEBUG["on"]:
                raise
            fail(
                f"unexpected {type(exc).__name__}: {exc} (re-run with --debug for the traceback)",
                EXIT_FAILURE,
            )

    return wrapper
