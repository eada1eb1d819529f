"""`attnx diff`: one input under several settings side by side, or two inputs/results tensor by tensor."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flaggroup import FlagGroup, grouped
from attnx.cli.flags import CapFlags, CompareFlags, EngineFlags, ModelPairFlags, RandomFlags, SettingFlags, TextFlags
from attnx.cli.inputs import flag_worded
from attnx.cli.options import OutputFormat, parse_scale
from attnx.cli.output import warn_fully_masked
from attnx.cli.viewflags import ReportFlags
from attnx.errors import AmbiguousError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from rich.console import RenderableType

    from attnx.analysis.diff import Side
    from attnx.core.overrides import SettingOverrides
    from attnx.core.spec import AttentionSpec
    from attnx.io import InputOverrides
    from attnx.models.stacks import AttentionKind

T = TypeVar("T")

AArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[A|-]", help="Input (YAML, JSON, NPZ) or a JSON result of attnx run. Default: the built-in example."
    ),
]
BArg = Annotated[
    str | None, typer.Argument(metavar="[B]", help="A second input or JSON result: compare A with B tensor by tensor.")
]


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


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A setting a sweep can vary: its flag, the flag's metavar and help, and how one of its values is read."""

    flag: str
    metavar: str
    read: Callable[[str], int | str | float]
    help: str

    def option(self) -> Any:
        """The Typer option of a comma list of values (one value: fixed)."""
        return typer.Option(self.flag, metavar=self.metavar, help=self.help)

    def values(self, text: str) -> list[int | str | float]:
        """The flag's comma list, each value read and checked."""
        return parse_list(text, self.flag, self.read)


