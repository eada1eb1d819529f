"""Flag groups: the options several commands share, each declared once as a field of a small frozen dataclass.

A field's ``Annotated`` type carries its Typer option. A command takes the groups it offers as parameters
(``def run(config: ConfigArg = None, *, inputs: InputFlags, engine: EngineFlags, ...)``) and ``grouped``
expands them, once, into the flat signature Typer reads; each call gathers the values back into the groups.
A group parameter's default (``display: ViewFlags = ViewFlags(view=View.heatmap)``) sets the defaults its
options show for that command.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from attnx.cli.options import (
    MODEL_HELP,
    AnyFormat,
    ArrayLayoutOpt,
    Device,
    Dtype,
    Engine,
    Layout,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    ReportFormat,
    ReportFormatOpt,
    RopePairs,
    View,
    cap_option,
    parse_limit,
    parse_scale,
)
from attnx.cli.output import Producer, emit, emit_view
from attnx.errors import ConfigError, UsageError
from attnx.limits import CAPS, Limits

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from attnx.core.overrides import SettingOverrides
    from attnx.io import InputOverrides


F = TypeVar("F", bound=Callable[..., Any])


class FlagGroup:
    """A group of flags: the base of each frozen dataclass whose fields are options (see ``grouped``)."""

    def given(self) -> dict[str, object]:
        """Each flag of the group as typed on the command line (``-H/--heads``, ``--seed``) -> its value (None or
        False when not given), for messages that name the first one given."""
        fields = dataclasses.fields(typing.cast(Any, self))  # every group is a dataclass
        return {_flag_of(type(self), field.name): getattr(self, field.name) for field in fields}


@functools.cache
def _hints(group: type) -> dict[str, Any]:
    """The resolved ``Annotated`` types of a group's fields (read once per group)."""
    return typing.get_type_hints(group, include_extras=True)


def _flag_of(group: type, name: str) -> str:
    """How a field of ``group`` is typed on the command line, short form first: ``-H/--heads``, ``--seed``."""
    for extra in getattr(_hints(group)[name], "__metadata__", ()):
        if isinstance(extra, typer.models.OptionInfo):
            decls = [d for d in (extra.default, *(extra.param_decls or ())) if isinstance(d, str) and d.startswith("-")]
            return "/".join(sorted(decls, key=len))
    return "--" + name.replace("_", "-")


def _is_group(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, FlagGroup) and dataclasses.is_dataclass(annotation)


