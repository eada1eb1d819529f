"""Rendering the engine survey (`attnx engines`): a table, JSON, JSON Lines and CSV."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from attnx.engines import EngineStatus
from attnx.render.colours import ERROR, LABEL
from attnx.render.formats import to_jsonl
from attnx.render.layout import compact_table
from attnx.render.serialize import FORMAT_VERSION


def engines_table(statuses: list[EngineStatus]) -> Table:
    """One row per engine and device: version, device, dtypes (default first)."""
    table = compact_table()
    for header in ("engine", "version", "device", "dtypes (default first)"):
        table.add_column(header, header_style=LABEL, no_wrap=header != "dtypes (default first)")
    for status in statuses:
        if not status.available:
            table.add_row(status.name, Text("not available", style=ERROR), "", Text(status.problem or "", style="dim"))
            continue
        for i, (device, dtypes) in enumerate(status.devices):
            table.add_row(status.name if i == 0 else "", status.version if i == 0 else "", device, ", ".join(dtypes))
    return table


def engines_to_dict(statuses: list[EngineStatus]) -> dict[str, Any]:
    """JSON of `attnx engines --format json`."""
    return {
        "format_version": FORMAT_VERSION,
        "engines": [
            {
                "name": status.name,
                "available": status.available,
                "version": status.version,
                "devices": [{"name": device, "dtypes": list(dtypes)} for device, dtypes in status.devices],
                "problem": status.problem,
            }
            for status in statuses
        ],
    }


def engines_jsonl(statuses: list[EngineStatus]) -> str:
    """JSON Lines: one record per engine (as in ``engines_to_dict``)."""
    return to_jsonl({"format_version": FORMAT_VERSION, **e} for e in engines_to_dict(statuses)["engines"])


def engines_csv(statuses: list[EngineStatus]) -> str:
    """One row per available engine, device and dtype: ``engine,version,device,dtype,default``."""
    rows = [["engine", "version", "device", "dtype", "default"]]
    for status in statuses:
        for device, dtypes in status.devices:
            rows += [
                [status.name, status.version or "", device, dtype, str(int(i == 0))] for i, dtype in enumerate(dtypes)
            ]
    return "".join(",".join(row) + "\n" for row in rows)
