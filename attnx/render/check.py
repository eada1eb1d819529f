"""Drawing `attnx check`: the engines against the reference, and a kernel's verification (`check --against`).

The verification (also what ``attnx.testing`` raises) is drawn as tables, error heatmaps, plain text and JSON.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

from attnx.analysis.check import REFERENCE, CheckReport
from attnx.analysis.check_against import KERNEL_TENSORS, NOT_HELD, TensorCheck, Verification
from attnx.core.result import AttentionResult
from attnx.core.tensors import TENSORS, TensorName
from attnx.render.colours import FAIL, LABEL, PASS, WARNING
from attnx.render.fitted import FittedGrid
from attnx.render.formats import to_jsonl
from attnx.render.heatmap import HeatScale, heatmap, legend
from attnx.render.layout import FirstFit, Headline, add_columns, compact_table, under_name, verdict
from attnx.render.location import locate
from attnx.render.serialize import FORMAT_VERSION, to_plain
from attnx.render.tolerance import diff_to_dict, sci, tolerance_text
from attnx.text import console as inert_console


def check_view(report: CheckReport, source: str) -> RenderableType:
    """The check table, the engines left out, and a one-line verdict."""
    title = Headline(f"{source} · against {' '.join(REFERENCE)}", style="bold")  # a long source cut to the width
    table = compact_table()
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
    parts: list[RenderableType] = [title, table]
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


@dataclass(frozen=True)
class Voice:
    """How a verification speaks of the kernel's side: as `check --against` does of a file, or as
    ``assert_attention_close`` does inside pytest, in its arguments' names.

    ``kernel`` names the side in formulas and values, ``subject`` in the verdict, ``owner`` before a tensor;
    ``not_held`` is why a reference tensor was not compared; ``numbers`` names what the kernel handed over,
    ``inputs`` what it read, and ``stricter`` how to hold it to its own dtype's tolerance (a ``{}`` for that
    dtype; empty where the caller's rtol and atol are the way); ``see_all`` says how to see what a heatmap left
    out (None: the heatmap's own note, which names the command line's flags).
    """

    kernel: str
    subject: str
    owner: str
    not_held: str
    numbers: str
    inputs: str
    stricter: str
    see_all: str | None = None


SHELL = Voice("kernel", "the kernel", "the kernel's", NOT_HELD, "the kernel's file", "the inputs",
              "; --kernel-dtype {} holds it to that dtype's")  # fmt: skip
PYTEST = Voice("actual", "actual", "actual's", "not in actual", "actual", "q, k and v", "",
               "to see them all, compare actual with attnx.testing.reference(q, k, v, ...)")  # fmt: skip


def locate_in(name: TensorName, index: Sequence[int], reference: AttentionResult) -> str:
    """Where an element of the reference's tensor ``name`` sits (``attnx.render.location.locate``): ``head 1 ·
    query 3 'cat' · key 0 'The'`` or ``query 2 'sat' · column 5 (head 1, d 1)``."""

    def head_of(column: int) -> tuple[int, int]:
        head = next(h for h in range(reference.heads) if column in reference.head_columns(h))
        return head, reference.head_columns(head).index(column)

    return locate(name, index, reference.tokens, reference.key_tokens, head_of)


def tolerance_line(verification: Verification, voice: Voice = SHELL) -> str:
    """``tolerance (float16): |kernel − reference| ≤ atol + rtol·|reference|, rtol 1e-03, atol 3.9e-03``."""
    pairs = {(c.tolerance.rtol, c.tolerance.atol) for c in verification.checks}
    rule = f"tolerance ({verification.dtype}): |{voice.kernel} − reference| ≤ atol + rtol·|reference|"
    if len(pairs) == 1:
        ((rtol, atol),) = pairs
        return f"{rule}, rtol {tolerance_text(rtol)}, atol {tolerance_text(atol)}"
    return f"{rule}, per tensor below"


def checks_table(verification: Verification, *, stacked: bool = False) -> RenderableType:
    """One row per tensor: shape, max abs and rel error, ε units, elements beyond tolerance, the worst, verdict; a
    tensor held in another shape is a row too, ``(3,5,5) vs (2,5,5)`` (the kernel's, the reference's) and ``shapes
    differ``, as `attnx diff` shows one, in the order reports list tensors.

    The worst element's place has a column of its own, never wrapped; ``stacked`` puts it under the tensor's
    name instead (for a narrow width, where it may wrap: ``checks_view`` picks).
    """
    table = compact_table()
    add_columns(table, "tensor · worst at" if stacked else "tensor", "shape", numeric=False)
    add_columns(table, "max abs", "max rel", "× ε", "beyond")
    if not stacked:
        table.add_column("worst at", header_style=LABEL, no_wrap=True)
    add_columns(table, "verdict", numeric=False)
    rows: list[tuple[TensorName, list[RenderableType]]] = []
    for check in verification.checks:
        where = locate_in(check.name, check.worst, verification.reference) if check.max_abs > 0 else "—"
        mark = Text("pass", style=PASS) if check.passed else Text("FAIL", style=FAIL)
        units = "—" if not math.isfinite(check.eps_units) else f"{check.eps_units:.3g}"
        numbers: list[RenderableType] = [
            sci(check.max_abs),
            sci(check.max_rel),
            units,
            f"{check.beyond} of {check.size}",
        ]
        rows.append((check.name, _row(check.name, shape_text(check.shape), numbers, where, mark, stacked)))
    for name, shape, expected in verification.mismatched:
        shapes = f"{shape_text(shape)} vs {shape_text(expected)}"
        rows.append((name, _row(name, shapes, ["", "", "", ""], SHAPES_DIFFER, Text("FAIL", style=FAIL), stacked)))
    for _, cells in sorted(rows, key=lambda row: KERNEL_TENSORS.index(row[0])):
        table.add_row(*cells)
    return table


SHAPES_DIFFER = "shapes differ"  # as `attnx diff` says it


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as a table shows it: ``(2,5,5)``."""
    return "(" + ",".join(map(str, shape)) + ")"


