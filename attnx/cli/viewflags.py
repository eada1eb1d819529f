"""Flag groups of where a result goes and how it looks (--output, --view, --format, ...), and ReportFlags.

Each group is a frozen dataclass whose fields are Typer options (``attnx/cli/flaggroup.py``); ``ReportFlags`` is
everything a report command ends with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.flaggroup import FlagGroup, flag_group
from attnx.cli.flags import CapFlags, EngineFlags
from attnx.cli.options import (
    AnyFormat,
    NoColorOpt,
    OutputFormat,
    OutputOpt,
    PrecisionOpt,
    QuietOpt,
    ReportFormat,
    ReportFormatOpt,
    View,
    parse_limit,
)
from attnx.cli.output import Producer, emit, emit_view

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType


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


@flag_group(frozen=True)
class OutputFlags(Destination, FlagGroup):
    """--output, --no-color: where the result goes, and whether a terminal sees colour."""

    output: OutputOpt = None
    no_color: NoColorOpt = False


@flag_group(frozen=True)
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


@flag_group(frozen=True)
class ShownFlags(FlagGroup):
    """--precision, --format: the decimals tables show, and whether a report is a table or JSON."""

    precision: PrecisionOpt = 4
    output_format: ReportFormatOpt = ReportFormat.table


@flag_group(frozen=True)
class ReportFlags(CapFlags, ViewFlags, ShownFlags, EngineFlags):
    """The options a report command (heads, diff, rollout, ablate) ends with, in this order: the engine
    (``EngineFlags``), the decimals and the format, where the report goes and how it looks (``ViewFlags``), and
    the input caps (``CapFlags``). Being each of those groups, it goes wherever one of them is asked for.
    """

    def show(self, producers: Mapping[OutputFormat, Producer], table: Callable[[bool], RenderableType]) -> None:
        """Write the report in its ``--format`` to stdout or ``--output`` (see ``Destination.emit``)."""
        self.emit(self.output_format, producers, table)
