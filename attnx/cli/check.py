"""`attnx check`: run the input on every engine, device and dtype; compare with a float64 reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from attnx.cli.errors import ExitCode, guarded
from attnx.cli.flags import CapFlags, CompareFlags, InputFlags, ModelFlags, OutputFlags, grouped
from attnx.cli.inputs import flag_worded, load_input
from attnx.cli.options import AgainstOpt, ConfigArg, KernelDtypeOpt, OutputFormat, RowFormat, RowFormatOpt
from attnx.errors import AmbiguousError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from attnx.core.spec import AttentionSpec


@guarded
@grouped
def check(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    checkpoint: ModelFlags,
    against: AgainstOpt = None,
    kernel_dtype: KernelDtypeOpt = None,
    compare: CompareFlags,
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
    if against is None and (compare.array_layout or kernel_dtype or compare.tensor):
        raise UsageError("--kernel-dtype, --tensor and --array-layout describe the file given with --against")
    spec = load_input(config, inputs, checkpoint, caps)
    from attnx.render.serialize import dumps

    if against is not None:
        check_against(spec, against, caps, kernel_dtype and kernel_dtype.value, compare, output_format, outputs)
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
    spec: AttentionSpec,
    against: str,
    caps: CapFlags,
    dtype: str | None,
    compare: CompareFlags,
    output_format: RowFormat,
    outputs: OutputFlags,
) -> None:
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
