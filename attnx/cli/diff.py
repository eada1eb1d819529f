"""`attnx diff`: one input under several settings side by side, or two inputs/results tensor by tensor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from attnx.cli.check import AtolOpt, RtolOpt
from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, ViewFlags
from attnx.cli.options import (
    CausalOpt,
    Device,
    DeviceOpt,
    DModelOpt,
    DtypeOpt,
    Engine,
    EngineOpt,
    ExportOpt,
    LayerOpt,
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
    ReportFormat,
    ReportFormatOpt,
    RopePairsOpt,
    RopeThetaOpt,
    RowsOpt,
    SeedOpt,
    SoftcapOpt,
    TextOpt,
    TokensOpt,
    View,
    ViewOpt,
    WindowOpt,
    parse_scale,
)
from attnx.cli.output import warn_fully_masked
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from attnx.analysis.diff import Side
    from attnx.io import Overrides
    from attnx.limits import Limits

T = TypeVar("T")

AArg = Annotated[
    str | None,
    typer.Argument(metavar="[A|-]", help="Input (YAML, JSON, NPZ) or a JSON result of attnx run. Default: the "
                   "built-in example.", show_default=False),
]  # fmt: skip
BArg = Annotated[
    str | None,
    typer.Argument(metavar="[B]", help="A second input or JSON result: compare A with B tensor by tensor.",
                   show_default=False),
]  # fmt: skip
SweepHeadsOpt = Annotated[
    str | None,
    typer.Option("--heads", metavar="H,H,...", help="Head counts to compare, e.g. 1,2,4 (one value: fixed, not "
                 "compared).", show_default=False),
]  # fmt: skip
SweepScaleOpt = Annotated[
    str | None,
    typer.Option("--scale", metavar="S,S,...", help="Scales to compare: sqrt_dk, sqrt_d_model, none or numbers "
                 "(one value: fixed).", show_default=False),
]  # fmt: skip
SweepLayoutOpt = Annotated[
    str | None,
    typer.Option("--layout", metavar="L,L", help="Layouts to compare: contiguous,interleaved (one value: fixed).",
                 show_default=False),
]  # fmt: skip
SweepKvHeadsOpt = Annotated[
    str | None,
    typer.Option("--kv-heads", metavar="N,N,...", help="K/V head counts to compare, e.g. 1,2,4: fewer K/V heads "
                 "than the input has are mean-pooled within each group (one value: fixed).", show_default=False),
]  # fmt: skip


def parse_list(text: str, option: str, convert: Callable[[str], T]) -> list[T]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` through ``convert``: one value or more, each valid."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"{option} takes one value, or two or more to compare, comma-separated, got {text!r}")
    return [convert(part) for part in parts]


def _count(option: str) -> Callable[[str], int]:
    def convert(part: str) -> int:
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"{option} takes whole numbers of at least 1, not {part!r}")
        return int(part)

    return convert


def _layout(part: str) -> str:
    from attnx.core.spec import LAYOUTS

    if part not in LAYOUTS:
        raise UsageError(f"--layout takes {', '.join(LAYOUTS)}, not {part!r}")
    return part


def load_side(source: str, overrides: Overrides, limits: Limits, backend: EngineFlags, quiet: bool) -> Side:
    """One side of a comparison: a JSON result read back, or an input computed here."""
    from attnx.analysis.diff import side_from_result, side_from_saved
    from attnx.engines import compute
    from attnx.io.results import SavedResult, load_input_or_result

    loaded = load_input_or_result(source, overrides, limits)
    if not isinstance(loaded, SavedResult):
        limits.check_problem(loaded, matrices=True)
    if isinstance(loaded, SavedResult):
        return side_from_saved(loaded)
    result = compute(loaded, **backend.options())
    warn_fully_masked(result.fully_masked_rows, quiet)
    return side_from_result(result, loaded.source)


@guarded
def diff(
    a: AArg = None,
    b: BArg = None,
    heads: SweepHeadsOpt = None,
    scale: SweepScaleOpt = None,
    layout: SweepLayoutOpt = None,
    kv_heads: SweepKvHeadsOpt = None,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    causal: CausalOpt = False,
    rope_theta: RopeThetaOpt = None,
    rope_pairs: RopePairsOpt = None,
    window: WindowOpt = None,
    softcap: SoftcapOpt = None,
    model: ModelOpt = None,
    text: TextOpt = None,
    layer: LayerOpt = None,
    rtol: RtolOpt = None,
    atol: AtolOpt = None,
    engine: EngineOpt = Engine.numpy,
    device: DeviceOpt = Device.auto,
    dtype: DtypeOpt = None,
    precision: PrecisionOpt = 4,
    output_format: ReportFormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    view: ViewOpt = View.table,
    rows: RowsOpt = "40",
    export: ExportOpt = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
    max_bytes: MaxBytesOpt = None,
    max_yaml_bytes: MaxYamlBytesOpt = None,
    max_depth: MaxDepthOpt = None,
    max_dimension: MaxDimensionOpt = None,
    max_elements: MaxElementsOpt = None,
) -> None:
    """Compare: one input at several settings (--heads 1,2,4, --scale, --layout or --kv-heads), or A with B.

    A sweep shows each configuration's weights per head, its output and how far outputs move (per token L2, max abs).
    One list varies; the other sweep flags may fix one value (--heads 4 --kv-heads 1,2,4).
    Fewer K/V heads than the input has are mean-pooled within each group (GQA from multi-head attention).
    With two inputs or JSON results: per tensor max abs/rel difference, where the largest is, and a verdict.
    Exit 0 when within --rtol/--atol, 1 when not, 2 on bad input.
    --model DIR --text "..." --layer L: sweep layer L of a local checkpoint.
    """
    checkpoint = ModelFlags.pick(locals())
    backend = EngineFlags.pick(locals())
    display = ViewFlags.pick(locals())
    caps = CapFlags.pick(locals())
    settings = {
        name: values
        for name, values in (
            ("heads", heads and parse_list(heads, "--heads", _count("--heads"))),
            ("scale", scale and parse_list(scale, "--scale", parse_scale)),
            ("layout", layout and parse_list(layout, "--layout", _layout)),
            ("kv_heads", kv_heads and parse_list(kv_heads, "--kv-heads", _count("--kv-heads"))),
        )
        if values
    }
    sweeps = {name: values for name, values in settings.items() if len(values) > 1}
    # Overrides fields named at run time (heads, scale, layout, kv_heads), one value each.
    fixed: dict[str, Any] = {name: values[0] for name, values in settings.items() if len(values) == 1}
    overrides = InputFlags(
        seed=seed,
        tokens=tokens,
        d_model=d_model,
        causal=causal,
        rope_theta=rope_theta,
        rope_pairs=rope_pairs,
        window=window,
        softcap=softcap,
    ).overrides()
    limits = caps.limits()
    from attnx.cli.model_input import model_spec
    from attnx.render import diff as render
    from attnx.render.serialize import dumps

    if b is not None:
        if checkpoint.wanted:
            raise UsageError("--model replaces A and B: with a model, diff sweeps one setting of its layer")
        if settings:
            raise UsageError("give two inputs A B, or one input and one of --heads, --scale, --layout, --kv-heads")
        if a == b == "-":
            raise UsageError("only one of A and B can be - (stdin)")
        from attnx.analysis.diff import compare_sides
        from attnx.render import compare

        assert a is not None  # typer fills A before B
        sides = [load_side(source, overrides, limits, backend, display.quiet) for source in (a, b)]
        comparison = compare_sides(*sides, rtol=rtol, atol=atol)

        def compared(colour: bool) -> RenderableType:
            return compare.comparison_view(comparison, precision, heatmap=display.heatmap, colour=colour,
                                          max_rows=display.max_rows)  # fmt: skip

        display.emit(
            output_format, {OutputFormat.json: lambda: dumps(compare.comparison_to_dict(comparison))}, compared
        )
        if not comparison.passed:
            raise typer.Exit(ExitCode.FAILURE)
        return
    if len(sweeps) != 1:
        given = ", ".join(f"--{name.replace('_', '-')}" for name in sweeps) or "none"
        raise UsageError(
            "give exactly one of --heads, --scale, --layout, --kv-heads as a comma list of two values or more "
            f"(the others may fix one value), or two inputs A B; lists given: {given}"
        )
    ((varied, values),) = sweeps.items()
    overrides = replace(overrides, **fixed)
    if rtol is not None or atol is not None:
        raise UsageError("--rtol and --atol apply to two inputs A B, not to a sweep")
    from attnx.analysis.diff import sweep
    from attnx.io import load_spec

    base = (
        model_spec(a, overrides, model=checkpoint.model, text=checkpoint.text, layer=checkpoint.layer,
                   quiet=display.quiet, config_name="A", limits=limits, **backend.options())
        if checkpoint.wanted
        else load_spec(a, overrides, limits)
    )  # fmt: skip
    result = sweep(base, varied, values, **backend.options())

    def swept(colour: bool) -> RenderableType:
        return render.sweep_view(result, precision, heatmap=display.heatmap, colour=colour, max_rows=display.max_rows)

    display.emit(output_format, {OutputFormat.json: lambda: dumps(render.sweep_to_dict(result))}, swept)
