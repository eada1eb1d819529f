"""Drawing `attnx check`: the engines against the reference, and a kernel's verification (`check --against`).

The verification (also what ``attnx.testing`` raises) is drawn as tables, error heatmaps, plain text and JSON.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attnx.analysis.check import REFERENCE, CheckReport
from attnx.analysis.check_against import TensorCheck, Verification
from attnx.core.result import AttentionResult
from attnx.core.tensors import TENSORS, TensorName
from attnx.render.colours import FAIL, LABEL, PASS, WARNING
from attnx.render.formats import to_jsonl
from attnx.render.heatmap import HeatScale, heatmap, legend
from attnx.render.layout import add_columns, compact_table, verdict
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tolerance import diff_to_dict, sci, tolerance_text
from attnx.text import console as inert_console


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


# `check --against`: one kernel's tensors against the reference.
HEATMAP_PRECISION = 2


def locate(name: TensorName, index: Sequence[int], reference: AttentionResult) -> str:
    """Where an element sits, for people: ``head 1 · query 3 'cat' · key 0 'The'`` or ``query 2 'sat' ·
    column 5 (head 1, d 1)`` (everything from 0)."""
    parts = []
    for axis, i in zip(TENSORS[name].axes, index, strict=False):
        if axis in ("head", "kv_head"):
            parts.append(f"{'K/V ' if axis == 'kv_head' else ''}head {i}")
        elif axis == "query":
            parts.append(f"query {i}{_label(reference.tokens[i], i)}")
        elif axis == "key":
            parts.append(f"key {i}{_label(reference.key_tokens[i], i)}")
        elif axis == "d_model":
            head = next(h for h in range(reference.heads) if i in reference.head_columns(h))
            parts.append(f"column {i} (head {head}, d {reference.head_columns(head).index(i)})")
        else:
            parts.append(f"d {i}")
    return " · ".join(parts)


def _label(token: str, index: int) -> str:
    """`` 'cat'``, or nothing for a token labelled by its index (as attnx.testing labels them)."""
    return "" if token == str(index) else f" {token!r}"


def tolerance_line(verification: Verification) -> str:
    """``tolerance (float16): |kernel − reference| ≤ atol + rtol·|reference|, rtol 1e-03, atol 3.9e-03``."""
    pairs = {(c.tolerance.rtol, c.tolerance.atol) for c in verification.checks}
    rule = f"tolerance ({verification.dtype}): |kernel − reference| ≤ atol + rtol·|reference|"
    if len(pairs) == 1:
        ((rtol, atol),) = pairs
        return f"{rule}, rtol {tolerance_text(rtol)}, atol {tolerance_text(atol)}"
    return f"{rule}, per tensor below"


def checks_table(verification: Verification) -> RenderableType:
    """One row per tensor: shape, max abs and rel error, ε units, elements beyond tolerance, the worst, verdict."""
    table = compact_table()
    add_columns(table, "tensor", "shape", numeric=False)
    add_columns(table, "max abs", "max rel", "× ε", "beyond")
    add_columns(table, "worst at", "verdict", numeric=False)
    for check in verification.checks:
        share = f"{check.beyond} of {check.size}"
        where = locate(check.name, check.worst, verification.reference) if check.max_abs > 0 else "—"
        mark = Text("pass", style=PASS) if check.passed else Text("FAIL", style=FAIL)
        units = "—" if not math.isfinite(check.eps_units) else f"{check.eps_units:.3g}"
        table.add_row(check.name, "(" + ",".join(map(str, check.shape)) + ")", sci(check.max_abs), sci(check.max_rel),
                      units, share, Text(where), mark)  # fmt: skip
    return table


def worst_line(check: TensorCheck, reference: AttentionResult) -> str:
    """``output: worst at query 2 'sat' · column 5 (head 1, d 1): kernel 0.1234, reference 0.5678``."""
    where = locate(check.name, check.worst, reference)
    return f"{check.name}: worst at {where}: kernel {check.actual:.6g}, reference {check.expected:.6g}"


def _unit(values: np.ndarray) -> tuple[np.ndarray, str]:
    """``values`` in a power of ten that shows their largest with a digit before the point, and its label."""
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    if top <= 0:
        return values, ""
    exponent = math.floor(math.log10(top))
    return values / 10.0**exponent, "" if exponent == 0 else f", ×1e{exponent}"


def error_heatmaps(verification: Verification, *, colour: bool, max_rows: int | None = None) -> list[RenderableType]:
    """For each tensor beyond tolerance: the largest error per head and query (one head wrong is a row) and,
    for ``[head, query, key]`` tensors, per query and key (a mask off by one is a diagonal)."""
    ref = verification.reference
    parts: list[RenderableType] = []
    queries = [f"{i} {token}" for i, token in enumerate(ref.tokens)]
    for check in verification.checks:
        if check.passed:
            continue
        for grid, title, rows, columns in (
            (check.by_head, "per head and query", [f"H{h}" for h in range(ref.heads)], list(ref.tokens)),
            (check.by_key, "per query and key (largest over heads)", queries, list(ref.key_tokens)),
        ):
            if grid is None:
                continue
            shown, unit = _unit(np.where(np.isfinite(grid), grid, np.nan))
            scale = HeatScale(float(np.nanmax(shown)) if np.isfinite(shown).any() else 0.0, "|error|")
            parts.append(heatmap(f"{check.name}: largest |kernel − reference| {title}{unit}", shown, rows, columns,
                                 HEATMAP_PRECISION, scale=scale, colour=colour, max_rows=max_rows))  # fmt: skip
            parts.append(legend(scale, HEATMAP_PRECISION, colour))
    return parts


def verification_view(
    verification: Verification, *, colour: bool = True, max_rows: int | None = None
) -> RenderableType:
    """Everything `attnx check --against` prints: what was compared, the table, where, the diagnoses, a verdict."""
    lines = [
        f"reference: {verification.source}, computed in float64",
        f"kernel: {verification.kernel} ({verification.dtype})",
        tolerance_line(verification),
    ]
    not_held = [name for name, why in verification.skipped if why == "not in the kernel's file"]
    if not_held:
        lines.append(f"not compared: {', '.join(not_held)} (not in the kernel's file)")
    lines += [
        f"not compared: {name} ({why})" for name, why in verification.skipped if why != "not in the kernel's file"
    ]
    parts: list[RenderableType] = [Text("\n".join(lines), style="dim"), checks_table(verification)]
    failing = [check for check in verification.checks if not check.passed]
    if failing:
        parts.append(Text("\n".join(worst_line(check, verification.reference) for check in failing)))
        parts += error_heatmaps(verification, colour=colour, max_rows=max_rows)
    for diagnosis in verification.diagnoses:
        parts.append(Text(f"diagnosis: {diagnosis.bug}: {diagnosis.detail} (the kernel's {diagnosis.tensor} matches "
                          f"it to {sci(diagnosis.max_abs)})", style="bold"))  # fmt: skip
    if failing and not verification.diagnoses:
        parts.append(Text("no known bug explains the difference", style="dim"))
    total = len(verification.checks)
    agree = f"the kernel agrees with the reference: {total} of {total} within tolerance"
    parts.append(verdict(verification.passed, agree, f"the kernel differs: {len(failing)} of {total} beyond tolerance"))
    return Group(*parts)


def verification_text(verification: Verification, width: int = 100) -> str:
    """The view as plain text (no colour), as an AssertionError carries it."""
    buffer = io.StringIO()
    console = inert_console(file=buffer, width=width, no_color=True, color_system=None)
    console.print(verification_view(verification, colour=False, max_rows=24))
    return buffer.getvalue().rstrip()


def tensor_check_to_dict(check: TensorCheck, reference: AttentionResult) -> dict[str, Any]:
    """One tensor's verification as JSON keys."""
    return {
        "tensor": check.name,
        "axes": list(TENSORS[check.name].axes),
        "shape": list(check.shape),
        "rtol": check.tolerance.rtol,
        "atol": to_plain(np.asarray(check.tolerance.atol)),
        "max_abs": to_plain(np.asarray(check.max_abs)),
        "max_rel": to_plain(np.asarray(check.max_rel)),
        "eps_units": to_plain(np.asarray(check.eps_units)),
        "beyond": check.beyond,
        "size": check.size,
        "worst_index": list(check.worst),
        "worst_at": locate(check.name, check.worst, reference) if check.worst else None,
        "kernel_value": to_plain(np.asarray(check.actual)),
        "reference_value": to_plain(np.asarray(check.expected)),
        "passed": check.passed,
        "by_head": None if check.by_head is None else to_plain(check.by_head),
    }


def verification_to_dict(verification: Verification) -> dict[str, Any]:
    """The JSON object of `attnx check --against` (``format_version`` first; indices from 0)."""
    return {
        "format_version": FORMAT_VERSION,
        "mode": "kernel",
        "reference": verification.source,
        "kernel": verification.kernel,
        "dtype": verification.dtype,
        "passed": verification.passed,
        "tensors": [tensor_check_to_dict(check, verification.reference) for check in verification.checks],
        "skipped": [{"tensor": name, "reason": why} for name, why in verification.skipped],
        "diagnoses": [
            {"bug": d.bug, "detail": d.detail, "tensor": d.tensor, "max_abs": to_plain(np.asarray(d.max_abs))}
            for d in verification.diagnoses
        ],
    }
