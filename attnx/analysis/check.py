"""`check`: every available engine, device and dtype against a float64 NumPy reference."""

from __future__ import annotations

from dataclasses import dataclass

from attnx.analysis.compare import TensorDiff, compare, tolerance_for
from attnx.core.spec import AttentionSpec
from attnx.engines import EngineStatus, compute

CHECKED_TENSORS = ("scores", "weights", "head_outputs", "output", "projected")
REFERENCE = ("numpy", "cpu", "float64")


@dataclass(frozen=True)
class Target:
    """One engine/device/dtype combination to run."""

    engine: str
    device: str
    dtype: str


@dataclass(frozen=True)
class CheckRow:
    """One tensor of one target compared with the reference."""

    target: Target
    tensor: str
    diff: TensorDiff


@dataclass(frozen=True)
class CheckReport:
    """All rows, plus the engines that could not take part and why."""

    rows: tuple[CheckRow, ...]
    unavailable: tuple[EngineStatus, ...]

    @property
    def passed(self) -> bool:
        """True when every row is within tolerance."""
        return all(row.diff.passed for row in self.rows)

    @property
    def failures(self) -> int:
        """Number of rows beyond tolerance."""
        return sum(not row.diff.passed for row in self.rows)


def targets(statuses: list[EngineStatus]) -> list[Target]:
    """Every engine/device/dtype combination the available engines offer."""
    return [
        Target(status.name, device, dtype)
        for status in statuses
        if status.available
        for device, dtypes in status.devices
        for dtype in dtypes
    ]


def run_check(
    spec: AttentionSpec,
    statuses: list[EngineStatus],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> CheckReport:
    """Run ``spec`` on every target and compare each checked tensor with the reference.

    ``rtol``/``atol``, when given, replace the per-dtype defaults of ``default_tolerance``.
    """
    reference = compute(spec, REFERENCE[0], device=REFERENCE[1], dtype=REFERENCE[2])
    rows = []
    for target in targets(statuses):
        # not strict: a target that overflows is a failing row (NaN never passes), not an error
        result = compute(spec, target.engine, device=target.device, dtype=target.dtype, strict=False)
        for name in CHECKED_TENSORS:
            ref = getattr(reference, name)
            if ref is None:  # e.g. no W_o, so no projected output
                continue
            tolerance = tolerance_for(target.dtype, ref, rtol, atol)
            rows.append(CheckRow(target, name, compare(getattr(result, name), ref, tolerance)))
    return CheckReport(tuple(rows), tuple(status for status in statuses if not status.available))
