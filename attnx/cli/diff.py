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
    CompareTensorOpt,
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


def load_sides(
    sources: tuple[str, str],
    overrides: Overrides,
    limits: Limits,
    backend: EngineFlags,
    quiet: bool,
    layout: str | None,
) -> list[Side]:
    """Both sides of a comparison: a saved result read back, an input computed here, or one bare array read
    as the tensor its shape fits (against the other side's problem, or ``layout``)."""
    from attnx.analysis.diff import side_from_array, side_from_result, side_from_saved
    from attnx.engines import compute
    from attnx.io.results import BareArray, SavedResult, load_input_or_result

    loaded = [load_input_or_result(source, overrides, limits) for source in sources]
    if all(isinstance(item, BareArray) for item in loaded):
        raise UsageError("A and B are both bare .npy arrays: give an input or a result on one side, to say what "
                         "they hold")  # fmt: skip
    sides: list[Side | None] = []
    for item in loaded:
        if isinstance(item, BareArray):
            sides.append(None)
        elif isinstance(item, SavedResult):
            sides.append(side_from_saved(item))
        else:
            limits.check_problem(item, matrices=True)
            result = compute(item, **backend.options())
            warn_fully_masked(result.fully_masked_rows, quiet)
            sides.append(side_from_result(result, item.source))
    other = next(side for side in sides if side is not None)
    return [
        side if side is not None else side_from_array(item, other, layout)  # type: ignore[arg-type]
        for side, item in zip(sides, loaded, strict=True)
    ]


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
    tensor: CompareTensorOpt = None,
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
    With A and B (inputs, results in any format attnx writes, or a bare .npy array such as a kernel's output):
    per tensor both hold (or --tensor) max abs/rel difference, where the largest is, and a verdict.
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
            ("layout", layout and b is None and parse_list(layout, "--layout", _layout)),  # A B: an array's
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
        from attnx.analysis.kernel import ARRAY_LAYOUTS

        array_layout = layout if layout in ARRAY_LAYOUTS else None
        if heads or scale or kv_heads or (layout and not array_layout):
            raise UsageError(
                "give two inputs A B, or one input and one of --heads, --scale, --layout, --kv-heads; with A B, "
                f"--layout names a bare array's layout: {', '.join(ARRAY_LAYOUTS)}"
            )
        if a == b == "-":
            raise UsageError("only one of A and B can be - (stdin)")
        from attnx.analysis.diff import compare_sides
        from attnx.render import compare
        from attnx.render.formats import check_tensor_names

        assert a is not None  # typer fills A before B
        check_tensor_names(tensor)
        sides = load_sides((a, b), overrides, limits, backend, display.quiet, array_layout)
        comparison = compare_sides(*sides, rtol=rtol, atol=atol, names=tensor)

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
    if tensor:
        raise UsageError("--tensor applies to two inputs A B, not to a sweep")
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
