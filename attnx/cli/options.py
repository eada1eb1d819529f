"""The command line's vocabulary: closed choices as enums, shared options as Annotated aliases, parsers.

A choice that names what the library acts on (an engine, a dtype, a layout, rotary pairs) is made from its registry
in ``attnx.core.choices`` (``choices``), which imports nothing, so that ``--help`` stays light; the formats, views,
devices and array layouts are the command line's own, written out here.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Annotated, Any, TypeVar

import typer

from attnx.core.choices import DTYPES, ENGINE_NAMES, KERNEL_DTYPES, LAYOUTS, PAIRINGS
from attnx.errors import UsageError
from attnx.limits import CAPS, Limits, env_name, flag_name, size_text

C = TypeVar("C", bound=Enum)


def choices(names: Iterable[str]) -> Callable[[type[C]], type[C]]:
    """A class decorator: the ``str`` Enum it decorates, declared without members, made again with one member for
    each of ``names`` (a registry's, in its order), named and valued as the name (``Engine.numpy == "numpy"``).

    Typer offers an Enum's values as the option's choices; the type checker sees the class as declared, so code
    takes a member by its value (``Engine("numpy")``).
    """

    def remade(declared: type[C]) -> type[C]:
        members = {name: name for name in names}
        made: type[C] = typing.cast(Any, declared)(
            declared.__name__, members, module=declared.__module__, qualname=declared.__qualname__
        )
        made.__doc__ = declared.__doc__
        return made

    return remade


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


class RecordFormat(str, Enum):
    """What a command of records (detect) writes: its table, JSON, or JSON Lines (one record a line)."""

    table = "table"
    json = "json"
    jsonl = "jsonl"


AnyFormat = OutputFormat | RowFormat | ReportFormat | RecordFormat  # what any command's --format holds


@choices(DTYPES)
class Dtype(str, Enum):
    """Floating-point types an engine can compute in (the half types on torch alone)."""


@choices(ENGINE_NAMES)
class Engine(str, Enum):
    """Engines that compute attention."""


@choices(PAIRINGS)
class RopePairs(str, Enum):
    """Which columns of a head rotary positions turn together."""


@choices(LAYOUTS)
class Layout(str, Enum):
    """How heads own the columns of Q, K and V."""


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
    ),
]


class ArrayLayout(str, Enum):
    """How a bare array (one .npy a kernel wrote) holds its tensor."""

    nd = "nd"
    bnd = "bnd"
    hnd = "hnd"
    bhnd = "bhnd"
    nhd = "nhd"
    bnhd = "bnhd"
    hnm = "hnm"
    bhnm = "bhnm"


ArrayLayoutOpt = Annotated[
    ArrayLayout | None,
    typer.Option("--array-layout", help="How a bare .npy array is laid out: nd [query, H·d], hnd [head, query, d], "
                 "nhd [query, head, d], hnm [head, query, key] weights; b...: with a batch axis of 1 first (bhnd: "
                 "SDPA's). Default: told from the shape."),
]  # fmt: skip
# What --model takes; each flag group that offers --model says what its commands do with it, naming only flags
# those commands take (detect has --texts, no --text).
MODEL_HELP = (
    "A local checkpoint folder (config.json, model.safetensors, tokenizer.json), a GGUF file (or a folder holding "
    "one) or ollama:NAME[:TAG]"
)


@choices(KERNEL_DTYPES)
class KernelDtype(str, Enum):
    """What a kernel computed in."""


DropHeadOpt = Annotated[
    list[int] | None,
    typer.Option(
        "--drop-head", metavar="N", help="Zero head N (counted from 0, -1 the last) before concatenation; repeatable."
    ),
]
FORMAT_HELP = "Output format (stdout or --output)."
# Each command offers only the formats it can write: run all six (FormatOpt); trace, check and engines
# tables of rows (RowFormatOpt); bench, diff, heads and model a table or JSON (ReportFormatOpt); detect a
# table, JSON or JSON Lines (RecordFormat).
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
RowFormatOpt = Annotated[RowFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
ReportFormatOpt = Annotated[ReportFormat, typer.Option("--format", "-f", help=FORMAT_HELP)]
TensorOpt = Annotated[
    list[str] | None,
    typer.Option("--tensor", metavar="NAME", help="Tensors for csv/npy/npz (repeatable; named as the JSON keys)."),
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE atomically instead of stdout.")
]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colour or styles, even on a terminal.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", "-p", min=0, max=12, help="Decimals shown in tables.")]


def cap_option(cap: str, what: str) -> Any:
    """A --max-* option: its help names the default and the environment variable that also sets it."""
    value = getattr(Limits(), cap)
    shown = size_text(value) if CAPS[cap][1] == "bytes" else f"{value:,}"
    suffixes = "" if cap == "max_depth" else "; K, M, G suffixes multiply by 1024"
    return typer.Option(
        flag_name(cap), metavar="N", rich_help_panel="Input limits",
        help=f"{what} (default {shown}; or {env_name(cap)}){suffixes}.",
    )  # fmt: skip


def parse_scale(text: str) -> str | float:
    """``sqrt_dk``, ``sqrt_d_model``, ``none`` or a finite number."""
    from attnx.core.spec import SCALE_MODES

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


class View(str, Enum):
    """How a table-format command draws attention weights: numbers in tables, or heatmaps."""

    table = "table"
    heatmap = "heatmap"


TextsOpt = Annotated[
    str | None,
    typer.Option("--texts", metavar="FILE", help="With --model: texts to run, one per line (or JSON Lines with a "
                 "\"text\"); - reads stdin."),
]  # fmt: skip
