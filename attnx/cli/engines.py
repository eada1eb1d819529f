"""`attnx engines`: which engines, versions, devices and dtypes this machine offers."""

from __future__ import annotations

from attnx.cli.errors import guarded
from attnx.cli.flaggroup import grouped
from attnx.cli.options import OutputFormat, RowFormat, RowFormatOpt
from attnx.cli.viewflags import OutputFlags


@guarded
@grouped
def engines(*, output_format: RowFormatOpt = RowFormat.table, outputs: OutputFlags) -> None:
    """List the engines, their versions, the devices present and the dtypes each supports."""
    from attnx.engines import engine_statuses
    from attnx.render import engines as render
    from attnx.render.serialize import dumps

    statuses = engine_statuses()
    outputs.write(
        output_format,
        {
            OutputFormat.table: lambda: render.engines_table(statuses),
            OutputFormat.json: lambda: dumps(render.engines_to_dict(statuses)),
            OutputFormat.jsonl: lambda: render.engines_jsonl(statuses),
            OutputFormat.csv: lambda: render.engines_csv(statuses),
        },
    )
