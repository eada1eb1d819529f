"""`attnx ablate`: what dropping heads does to a local checkpoint's last hidden state and next-token guesses."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

import typer

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import TextFlags
from attnx.cli.inputs import flag_worded, model_session, require_checkpoint
from attnx.cli.options import OutputFormat, View
from attnx.cli.viewflags import ReportFlags
from attnx.errors import UsageError

HeadOpt = Annotated[
    list[str] | None,
    typer.Option("--head", metavar="L2H3", help="A head to drop, as L2H3 (layer 2, head 3, both from 0; -1 the "
                 "last) or 2.3; repeat it or separate with commas to drop several together. Default: each head "
                 "alone, in turn."),
]  # fmt: skip


LayerOpt = Annotated[
    int | None,
    typer.Option("--layer", metavar="L", help="Without --head: drop the heads of layer L (from 0, -1 the last) one by "
                 "one, not every layer's."),
]  # fmt: skip

DEFAULTS = ReportFlags(precision=3, view=View.heatmap)  # a layer × head heatmap of shifts, 3 decimals


@guarded
@grouped
def ablate(
    *, checkpoint: TextFlags, head: HeadOpt = None, layer: LayerOpt = None, report: ReportFlags = DEFAULTS
) -> None:
    """Drop heads and measure the whole model: its last hidden state and, with an LM head, its next-token guesses.

    A dropped head's output is zeroed before W_o, as transformers' head_mask did.
    Without --head every head (of --layer L only, when given) is dropped alone in turn: a layer × head heatmap.
    Per token: the shift ‖h' − h‖ / ‖h‖, the KL of the next-token distribution (nats) and its top token.
    """
    require_checkpoint(checkpoint.model, "attnx ablate")
    from attnx import workflows

    if head and layer is not None:
        raise UsageError("--layer picks the heads to drop one by one; --head names them: give one or the other")
    dropped = parse_heads(head) if head else None
    session = model_session(None, checkpoint, backend=report, caps=report, task="ablating", quiet=report.quiet)
    with session as run, flag_worded("--head {}"):
        found = workflows.ablate(run.model, run.text, dropped, layer=layer, on=run.on,
                                 progress=run.progress)  # fmt: skip
    from attnx.render import effects as render
    from attnx.render.serialize import dumps

    report.show(
        {OutputFormat.json: lambda: dumps(render.ablations_to_dict(found))},
        lambda colour: render.ablations_view(found, report.precision, colour=colour, max_rows=report.max_rows),
    )


def parse_heads(values: Iterable[str]) -> list[tuple[int, int]]:
    """``--head`` values (``L2H3``, ``2.3`` or ``2:3``; several comma-separated) as (layer, head) pairs."""
    found: list[tuple[int, int]] = []
    for value in values:
        for part in value.split(","):
            match = re.fullmatch(r"\s*(?:[Ll]\s*(-?\d+)\s*[Hh]\s*(-?\d+)|(-?\d+)\s*[.:]\s*(-?\d+))\s*", part)
            if match is None:
                raise UsageError(
                    f"--head takes a layer and a head counted from 0 (-1 the last), as L2H3 (or 2.3), not {part!r}"
                )
            found.append((int(match[1] or match[3]), int(match[2] or match[4])))
    return found