def _row(
    name: str, shape: str, numbers: list[RenderableType], where: str, mark: Text, stacked: bool
) -> list[RenderableType]:
    """The cells of one row of ``checks_table``: ``where`` in a column of its own, or under the name."""
    if stacked:
        return [under_name(name, Text(f"at {where}" if where != SHAPES_DIFFER else where)), shape, *numbers, mark]
    return [name, shape, *numbers, Text(where), mark]


def checks_view(verification: Verification) -> RenderableType:
    """``checks_table`` with the worst elements in a column where the width holds it, else under the names."""
    return FirstFit(checks_table(verification), checks_table(verification, stacked=True))


def worst_line(check: TensorCheck, reference: AttentionResult, voice: Voice = SHELL) -> str:
    """``output: worst at query 2 'sat' · column 5 (head 1, d 1): kernel 0.1234, reference 0.5678``."""
    where = locate_in(check.name, check.worst, reference)
    return f"{check.name}: worst at {where}: {voice.kernel} {check.actual:.6g}, reference {check.expected:.6g}"


def _unit(values: np.ndarray) -> tuple[np.ndarray, str]:
    """``values`` in a power of ten that shows their largest with a digit before the point, and its label."""
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    if top <= 0:
        return values, ""
    exponent = math.floor(math.log10(top))
    return values / 10.0**exponent, "" if exponent == 0 else f", ×1e{exponent}"