# Each sweep flag, by the setting it varies.
SWEEPS = {
    "heads": Sweep("--heads", "H,H,...", _count("--heads"), "Head counts to compare, e.g. 1,2,4 (one value: fixed, "
                   "not compared)."),
    "scale": Sweep("--scale", "S,S,...", parse_scale, "Scales to compare: sqrt_dk, sqrt_d_model, none or numbers (one "
                   "value: fixed)."),
    "layout": Sweep("--layout", "L,L", _layout, "Layouts to compare: contiguous,interleaved (one value: fixed)."),
    "kv_heads": Sweep("--kv-heads", "N,N,...", _count("--kv-heads"), "K/V head counts to compare, e.g. 1,2,4: fewer "
                      "K/V heads than the input has are mean-pooled within each group (one value: fixed)."),
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SweepFlags(FlagGroup):
    """--heads, --scale, --layout, --kv-heads as comma lists: the setting a sweep varies (one value: fixed)."""

    heads: Annotated[str | None, SWEEPS["heads"].option()] = None
    scale: Annotated[str | None, SWEEPS["scale"].option()] = None
    layout: Annotated[str | None, SWEEPS["layout"].option()] = None
    kv_heads: Annotated[str | None, SWEEPS["kv_heads"].option()] = None

    def lists(self) -> dict[str, list[int | str | float]]:
        """Each sweep flag given -> its values, parsed and checked."""
        given = {name: getattr(self, name) for name in SWEEPS}
        return {name: SWEEPS[name].values(text) for name, text in given.items() if text is not None}


def load_sides(
    sources: tuple[str, str], described: InputOverrides, settings: SettingOverrides, caps: CapFlags,
    backend: EngineFlags, compare: CompareFlags, quiet: bool,
) -> list[Side]:  # fmt: skip
    """Both sides of a comparison: a saved result read back, an input computed here, or one bare array read
    as the tensor its shape fits (against the other side's problem, or ``--array-layout``)."""
    from attnx.analysis.diff import side_from_array, side_from_result, side_from_saved
    from attnx.engines import compute
    from attnx.io.results import BareArray, SavedResult, load_input_or_result

    loaded = [load_input_or_result(source, described, caps.limits()) for source in sources]
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
            spec = settings.apply(item)
            result = compute(spec, **backend.options())
            warn_fully_masked(result.fully_masked_rows, quiet)
            sides.append(side_from_result(result, spec.source))
    other = next(side for side in sides if side is not None)
    layout = compare.array_layout and compare.array_layout.value
    return [
        side if side is not None else side_from_array(item, other, layout)  # type: ignore[arg-type]
        for side, item in zip(sides, loaded, strict=True)
    ]


@guarded
@grouped
def diff(
    a: AArg = None,
    b: BArg = None,
    *,
    swept: SweepFlags,
    random: RandomFlags,
    settings: SettingFlags,
    checkpoint: ModelPairFlags,
    compare: CompareFlags,
    report: ReportFlags,
) -> None:
    """Compare: one input at several settings (--heads 1,2,4, --scale, --layout or --kv-heads), or A with B.

    A sweep shows each configuration's weights per head, its output and how far outputs move (per token L2, max abs).
    One list varies; the other sweep flags may fix one value (--heads 4 --kv-heads 1,2,4).
    Fewer K/V heads than the input has are mean-pooled within each group (GQA from multi-head attention).
    With A and B (inputs, results in any format attnx writes, or a bare .npy array such as a kernel's output):
    per tensor both hold (or --tensor) max abs/rel difference, where the largest is, and a verdict.
    Exit 0 when within --rtol/--atol, 1 when not, 2 on bad input.
    --model DIR --text "..." --layer L: sweep layer L of a local checkpoint.
    --model A --model B --text "...": which heads moved from checkpoint A to B (a quantization, a fine-tune).
    """
    from attnx.core.overrides import SettingOverrides

    pair = checkpoint.pair
    if pair is not None:
        compare_checkpoints(pair, a, checkpoint, swept, settings, report)
        return
    one = checkpoint.single()
    lists = swept.lists()
    fixed = {name: values[0] for name, values in lists.items() if len(values) == 1}
    described = random.input_overrides(fixed.get("heads"), fixed.get("kv_heads"))  # type: ignore[arg-type]
    overrides = SettingOverrides(**(settings.changes() | fixed))
    if a is not None and b is not None:  # typer fills A before B
        if one.wanted:
            raise UsageError("--model replaces A and B: with a model, diff sweeps one setting of its layer")
        if lists:
            raise UsageError("give two inputs A B, or one input and one of --heads, --scale, --layout, --kv-heads")
        if a == b == "-":
            raise UsageError("only one of A and B can be - (stdin)")
        compare_two((a, b), described, overrides, compare, report)
        return
    sweeps = {name: values for name, values in lists.items() if len(values) > 1}
    if len(sweeps) != 1:
        listed = ", ".join(SWEEPS[name].flag for name in sweeps) or "none"
        raise UsageError(
            "give exactly one of --heads, --scale, --layout, --kv-heads as a comma list of two values or more "
            f"(the others may fix one value), or two inputs A B; lists given: {listed}"
        )
    if compare.tensor or compare.array_layout:
        raise UsageError("--tensor and --array-layout apply to two inputs A B, not to a sweep")
    if compare.rtol is not None or compare.atol is not None:
        raise UsageError("--rtol and --atol apply to two inputs A B, not to a sweep")
    from attnx.cli.inputs import load_input_with

    base = load_input_with(a, described, overrides, one, caps=report, backend=report, quiet=report.quiet,
                           config_name="A")  # fmt: skip
    sweep_one(base, *next(iter(sweeps.items())), report)


def compare_checkpoints(
    pair: tuple[str, str], a: str | None, checkpoint: ModelPairFlags, swept: SweepFlags, settings: SettingFlags,
    report: ReportFlags,
) -> None:  # fmt: skip
    """`diff --model A --model B --text T`: both checkpoints side by side, every layer and head."""
    from attnx.cli.inputs import open_checkpoint, open_with_text, progress_for, refuse
    from attnx.models.stacks import AttentionKind
    from attnx.render import model_diff as render
    from attnx.render.serialize import dumps
    from attnx.workflows import compare_models

    extra = [flag for flag, given in (("A", a), ("--layer", checkpoint.layer)) if given is not None]
    extra += [flag for flag, value in {**swept.given(), **settings.given()}.items() if value not in (None, False)]
    if extra:
        raise UsageError(f"{extra[0]} does not apply to two checkpoints: diff --model A --model B runs every layer "
                         "of both as they are")  # fmt: skip
    if same_file(*pair):
        names = pair[0] if pair[0] == pair[1] else f"{pair[0]} and {pair[1]}"
        raise UsageError(f"--model names one checkpoint twice ({names}: the same file): every difference would be 0; "
                         "give two different checkpoints")  # fmt: skip
    kind = attention_kind(checkpoint.attention, checkpoint.target)
    if kind is AttentionKind.CROSS and checkpoint.target is None:
        raise UsageError(f"--attention {checkpoint.attention}: the decoder's cross-attention reads a target text: "
                         "give --target T")  # fmt: skip
    source: str | np.ndarray
    if checkpoint.audio is not None:
        from attnx.cli.output import warn
        from attnx.io.audio import read_wav

        refuse({"--text": checkpoint.text}, "is what a text model reads; with --audio the models' encoders hear it")
        wav = read_wav(checkpoint.audio, report.limits())
        for note in () if report.quiet else wav.notes:
            warn(note)
        first, source = open_checkpoint(pair[0], report, report.limits()), wav.samples
    else:
        first, source = open_with_text(None, TextFlags(model=pair[0], text=checkpoint.text), report, report)
    with (
        first,  # closed should the second fail to open
        open_checkpoint(pair[1], report, report.limits()) as second,
        progress_for("comparing layers", report.quiet) as progress,
    ):
        comparison = compare_models(first, second, source, target=checkpoint.target, kind=kind,
                                    on=report.placement(), progress=progress)  # fmt: skip

    def shown(colour: bool) -> RenderableType:
        return render.comparison_view(comparison, report.precision, colour=colour)

    report.show({OutputFormat.json: lambda: dumps(render.comparison_to_dict(comparison))}, shown)


def attention_kind(attention: str | None, target: str | None) -> AttentionKind | None:
    """``--attention`` as the kind two checkpoints are compared on: an encoder-decoder's cross-attention when only
    ``--target`` is given, the first stack's (None) when neither is."""
    from attnx.models.stacks import Address, AttentionKind

    if attention is None:
        return None if target is None else AttentionKind.CROSS
    with flag_worded("--attention: {}"):
        return Address.parse("0", attention).kind


def same_file(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one file or folder (one device and inode: the same path, a link to it, a
    path through a link); False when they differ or either cannot be read (opening it says why)."""
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def compare_two(
    sources: tuple[str, str], described: InputOverrides, settings: SettingOverrides, compare: CompareFlags,
    report: ReportFlags,
) -> None:  # fmt: skip
    """`diff A B`: both sides tensor by tensor; exit 1 beyond tolerance."""
    from attnx.analysis.diff import compare_sides
    from attnx.render import diff_sides as render
    from attnx.render.formats import check_tensor_names
    from attnx.render.serialize import dumps

    check_tensor_names(compare.tensor)
    with flag_worded("{} with --array-layout", AmbiguousError):
        sides = load_sides(sources, described, settings, caps=report, backend=report, compare=compare,
                           quiet=report.quiet)  # fmt: skip
    comparison = compare_sides(*sides, rtol=compare.rtol, atol=compare.atol, names=compare.tensor)

    def compared(colour: bool) -> RenderableType:
        return render.comparison_view(comparison, report.precision, heatmap=report.heatmap, colour=colour,
                                      max_rows=report.max_rows)  # fmt: skip

    report.show({OutputFormat.json: lambda: dumps(render.comparison_to_dict(comparison))}, compared)
    if not comparison.passed:
        raise typer.Exit(ExitCode.FAILURE)


def sweep_one(base: AttentionSpec, varied: str, values: list[int | str | float], report: ReportFlags) -> None:
    """`diff --heads 1,2,4` (or --scale, --layout, --kv-heads): the input once per value, side by side."""
    from attnx.analysis.diff import sweep
    from attnx.render import diff_sweep as render
    from attnx.render.serialize import dumps

    result = sweep(base, varied, values, on=report.placement())

    def swept(colour: bool) -> RenderableType:
        return render.sweep_view(result, report.precision, heatmap=report.heatmap, colour=colour,
                                 max_rows=report.max_rows)  # fmt: skip

    report.show({OutputFormat.json: lambda: dumps(render.sweep_to_dict(result))}, swept)
