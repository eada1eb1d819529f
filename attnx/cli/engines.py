"""`attnx engines`: which engines, versions, devices and dtypes this machine offers."""

from __future__ import annotations

from attnx.cli.common import FormatOpt, NoColorOpt, OutputFormat, guarded, stdout_console, write_stdout


@guarded
def engines(output_format: FormatOpt = OutputFormat.table, no_color: NoColorOpt = False) -> None:
    """List the engines, their versions, the devices present and the dtypes each supports."""
    from attnx.engines import engine_statuses
    from attnx.render.engines import engines_table, engines_to_dict
    from attnx.render.serialize import dumps

    statuses = engine_statuses()
    if output_format is OutputFormat.json:
        write_stdout(dumps(engines_to_dict(statuses)))
    else:
        stdout_console(no_color).print(engines_table(statuses))
