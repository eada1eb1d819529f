"""`attnx check`: run the input on every engine, device and dtype; compare with a float64 reference."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flaggroup import FlagGroup, grouped
from attnx.cli.flags import CapFlags, CompareFlags, EngineFlags, InputFlags, ModelFlags
from attnx.cli.inputs import flag_worded, load_input
from attnx.cli.options import ConfigArg, KernelDtype, OutputFormat, RowFormat, RowFormatOpt
from attnx.cli.viewflags import OutputFlags
from attnx.errors import AmbiguousError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec


@dataclasses.dataclass(frozen=True)
class KernelFileFlags(FlagGroup):
    """--against, --kernel-dtype: a kernel's saved result, and what it computed in."""

    against: Annotated[
        str | None,
        typer.Option("--against", metavar="FILE", help="Check a kernel's saved result against attnx's float64 "
                     "reference: a result (json, jsonl, npz, a folder of npy) or one .npy array (its output, head "
                     "outputs or weights)."),
    ] = None  # fmt: skip
    kernel_dtype: Annotated[
        KernelDtype | None,
        typer.Option(
            "--kernel-dtype", help="What the kernel computed in; sets the tolerances (default: the file's dtype)."
        ),
    ] = None


@dataclasses.dataclass(frozen=True)
class AgainstFlags(CompareFlags, KernelFileFlags):
    """--against and --kernel-dtype, then --tensor, --array-layout, --rtol and --atol: the kernel's file and how
    close its tensors must be to the reference (the tolerances hold for every engine without --against too)."""


@guarded
@grouped
def check(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    checkpoint: ModelFlags,
    compare: AgainstFlags,
    output_format: RowFormatOpt = RowFormat.table,
    outputs: OutputFlags,
    caps: CapFlags,
) -> None:
    """Cross-check every engine/device/dtype against the float64 NumPy reference, or a kernel (--against).

    Exit 0 when every row is within tolerance, 1 when any is not.
    --against FILE: a kernel's output (.npy, or a result as attnx writes one) against the float64 reference.
    Per tensor: the error, in epsilons of --kernel-dtype, the worst element, a heatmap of where it is.
    When a known bug explains the error (wrong scale, a shifted mask, tiled K/V heads, ...), it says so.
    With --model, the layers before --layer run on the reference (numpy float64), the layer on every target.
    """
    if compare.against is None and (compare.array_layout or compare.kernel_dtype or compare.tensor):
        raise UsageError("--kernel-dtype, --tensor and --array-layout describe the file given with --against")
    spec = load_input(config, inputs, checkpoint, caps, EngineFlags())  # a model's layers run on the reference
    from attnx.render.serialize import dumps

    if compare.against is not None:
        check_against(spec, compare.against, compare, caps, output_format, outputs)
        return
    from attnx.analysis.check import run_check
    from attnx.engines import engine_statuses

    report = run_check(spec, engine_statuses(), rtol=compare.rtol, atol=compare.atol)
    from attnx.render import check as render

    outputs.write(
        output_format,
        {
            OutputFormat.table: lambda: render.check_view(report, spec.source),
            OutputFormat.json: lambda: dumps(render.check_to_dict(report)),
            OutputFormat.jsonl: lambda: render.check_jsonl(report),
            OutputFormat.csv: lambda: render.check_csv(report),
        },
    )
    if not report.passed:
        raise typer.Exit(ExitCode.FAILURE)


def check_against(
    spec: AttentionSpec, against: str, compare: AgainstFlags, caps: CapFlags, output_format: RowFormat,
    outputs: OutputFlags,
) -> None:  # fmt: skip
    """`check --against`: the kernel's file against the float64 reference of ``spec``; exit 1 beyond tolerance."""
    from attnx.analysis.check import verify_kernel
    from attnx.io.results import BareArray, SavedResult, load_input_or_result
    from attnx.render import check as render
    from attnx.render.formats import check_tensor_names
    from attnx.render.serialize import dumps

    if output_format not in (RowFormat.table, RowFormat.json):
        raise UsageError(f"check --against writes table or json, not {output_format.value}")
    check_tensor_names(compare.tensor)
    saved = load_input_or_result(against, limits=caps.limits())
    if not isinstance(saved, SavedResult | BareArray):
        raise UsageError(f"{against}: is an input; --against takes what a kernel computed (a result or one array)")
    layout = compare.array_layout and compare.array_layout.value
    dtype = compare.kernel_dtype and compare.kernel_dtype.value
    with flag_worded("{} with --array-layout", AmbiguousError):
        verification = verify_kernel(spec, saved, dtype=dtype, layout=layout, names=compare.tensor, rtol=compare.rtol,
                                     atol=compare.atol)  # fmt: skip
    outputs.emit(
        output_format,
        {OutputFormat.json: lambda: dumps(render.verification_to_dict(verification))},
        lambda colour: render.verification_view(verification, colour=colour, max_rows=40),
    )
    if not verification.passed:
        raise typer.Exit(ExitCode.FAILURE)
