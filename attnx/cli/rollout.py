"""`attnx rollout`: attention rollout (Abnar & Zuidema, 2020) of a local checkpoint, for one query."""

from __future__ import annotations

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.flags import SourceFlags
from attnx.cli.inputs import model_session, require_checkpoint
from attnx.cli.options import OutputFormat, View
from attnx.cli.trace import QueryOpt, TokenOpt, query_row
from attnx.cli.viewflags import ReportFlags

DEFAULTS = ReportFlags(precision=2, view=View.heatmap)  # each layer's rollout as a heatmap, 2 decimals


@guarded
@grouped
def rollout(
    *, checkpoint: SourceFlags, token: TokenOpt = None, query: QueryOpt = None, report: ReportFlags = DEFAULTS
) -> None:
    """Attention rollout: how much each token reaches a query through every layer, residual stream included.

    Each layer: the heads' mean weights, half kept on the token itself (the residual), rows renormalised.
    The rollout after layer l multiplies those of layers 0..l (Abnar & Zuidema, 2020); causal models stay causal.
    --model DIR --text "..." and the query: --token cat or --query 3 (from 0).
    Of an encoder-decoder, the encoder's; of a speech model, its encoder's on --audio FILE.wav.
    """
    require_checkpoint(checkpoint.model, "attnx rollout")
    from attnx import workflows

    with model_session(None, checkpoint, backend=report, caps=report, task="layers", quiet=report.quiet) as run:
        encoded = run.source()
        row = query_row(encoded.tokens, token, query)  # a token not in the text is refused before any layer runs
        found = workflows.rollout(run.model, encoded, on=run.on, progress=run.progress)
        stack = run.model.stack.name if len(run.model.stacks) > 1 else None  # an encoder-decoder's: the encoder
    from attnx.render import rollout as render
    from attnx.render.serialize import dumps

    report.show(
        {OutputFormat.json: lambda: dumps(render.rollout_to_dict(found, row, stack))},
        lambda colour: render.rollout_view(
            found, row, report.precision, colour=colour, max_rows=report.max_rows, stack=stack
        ),
    )
