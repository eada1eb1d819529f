"""Rendering the engine survey (`attnx engines`) and the check report (`attnx check`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnx.analysis.check import REFERENCE, CheckReport
from attnx.analysis.compare import TensorDiff
from attnx.engines import EngineStatus
from attnx.render.colours import ERROR, FAIL, LABEL, PASS, WARNING
from attnx.render.formats import to_jsonl
from attnx.render.layout import compact_table, verdict
from attnx.render.serialize import FORMAT_VERSION, to_plain


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


def sci(value: float, digits: int = 1) -> str:
    """A difference in scientific notation: ``3.1e-03``; exactly ``0`` for zero."""
    return "0" if value == 0 else f"{value:.{digits}e}"


def tolerance_text(value: float) -> str:
    """Tolerances as compactly as they are exact: ``1e-07``, ``1.3e-06``."""
    return sci(value, 0) if float(sci(value, 0)) == value else sci(value)


def check_view(report: CheckReport, source: str) -> RenderableType:
    """The check table, the engines left out, and a one-line verdict."""
    table = compact_table(f"{source} · against {' '.join(REFERENCE)}")
    for header in ("target", "tensor", "max abs", "max rel", "rtol", "atol", "verdict"):
        numeric = header in ("max abs", "max rel", "rtol", "atol")
        table.add_column(header, justify="right" if numeric else "left", header_style=LABEL, no_wrap=True)
    previous = None
    for row in report.rows:
        t, d = row.target, row.diff
        label = f"{t.engine} {t.device} {t.dtype}"
        cell = Text("pass", style=PASS) if d.passed else Text("FAIL", style=FAIL)
        table.add_row(
            label if label != previous else "", row.tensor,
            sci(d.max_abs), sci(d.max_rel), tolerance_text(d.tolerance.rtol), tolerance_text(d.tolerance.atol), cell,
        )  # fmt: skip
        previous = label
    parts: list[RenderableType] = [table]
    for status in report.unavailable:
        parts.append(Text(f"skipped {status.name}: {status.problem}", style=WARNING))
    total = len(report.rows)
    parts.append(verdict(report.passed, f"all {total} rows within tolerance",
                         f"{report.failures} of {total} rows beyond tolerance"))  # fmt: skip
    return Group(*parts)


def diff_to_dict(diff: TensorDiff) -> dict[str, Any]:
    """A tensor comparison as JSON keys: ``max_abs``, ``max_rel``, ``worst_index``, ``rtol``, ``atol``, ``passed``.

    A NaN difference (NaN never passes) is written as null.
    """
    return {
        "max_abs": to_plain(np.asarray(diff.max_abs)),
        "max_rel": to_plain(np.asarray(diff.max_rel)),
        "worst_index": list(diff.worst),
        "rtol": diff.tolerance.rtol,
        "atol": diff.tolerance.atol,
        "passed": diff.passed,
    }


def check_to_dict(report: CheckReport) -> dict[str, Any]:
    """JSON of `attnx check --format json`."""
    engine, device, dtype = REFERENCE
    return {
        "format_version": FORMAT_VERSION,
        "reference": {"engine": engine, "device": device, "dtype": dtype},
        "passed": report.passed,
        "rows": [
            {
                "engine": row.target.engine,
                "device": row.target.device,
                "dtype": row.target.dtype,
                "tensor": row.tensor,
                **diff_to_dict(row.diff),
            }
            for row in report.rows
        ],
        "unavailable": [{"engine": s.name, "problem": s.problem} for s in report.unavailable],
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


def check_jsonl(report: CheckReport) -> str:
    """JSON Lines: one record per checked row (as in ``check_to_dict``)."""
    return to_jsonl({"format_version": FORMAT_VERSION, **row} for row in check_to_dict(report)["rows"])


CHECK_METRICS = ("max_abs", "max_rel", "rtol", "atol", "passed")


def check_csv(report: CheckReport) -> str:
    """Tidy CSV: ``engine,device,dtype,tensor,metric,value`` (``passed`` is 1 or 0)."""
    lines = ["engine,device,dtype,tensor,metric,value\n"]
    for row in check_to_dict(report)["rows"]:
        for metric in CHECK_METRICS:
            value = float(row[metric])
            lines.append(f"{row['engine']},{row['device']},{row['dtype']},{row['tensor']},{metric},{value!r}\n")
    return "".join(lines)
