"""Rendering `attnx bench`: the timing table and its JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table

from attnx.analysis.bench import BenchRow, BenchSettings
from attnx.render.colours import LABEL
from attnx.render.layout import compact_table
from attnx.render.serialize import FORMAT_VERSION


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def bench_table(rows: list[BenchRow], settings: BenchSettings) -> Table:
    """Length, time, memory, growth per doubling, throughput and the ratio to torch SDPA."""
    table = compact_table(
        f"H={settings.heads} · d_model={settings.d_model} · {settings.dtype} · {settings.path} path "
        f"(best of {settings.repeat})"
    )
    headers = ("engine", "length", "time ms", "weights MiB", "peak MiB", "× prev", "GFLOP/s", "× SDPA")
    for header in headers:
        table.add_column(header, justify="left" if header == "engine" else "right", header_style=LABEL)
    for row in rows:
        table.add_row(
            row.engine,
            str(row.length),
            f"{row.seconds * 1e3:.2f}",
            f"{row.matrix_mib:.1f}",
            "" if row.peak_mib is None else f"{row.peak_mib:.1f}",
            _ratio(row.vs_previous),
            f"{row.gflops:.1f}",
            _ratio(row.vs_sdpa),
        )
    return table


def bench_to_dict(rows: list[BenchRow], settings: BenchSettings) -> dict[str, Any]:
    """JSON of `attnx bench --format json`."""
    return {
        "format_version": FORMAT_VERSION,
        "settings": {**asdict(settings), "lengths": list(settings.lengths), "engines": list(settings.engines)},
        "rows": [asdict(row) for row in rows],
    }