class Renoted:
    """A heatmap whose note on the rows and columns it left out ends with ``how`` to see them, in place of the
    grid's own words (which name the command line's flags)."""

    def __init__(self, grid: FittedGrid, how: str) -> None:
        self.grid, self.how = grid, how

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        left, right = self.grid.shown(options.max_width)
        for line in self.grid.lines(left, right, console, options.max_width):
            yield from line.render(console)
            yield Segment.line()
        note = self.grid.note(len(left) + len(right))
        if note is not None:  # "3 of 9 rows left out (⋮); use --rows all ... to see them": what, then how
            yield Text(f"{note.plain.rpartition('; ')[0]}; {self.how}", style=note.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return self.grid.__rich_measure__(console, options)


def error_heatmaps(
    verification: Verification, *, colour: bool, max_rows: int | None = None, voice: Voice = SHELL
) -> list[RenderableType]:
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
            drawn = heatmap(f"{check.name}: largest |{voice.kernel} − reference| {title}{unit}", shown, rows, columns,
                            HEATMAP_PRECISION, scale=scale, colour=colour, max_rows=max_rows)  # fmt: skip
            parts += [
                drawn if voice.see_all is None else Renoted(drawn, voice.see_all),
                legend(scale, HEATMAP_PRECISION, colour),
            ]
    return parts


def read_lines(verification: Verification, voice: Voice = SHELL) -> list[str]:
    """What was compared: the reference, the kernel's side and how it was read, the tolerance, what was not."""
    lines = [
        f"reference: {verification.source}, computed in float64",
        f"{voice.kernel}: {verification.kernel} ({verification.held or verification.dtype})",
    ]
    if verification.held is not None:
        dtype, stricter = verification.dtype, voice.stricter.format(verification.held)
        lines.append(f"{voice.numbers} is {verification.held} but {voice.inputs} are {dtype}: judged at {dtype}'s "
                     f"tolerance{stricter}")  # fmt: skip
    if verification.weights_too:
        layouts = " or ".join(verification.weights_too)
        lines.append(f"its shape fits weights [head, query, key] too: --array-layout {layouts} reads it as weights")
    if verification.checks:  # none when every tensor held is in another shape: no tolerance was applied
        lines.append(tolerance_line(verification, voice))
    not_held = [name for name, why in verification.skipped if why == NOT_HELD]
    if not_held:
        lines.append(f"not compared: {', '.join(not_held)} ({voice.not_held})")
    return lines + [f"not compared: {name} ({why})" for name, why in verification.skipped if why != NOT_HELD]


def verification_view(
    verification: Verification, *, colour: bool = True, max_rows: int | None = None, voice: Voice = SHELL
) -> RenderableType:
    """Everything `attnx check --against` prints (or ``assert_attention_close`` raises, in ``voice``): what was
    compared, the table, where, the diagnoses, a verdict."""
    parts: list[RenderableType] = [Text("\n".join(read_lines(verification, voice)), style="dim")]
    if verification.checks or verification.mismatched:
        parts.append(checks_view(verification))
    failing = [check for check in verification.checks if not check.passed]
    if verification.mismatched:
        parts.append(Text("\n".join(mismatch_line(*found, voice) for found in verification.mismatched)))
    if failing:
        parts.append(Text("\n".join(worst_line(check, verification.reference, voice) for check in failing)))
        parts += error_heatmaps(verification, colour=colour, max_rows=max_rows, voice=voice)
    for diagnosis in verification.diagnoses:
        parts.append(Text(f"diagnosis: {diagnosis.bug}: {diagnosis.detail} ({voice.owner} {diagnosis.tensor} "
                          f"matches it to {sci(diagnosis.max_abs)})", style="bold"))  # fmt: skip
    if failing and not verification.diagnoses:
        parts.append(Text("no known bug explains the difference", style="dim"))
    total = len(verification.checks) + len(verification.mismatched)
    agree = f"{voice.subject} agrees with the reference: {total} of {total} within tolerance"
    differs = f"{voice.subject} differs: {verification.failures} of {total} beyond tolerance or in another shape"
    if not verification.mismatched:
        differs = f"{voice.subject} differs: {len(failing)} of {total} beyond tolerance"
    parts.append(verdict(verification.passed, agree, differs))
    return Group(*parts)


def mismatch_line(name: TensorName, shape: tuple[int, ...], expected: tuple[int, ...], voice: Voice = SHELL) -> str:
    """A tensor the kernel holds in another shape than the reference's: a failure, said with both shapes."""
    axes = ", ".join(TENSORS[name].axes)
    return f"{name}: {voice.owner} shape is {shape}, the reference's {expected} [{axes}]: FAIL"


def verification_text(verification: Verification, width: int = 100) -> str:
    """The view as plain text (no colour), as ``assert_attention_close``'s AssertionError carries it: in pytest's
    words (``PYTEST``)."""
    buffer = io.StringIO()
    console = inert_console(file=buffer, width=width, no_color=True, color_system=None)
    console.print(verification_view(verification, colour=False, max_rows=24, voice=PYTEST))
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip().splitlines())


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
        "worst_at": locate_in(check.name, check.worst, reference) if check.worst else None,
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
        "mismatched": [
            {"tensor": name, "shape": list(shape), "reference_shape": list(expected)}
            for name, shape, expected in verification.mismatched
        ],
        "diagnoses": [
            {"bug": d.bug, "detail": d.detail, "tensor": d.tensor, "max_abs": to_plain(np.asarray(d.max_abs))}
            for d in verification.diagnoses
        ],
    }
