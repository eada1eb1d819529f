"""Flag groups: the options several commands share, gathered into small frozen values.

Each command declares its options itself, with the shared ``Annotated`` aliases of
``attnx.cli.options`` (Typer's own way), and builds the groups from them in its first lines
(``inputs = InputFlags.pick(locals())``). Every command then reads its input, model, engine
and caps, and shows its result, the same way.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attnx.cli.options import (
    CausalOpt,
    Device,
    DeviceOpt,
    DModelOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    ExportOpt,
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
    QuietOpt,
    ReportFormat,
    RopePairsOpt,
    RopeThetaOpt,
    RowFormat,
    RowsOpt,
    ScaleOpt,
    SeedOpt,
    SoftcapOpt,
    TextOpt,
    TokensOpt,
    View,
    ViewOpt,
    WindowOpt,
    parse_limit,
    parse_scale,
)
from attnx.cli.output import Producer, emit_view
from attnx.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from attnx.core.spec import AttentionSpec
    from attnx.io import Overrides


G = TypeVar("G", bound="FlagGroup")


class FlagGroup:
    """A group of flags, made from the parameters of a command that declares them."""

    @classmethod
    def pick(cls: type[G], parameters: Mapping[str, Any]) -> G:
        """The group from the command's parameters of the same names (``locals()`` in its first lines)."""
        assert dataclasses.is_dataclass(cls)  # every group is a dataclass
        return cls(**{field.name: parameters[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class InputFlags(FlagGroup):
    """-H, --seed, --tokens, --d-model, --kv-heads, --scale, --layout, --rope-theta, --rope-pairs, --causal: what
    replaces the input's keys."""

    heads: HeadsOpt = None
    seed: SeedOpt = None
    tokens: TokensOpt = None
    d_model: DModelOpt = None
    kv_heads: KvHeadsOpt = None
    scale: ScaleOpt = None
    layout: LayoutOpt = None
    rope_theta: RopeThetaOpt = None
    rope_pairs: RopePairsOpt = None
    window: WindowOpt = None
    softcap: SoftcapOpt = None
    causal: CausalOpt = False

    def overrides(self, drop_heads: list[int] | None = None) -> Overrides:
        """These flags (and ``--drop-head``) as the loaders' ``Overrides``; --scale is checked here."""
        from attnx.io import Overrides

        return Overrides(
            heads=self.heads,
            seed=self.seed,
            tokens=tuple(self.tokens.split()) if self.tokens is not None else None,
            d_model=self.d_model,
            kv_heads=self.kv_heads,
            scale=parse_scale(self.scale) if self.scale is not None else None,
            layout=self.layout.value if self.layout is not None else None,
            rope_theta=self.rope_theta,
            rope_pairs=self.rope_pairs.value if self.rope_pairs is not None else None,
            window=self.window,
            softcap=self.softcap,
            causal=self.causal,
            drop_heads=tuple(drop_heads or ()),
        )

    def given(self) -> dict[str, object]:
        """Each flag as typed on the command line -> its value (None or False when not given)."""
        return {
            "-H/--heads": self.heads, "--seed": self.seed, "--tokens": self.tokens, "--d-model": self.d_model,
            "--kv-heads": self.kv_heads, "--scale": self.scale, "--layout": self.layout, "--causal": self.causal,
            "--rope-theta": self.rope_theta, "--rope-pairs": self.rope_pairs, "--window": self.window,
            "--softcap": self.softcap,
        }  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ModelFlags(FlagGroup):
    """--model, --text, --layer: one layer of a local checkpoint as the input."""

    model: ModelOpt = None
    text: TextOpt = None
    layer: LayerOpt = None

    @property
    def wanted(self) -> bool:
        """True when any of the three is given (the input then comes from the model)."""
        return self.model is not None or self.text is not None or self.layer is not None


@dataclasses.dataclass(frozen=True)
class EngineFlags(FlagGroup):
    """--engine, --device, --dtype: what computes, where, in which floating-point type."""

    engine: EngineOpt = Engine.numpy
    device: DeviceOpt = Device.auto
    dtype: DtypeOpt = None

    def options(self) -> dict[str, Any]:
        """``engine``, ``dtype`` and ``device`` as the strings ``attnx.engines.compute`` takes."""
        return {"engine": self.engine.value, "dtype": self.dtype and self.dtype.value, "device": self.device.value}


@dataclasses.dataclass(frozen=True)
class CapFlags(FlagGroup):
    """--max-bytes, --max-yaml-bytes, --max-depth, --max-dimension, --max-elements: the input caps."""

    max_bytes: MaxBytesOpt = None
    max_yaml_bytes: MaxYamlBytesOpt = None
    max_depth: MaxDepthOpt = None
    max_dimension: MaxDimensionOpt = None
    max_elements: MaxElementsOpt = None

    def limits(self) -> Limits:
        """The caps: defaults, replaced by ``ATTNX_MAX_*``, replaced by these flags."""
        return Limits.from_env(**dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class ViewFlags(FlagGroup):
    """--output, --view, --rows, --export, --quiet, --no-color: where the result goes and how it looks.

    A bad --rows is refused when the group is made, before any input is read.
    """

    output: OutputOpt = None
    view: ViewOpt = View.table
    rows: RowsOpt = "40"
    export: ExportOpt = None
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

    def emit(
        self,
        output_format: OutputFormat | RowFormat | ReportFormat,
        producers: Mapping[OutputFormat, Producer],
        table: Callable[[bool], RenderableType],
    ) -> None:
        """Write the result in ``output_format`` to stdout or ``--output``; a table also to ``--export``
        (``table(colour)`` draws it; see ``emit_view``)."""
        emit_view(output_format, producers, table, output=self.output, export=self.export, no_color=self.no_color)


def load_input(
    config: str | None,
    inputs: InputFlags,
    checkpoint: ModelFlags,
    caps: CapFlags,
    backend: EngineFlags | None = None,
    *,
    drop_heads: list[int] | None = None,
    quiet: bool = False,
    matrices: bool = True,
    rows: int | None = None,
) -> AttentionSpec:
    """The spec named by CONFIG and the flags that override it, checked against the caps.

    With ``--model``, the spec is layer ``--layer`` of the model on ``--text``; the layers before it
    run on ``backend`` (default: NumPy, float64, CPU). The caps are read first, so a bad cap value
    is refused whatever the input. What the command will build is checked too: the
    ``[head, query, key]`` matrices when ``matrices``, for at most ``rows`` query rows (None: all).
    """
    from attnx.cli.model_input import model_spec
    from attnx.io import load_spec

    limits, overrides = caps.limits(), inputs.overrides(drop_heads)
    if checkpoint.wanted:
        spec = model_spec(config, overrides, model=checkpoint.model, text=checkpoint.text, layer=checkpoint.layer,
                          quiet=quiet, limits=limits, **(backend or EngineFlags()).options())  # fmt: skip
    else:
        spec = load_spec(config, overrides, limits)
    limits.check_problem(spec, matrices=matrices, rows=rows)
    return spec