def grouped(command: F) -> F:
    """``command`` with each FlagGroup parameter expanded into its options (the signature Typer reads).

    The options keep the group's field order; two groups that declare the same option name are an error
    when the command is defined, not when it runs.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints[parameter.name]
        if not _is_group(annotation):
            parameters.append(parameter.replace(annotation=annotation, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        base = None if parameter.default is inspect.Parameter.empty else parameter.default
        names = [field.name for field in dataclasses.fields(annotation)]
        groups[parameter.name] = (annotation, names)
        for field in dataclasses.fields(annotation):
            default = getattr(base, field.name) if base is not None else field.default
            parameters.append(
                inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                  annotation=_hints(annotation)[field.name])
            )  # fmt: skip
    seen = [parameter.name for parameter in parameters]
    twice = sorted({name for name in seen if seen.count(name) > 1})
    if twice:
        raise TypeError(f"{command.__name__}: options declared twice: {', '.join(twice)}")

    @functools.wraps(command)
    def expanded(**values: Any) -> Any:
        for name, (group, fields) in groups.items():
            values[name] = group(**{field: values.pop(field) for field in fields})
        return command(**values)

    expanded.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    expanded.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return typing.cast(F, expanded)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomFlags(FlagGroup):
    """--seed, --tokens, --d-model: random Q, K and V in place of an input."""

    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Draw Q, K, V from a standard normal with this seed.")
    ] = None
    tokens: Annotated[
        str | None, typer.Option("--tokens", help='Token labels separated by spaces, e.g. "the quick brown fox".')
    ] = None
    d_model: Annotated[
        int | None, typer.Option("--d-model", min=1, help="Width of the random Q, K, V (with --seed; default 8).")
    ] = None

    def input_overrides(self, heads: int | None = None, kv_heads: int | None = None) -> InputOverrides:
        """What these flags say the input is, split into ``heads`` of which ``kv_heads`` K/V heads (for random
        inputs: how many they draw)."""
        from attnx.io import InputOverrides

        tokens = tuple(self.tokens.split()) if self.tokens is not None else None
        return InputOverrides(seed=self.seed, tokens=tokens, d_model=self.d_model, heads=heads, kv_heads=kv_heads)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SettingFlags(FlagGroup):
    """--causal, --window, --softcap, --rope-theta, --rope-pairs: attention settings any input can take.

    Each field is named as the setting it replaces (``AttentionSettings``); ``rope_theta`` and ``rope_pairs``
    replace the fields of its rotary positions.
    """

    causal: Annotated[
        bool, typer.Option("--causal", help="Add a causal mask: each query sees itself and earlier keys.")
    ] = False
    window: Annotated[
        int | None,
        typer.Option("--window", min=1, metavar="W",
                     help="Sliding window: each query sees itself and the W - 1 keys before it (causal)."),
    ] = None  # fmt: skip
    softcap: Annotated[
        float | None,
        typer.Option("--softcap", metavar="C",
                     help="Soft-cap the scaled scores: C·tanh(s/C) before the mask (Gemma 2 uses 50)."),
    ] = None  # fmt: skip
    rope_theta: Annotated[
        float | None,
        typer.Option("--rope-theta", metavar="THETA",
                     help="Turn Q and K by rotary positions (RoPE) with this base, e.g. 10000."),
    ] = None  # fmt: skip
    rope_pairs: Annotated[
        RopePairs | None,
        typer.Option("--rope-pairs",
                     help="RoPE column pairs: half (i, i + d/2, Hugging Face) or interleaved (2i, 2i + 1)."),
    ] = None  # fmt: skip

    def changes(self) -> dict[str, Any]:
        """The settings given (name -> value), as ``SettingOverrides`` takes them."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(SettingFlags)}
        values["causal"] = self.causal or None  # absent: the input's own mask stays
        if self.rope_pairs is not None:
            values["rope_pairs"] = self.rope_pairs.value
        return {name: value for name, value in values.items() if value is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeadFlags(FlagGroup):
    """-H, --kv-heads, --scale, --layout: how the heads split the input and scale their scores."""

    heads: Annotated[
        int | None, typer.Option("--heads", "-H", min=1, help="Number of heads (overrides the input).")
    ] = None
    kv_heads: Annotated[
        int | None,
        typer.Option("--kv-heads", min=1, help="K/V heads for GQA/MQA (divides --heads); fewer than the input "
                     "has are mean-pooled within each group."),
    ] = None  # fmt: skip
    scale: Annotated[
        str | None, typer.Option("--scale", help="Score multiplier: sqrt_dk (1/√d_k), sqrt_d_model, none, or a number.")
    ] = None
    layout: Annotated[
        Layout | None,
        typer.Option("--layout", help="Head columns: contiguous blocks, or interleaved (column j → head j mod H)."),
    ] = None

    def changes(self) -> dict[str, Any]:
        """The head settings given (name -> value); --scale is checked here."""
        values = {
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "scale": parse_scale(self.scale) if self.scale is not None else None,
            "layout": self.layout.value if self.layout is not None else None,
        }
        return {name: value for name, value in values.items() if value is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputFlags(SettingFlags, RandomFlags, HeadFlags):
    """Everything that replaces the input's keys: the head, random-input and setting flags together."""

    def overrides(self, drop_heads: list[int] | None = None) -> tuple[InputOverrides, SettingOverrides]:
        """What describes the input (random Q, K, V), and the settings that replace its own (``--drop-head``
        included); ``--kv-heads`` is both where it says how many K/V heads random inputs draw."""
        from attnx.core.overrides import SettingOverrides

        changes = HeadFlags.changes(self) | SettingFlags.changes(self)
        if drop_heads:
            changes["dropped_heads"] = tuple(drop_heads)
        return self.input_overrides(self.heads, self.kv_heads), SettingOverrides(**changes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PickFlags(FlagGroup):
    """--head: one head of the input, shown (or traced) alone."""

    head: Annotated[
        int | None,
        typer.Option("--head", metavar="N", help="Only head N, counted from 0 as in the tables, -1 the last. "
                     "Default: every head."),
    ] = None  # fmt: skip

    def heads_of(self, n_heads: int) -> tuple[int, ...] | None:
        """The heads to show of ``n_heads``, counted from 0 (None: every head); one out of range is a usage
        error that gives the range."""
        if self.head is None:
            return None
        from attnx.analysis.trace import resolve_head

        return resolve_head(self.head, n_heads)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareFlags(FlagGroup):
    """--tensor, --array-layout, --rtol, --atol: what a comparison reads and how close is close enough."""

    tensor: Annotated[
        list[str] | None,
        typer.Option("--tensor", metavar="NAME", help="Compare only this tensor (repeatable; named as the JSON "
                     "keys). Default: every tensor both sides hold."),
    ] = None  # fmt: skip
    array_layout: ArrayLayoutOpt = None
    rtol: Annotated[
        float | None,
        typer.Option("--rtol", help="Relative tolerance, a finite number ≥ 0 (default: 1e-7 float64, 1.3e-6 float32)."),
    ] = None
    atol: Annotated[
        float | None,
        typer.Option("--atol", help="Absolute tolerance, a finite number ≥ 0 (default: 1e-7 float64, 1e-5 × max(1, "
                     "max|ref|) float32)."),
    ] = None  # fmt: skip

    def __post_init__(self) -> None:
        from attnx.analysis.tolerance import check_tolerances

        try:  # refused before any input is read, as for every flag
            check_tolerances(self.rtol, self.atol, ("--rtol", "--atol"))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointFlags(FlagGroup):
    """--model: a local checkpoint (``detect``'s: it reads random sequences, or its own --texts)."""

    model: Annotated[
        str | None,
        typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": find its heads over random sequences or --texts."),
    ] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextFlags(CheckpointFlags):
    """--model, --text: a local checkpoint and the text it reads."""

    model: Annotated[
        str | None, typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": run every layer of it on --text.")
    ] = None
    text: Annotated[
        str | None, typer.Option("--text", help="With --model: the text the model reads, or - for stdin.")
    ] = None

    @property
    def wanted(self) -> bool:
        """True when any of the model's flags is given (the input then comes from the model)."""
        return any(value is not None for value in dataclasses.asdict(self).values())


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelFlags(TextFlags):
    """--model, --text, --layer: one layer of a local checkpoint as the input."""

    model: Annotated[str | None, typer.Option("--model", metavar="PATH", help=MODEL_HELP + ": explore one of its "
                                              "layers (--layer) on --text.")] = None  # fmt: skip
    layer: Annotated[
        str | None,
        typer.Option("--layer", metavar="L", help="With --model: the layer, counted from 0, -1 the last (default 0)."),
    ] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPairFlags(FlagGroup):
    """--model once (sweep a layer of it) or twice (compare two checkpoints head by head), --text, --layer."""

    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            metavar="PATH",
            help=MODEL_HELP + ": explore one of its layers (--layer) on "
            "--text. Twice: compare two checkpoints head by head.",
        ),
    ] = None
    text: Annotated[
        str | None, typer.Option("--text", help="With --model: the text the model reads, or - for stdin.")
    ] = None
    layer: Annotated[
        str | None,
        typer.Option("--layer", metavar="L", help="With --model: the layer, counted from 0, -1 the last (default 0)."),
    ] = None

    @property
    def pair(self) -> tuple[str, str] | None:
        """The two checkpoints when --model is given twice (None: fewer; more is a UsageError)."""
        models = self.model or []
        if len(models) > 2:
            raise UsageError(f"--model is given {len(models)} times: once to sweep a layer, twice to compare two")
        return (models[0], models[1]) if len(models) == 2 else None

    def single(self) -> ModelFlags:
        """The flags as one checkpoint's (--model given once, or not at all)."""
        return ModelFlags(model=self.model[0] if self.model else None, text=self.text, layer=self.layer)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineFlags(FlagGroup):
    """--engine, --device, --dtype: what computes, where, in which floating-point type."""

    engine: Annotated[Engine, typer.Option("--engine", "-e", help="Engine that computes (torch is optional).")] = (
        Engine("numpy")  # noqa: RUF009 - a member of an Enum, which never changes
    )
    device: Annotated[Device, typer.Option("--device", help="Device: auto picks cuda, then mps, then cpu.")] = (
        Device.auto
    )
    dtype: Annotated[
        Dtype | None, typer.Option("--dtype", help="Floating-point type (default: float64; float32 on mps).")
    ] = None

    def options(self) -> dict[str, Any]:
        """``engine``, ``dtype`` and ``device`` as the strings ``attnx.engines.compute`` takes."""
        return {"engine": self.engine.value, "dtype": self.dtype and self.dtype.value, "device": self.device.value}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CapFlags(FlagGroup):
    """--max-bytes, --max-yaml-bytes, --max-depth, --max-dimension, --max-elements, --max-weight-bytes: the caps."""

    max_bytes: Annotated[str | None, cap_option("max_bytes", "Most bytes one input may have")] = None
    max_yaml_bytes: Annotated[str | None, cap_option("max_yaml_bytes", "Most bytes of YAML text")] = None
    max_depth: Annotated[str | None, cap_option("max_depth", "Deepest nesting of a YAML or JSON input")] = None
    max_dimension: Annotated[str | None, cap_option("max_dimension", "Longest axis of any array")] = None
    max_elements: Annotated[str | None, cap_option("max_elements", "Most elements of any array, the scores too")] = None
    max_weight_bytes: Annotated[
        str | None, cap_option("max_weight_bytes", "Most bytes of one checkpoint weight read whole, as float64")
    ] = None

    def limits(self) -> Limits:
        """The caps: defaults, replaced by ``ATTNX_MAX_*``, replaced by these flags."""
        return Limits.from_env(**{cap: getattr(self, cap) for cap in CAPS})


