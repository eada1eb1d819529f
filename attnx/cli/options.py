"""The command line's vocabulary: closed choices as enums, shared options as Annotated aliases, parsers."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import typer

from attnx.errors import UsageError
from attnx.limits import CAPS, Limits, env_name, flag_name, size_text


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


class RopePairs(str, Enum):
    """Which columns of a head rotary positions turn together."""

    half = "half"
    interleaved = "interleaved"


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


class CheckLayout(str, Enum):
    """Head columns of the input, or how the --against array is laid out."""

    contiguous = "contiguous"
    interleaved = "interleaved"
    nd = "nd"
    bnd = "bnd"
    hnd = "hnd"
    bhnd = "bhnd"
    nhd = "nhd"
    bnhd = "bnhd"
    hnm = "hnm"
    bhnm = "bhnm"


class KernelDtype(str, Enum):
    """What a kernel computed in."""

    float64 = "float64"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


LayoutOpt = Annotated[
    Layout | None,
    typer.Option("--layout", help="Head columns: contiguous blocks, or interleaved (column j → head j mod H).",
                 show_default=False),
]  # fmt: skip
WindowOpt = Annotated[
    int | None,
    typer.Option("--window", min=1, metavar="W", show_default=False,
                 help="Sliding window: each query sees itself and the W - 1 keys before it (causal)."),
]  # fmt: skip
SoftcapOpt = Annotated[
    float | None,
    typer.Option("--softcap", metavar="C", show_default=False,
                 help="Soft-cap the scaled scores: C·tanh(s/C) before the mask (Gemma 2 uses 50)."),
]  # fmt: skip
RopeThetaOpt = Annotated[
    float | None,
    typer.Option("--rope-theta", metavar="THETA", show_default=False,
                 help="Turn Q and K by rotary positions (RoPE) with this base, e.g. 10000."),
]  # fmt: skip
RopePairsOpt = Annotated[
    RopePairs | None,
    typer.Option("--rope-pairs", show_default=False,
                 help="RoPE column pairs: half (i, i + d/2, Hugging Face) or interleaved (2i, 2i + 1)."),
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
CompareTensorOpt = Annotated[
    list[str] | None,
    typer.Option("--tensor", metavar="NAME", help="Compare only this tensor (repeatable; named as the JSON keys). "
                 "Default: every tensor both sides hold.", show_default=False),
]  # fmt: skip
CheckLayoutOpt = Annotated[
    CheckLayout | None,
    typer.Option("--layout", help="Head columns of the input (contiguous, interleaved), or, with --against, how a "
                 "bare array is laid out: nd [query, H·d], hnd [head, query, d], nhd [query, head, d], hnm [head, "
                 "query, key] weights; b...: with a batch axis of 1 first (bhnd: SDPA's). Default: told from the "
                 "shape.", show_default=False),
]  # fmt: skip
AgainstOpt = Annotated[
    str | None,
    typer.Option("--against", metavar="FILE", help="Check a kernel's saved result against attnx's float64 "
                 "reference: a result (json, jsonl, npz, a folder of npy) or one .npy array (its output, head "
                 "outputs or weights).", show_default=False),
]  # fmt: skip
KernelDtypeOpt = Annotated[
    KernelDtype | None,
    typer.Option("--kernel-dtype", help="What the kernel computed in; sets the tolerances (default: the file's "
                 "dtype).", show_default=False),
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
TextsOpt = Annotated[
    str | None,
    typer.Option("--texts", metavar="FILE", help="With --model: texts to run, one per line (or JSON Lines with a "
                 "\"text\"); - reads stdin.",
                 show_default=False),
]  # fmt: skip
