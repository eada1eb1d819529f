"""`attnx run`: compute multi-head attention and print every step."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import CapFlags, EngineFlags, InputFlags, ModelFlags, PickFlags
from attnx.cli.inputs import load_input
from attnx.cli.options import ConfigArg, DropHeadOpt, FormatOpt, OutputFormat, PrecisionOpt, TensorOpt
from attnx.cli.output import check_destination, warn_fully_masked
from attnx.cli.viewflags import ViewFlags
from attnx.core.tensors import MASK, OUTPUT, SECTIONS, K, Q, TensorName, V, is_tensor_name, section_tensor
from attnx.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from attnx.analysis.ablation import Ablation
    from attnx.core.result import AttentionResult


# Printed when --show is not given; `--show all` prints every section, the Q, K and V slices too.
DEFAULT_SECTIONS = tuple(section for section in SECTIONS if section_tensor(section) not in (Q, K, V))

ShowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--show",
        "-s",
        metavar="SECTIONS",
        help=f"Sections to print, comma-separated or repeated: {', '.join(SECTIONS)}, or all. q, k, v: each "
        "head's slice of Q, K and V. Default: all but q, k, v.",
    ),
]


# What each table section reads from the result (``ablation`` reads the output): the engine computes nothing else.
SECTION_NEEDS: dict[str, set[TensorName]] = {section: {section_tensor(section) or OUTPUT} for section in SECTIONS}


def needs_for(output_format: OutputFormat, sections: list[str], tensors: list[str] | None) -> set[TensorName] | None:
    """The result arrays a run must compute for this output (None: all of them).

    ``--format npy --tensor output`` needs no H × N × M matrix, so the engine never builds one.
    """
    if output_format is OutputFormat.table:
        return {MASK, OUTPUT, *(tensor for name in sections for tensor in SECTION_NEEDS[name])}
    if output_format in (OutputFormat.csv, OutputFormat.npy, OutputFormat.npz) and tensors:
        return {OUTPUT, *filter(is_tensor_name, tensors)}  # each is, once checked
    return None


def parse_sections(values: list[str] | None) -> list[str]:
    """``["weights,output", "average"]`` -> ``["weights", "output", "average"]``, checked; ``all``: every section."""
    if not values:
        return list(DEFAULT_SECTIONS)
    chosen = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if "all" in chosen:
        return list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        raise UsageError(f"unknown section {unknown[0]!r} for --show; choose from {', '.join(SECTIONS)}, all")
    return chosen


def machine_output(
    output_format: OutputFormat, result: AttentionResult, shift: Ablation | None, tensor: list[str] | None
) -> str | bytes | Iterator[str]:
    """``result`` in a machine format. The serializers are imported here, where they are used: the table pays for
    none of them (``csv`` alone is 1 ms of every start-up)."""
    if output_format is OutputFormat.json:
        from attnx.render.serialize import dumps, result_to_dict

        return dumps(result_to_dict(result, shift))
    from attnx.render import formats

    if output_format is OutputFormat.jsonl:
        return formats.to_jsonl(formats.jsonl_records(result))
    if output_format is OutputFormat.csv:
        return formats.to_csv(result, tensor)
    return formats.to_npy(result, tensor) if output_format is OutputFormat.npy else formats.to_npz(result, tensor)


@guarded
@grouped
def run(
    config: ConfigArg = None,
    *,
    inputs: InputFlags,
    drop_head: DropHeadOpt = None,
    checkpoint: ModelFlags,
    backend: EngineFlags,
    pick: PickFlags,
    show: ShowOpt = None,
    precision: PrecisionOpt = 4,
    output_format: FormatOpt = OutputFormat.table,
    tensor: TensorOpt = None,
    display: ViewFlags,
    caps: CapFlags,
) -> None:
    """Compute multi-head attention and print raw scores, scaled scores, weights and outputs.

    With no CONFIG: the worked example "The cat sat on mat" (H = 2). --seed with --tokens: random Q, K, V.
    --model DIR --text "..." --layer L: layer L of a local checkpoint on that text.
    --view heatmap draws each head's weights as a heatmap instead.
    --show q,k,v: the slices of Q, K and V each head reads (--show all: every section).
    --head N: head N's tables alone; the output and the average still come from every head, and say so.
    """
    sections = parse_sections(show)
    if pick.head is not None and output_format is not OutputFormat.table:
        raise UsageError(f"--head picks the tables' heads; --format {output_format.value} holds every head's arrays, "
                         "indexed from 0 (leave out --head)")  # fmt: skip
    if tensor:  # the machine formats are imported only where they are written (csv: 1 ms of every start-up)
        from attnx.render.formats import check_tensor_names

        check_tensor_names(tensor)
    if display.heatmap and show:
        raise UsageError("--view heatmap draws the weights of every head; leave out --show")
    check_destination(output_format, display.output)
    needs = needs_for(output_format, sections, tensor)
    max_rows = display.max_rows if output_format is OutputFormat.table else None
    spec = load_input(config, inputs, checkpoint, caps, backend, drop_heads=drop_head, quiet=display.quiet)
    from attnx.core.rows import Rows
    from attnx.engines import compute

    shown_heads = pick.heads_of(spec.settings.heads)
    result = compute(spec, **backend.options(), needs=needs, rows=Rows.ends(spec.n_queries, max_rows))
    warn_fully_masked(result.fully_masked_rows, display.quiet)
    from attnx.analysis.ablation import ablation

    shift = ablation(result)

    def table(colour: bool) -> RenderableType:
        from rich.console import Group

        from attnx.render.tables import Section, run_view, summary_line

        if display.heatmap:
            from attnx.render.heatmap import weights_view

            shown = weights_view(result, precision, colour=colour, max_rows=display.max_rows, heads=shown_heads)
        else:
            chosen = [Section(n) for n in sections]
            shown = run_view(result, chosen, precision, max_rows=display.max_rows, shift=shift, heads=shown_heads)
        return Group(summary_line(result, spec.source), shown)

    machine = (OutputFormat.json, OutputFormat.jsonl, OutputFormat.csv, OutputFormat.npy, OutputFormat.npz)
    producers = {name: functools.partial(machine_output, name, result, shift, tensor) for name in machine}
    display.emit(output_format, producers, table)