class Destination:
    """How the groups that say where a result goes (``OutputFlags``, ``ViewFlags``) write it: to stdout or
    ``--output``, in colour unless ``--no-color``, and a table also to ``--export`` where the group offers it."""

    output: str | None
    no_color: bool
    export: str | None = None

    def write(self, output_format: AnyFormat, producers: Mapping[OutputFormat, Producer]) -> None:
        """Write the result in ``output_format`` to stdout or ``--output`` (see ``emit``)."""
        emit(output_format, producers, output=self.output, no_color=self.no_color)

    def emit(
        self,
        output_format: AnyFormat,
        producers: Mapping[OutputFormat, Producer],
        table: Callable[[bool], RenderableType],
    ) -> None:
        """Write the result in ``output_format`` to stdout or ``--output``; a table also to ``--export``
        (``table(colour)`` draws it; see ``emit_view``)."""
        emit_view(output_format, producers, table, output=self.output, export=self.export, no_color=self.no_color)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputFlags(Destination, FlagGroup):
    """--output, --no-color: where the result goes, and whether a terminal sees colour."""

    output: OutputOpt = None
    no_color: NoColorOpt = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ViewFlags(Destination, FlagGroup):
    """--output, --view, --rows, --export, --quiet, --no-color: where the result goes and how it looks.

    A bad --rows is refused when the group is made, before any input is read.
    """

    output: OutputOpt = None

    view: Annotated[View, typer.Option("--view", help="Weights as tables, or as heatmaps (colour, or shades).")] = (
        View.table
    )
    rows: Annotated[
        str,
        typer.Option("--rows", metavar="N|all", help="Rows per table or heatmap: past N, the first and last N/2 "
                     "(all: every row)."),
    ] = "40"  # fmt: skip
    export: Annotated[
        str | None,
        typer.Option(
            "--export",
            metavar="FILE",
            help="Also save what is printed as SVG, HTML or text, by FILE's ending: .svg, .html or .txt.",
        ),
    ] = None
    quiet: QuietOpt = False
    no_color: NoColorOpt = False

    def __post_init__(self) -> None:
        self.max_rows  # noqa: B018 - parsed now, so that a bad --rows is refused before any input is read

    @property
    def heatmap(self) -> bool:
        """True with ``--view heatmap``: weights drawn as heatmaps instead of numbers."""
        return self.view is View.heatmap

    @functools.cached_property
    def max_rows(self) -> int | None:
        """--rows as a number of rows, or None for all (parsed once)."""
        return parse_limit(self.rows, "--rows")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShownFlags(FlagGroup):
    """--precision, --format: the decimals tables show, and whether a report is a table or JSON."""

    precision: PrecisionOpt = 4
    output_format: ReportFormatOpt = ReportFormat.table


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportFlags(CapFlags, ViewFlags, ShownFlags, EngineFlags):
    """The options a report command (heads, diff, rollout, ablate) ends with, in this order: the engine
    (``EngineFlags``), the decimals and the format, where the report goes and how it looks (``ViewFlags``), and
    the input caps (``CapFlags``). Being each of those groups, it goes wherever one of them is asked for.
    """

    def show(self, producers: Mapping[OutputFormat, Producer], table: Callable[[bool], RenderableType]) -> None:
        """Write the report in its ``--format`` to stdout or ``--output`` (see ``Destination.emit``)."""
        self.emit(self.output_format, producers, table)
