"""`check`: every engine, device and dtype against a float64 NumPy reference; `check --against`: a kernel's tensors.

``run_check`` runs each available target; ``verify_kernel`` reads what a kernel saved, compares it tensor by tensor
(``check_against``) and names the known bugs that explain a difference (``check_diagnosis``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import numpy as np

from attnx.analysis.array_layouts import recognise
from attnx.analysis.check_against import KERNEL_TENSORS, Diagnosis, Verification, verify
from attnx.analysis.check_diagnosis import diagnose
from attnx.analysis.tolerance import TensorDiff, compare, loosest, tolerance_for
from attnx.core.choices import HALF, KERNEL_DTYPES
from attnx.core.spec import AttentionSpec
from attnx.core.tensors import HEAD_OUTPUTS, OUTPUT, PROJECTED, SCORES, TENSORS, WEIGHTS, K, Q, TensorName, V
from attnx.engines import EngineStatus, compute
from attnx.errors import ConfigError
from attnx.io.results import BareArray, SavedResult

CHECKED_TENSORS: tuple[TensorName, ...] = (SCORES, WEIGHTS, HEAD_OUTPUTS, OUTPUT, PROJECTED)
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
    tensor: TensorName
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
    """Every engine/device/dtype combination the available engines offer, in float64 and float32: a half type
    (torch's bfloat16 and float16) rounds too coarsely to hold an engine to, so it is not among them."""
    return [
        Target(status.name, device, dtype)
        for status in statuses
        if status.available
        for device, dtypes in status.devices
        for dtype in dtypes
        if dtype not in HALF
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


def verify_kernel(
    spec: AttentionSpec,
    saved: SavedResult | BareArray,
    *,
    dtype: str | None = None,
    layout: str | None = None,
    names: Collection[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    inputs_dtype: str | None = None,
) -> Verification:
    """A kernel's saved tensors (or one bare array, read by its shape or ``layout``: as the output where its
    shape fits the weights too) against the float64 reference of ``spec``, with the known bugs that explain a
    difference.

    ``dtype`` is what the kernel computed in; it sets the tolerances. By default it is what the file says (a
    result's ``dtype`` key), else the dtype its numbers are stored in, or the inputs' (``inputs_dtype``, default
    the dtype ``spec``'s arrays are held in) where that is less precise: a float64 output of float32 inputs
    (NumPy 2 promotes ``s / np.sqrt(d)``) was computed in float32 in part, and is judged at float32's tolerance
    (the verification's ``held`` says the file's dtype).
    """
    if isinstance(saved, BareArray):
        sizes = {"query": spec.n_queries, "key": spec.n_keys, "head": spec.settings.heads,
                 "kv_head": spec.settings.kv_heads, "d_k": spec.d_k, "d_model": spec.d_model}  # fmt: skip
        reading = recognise(saved.array, sizes, layout, output_first=True, source=saved.source)
        tensors, weights_too = {reading.name: reading.array}, reading.weights_too
        kernel = f"{saved.source}, one array read as {reading.name} [{', '.join(TENSORS[reading.name].axes)}]"
    else:
        if layout is not None:
            raise ConfigError(
                f"{saved.source}: an array layout describes a bare .npy array; this file names its tensors"
            )
        tensors, kernel, weights_too = saved.tensors, saved.source, ()
    kernel_dtype = dtype or saved.dtype or "float64"
    if kernel_dtype not in KERNEL_DTYPES:
        raise ConfigError(
            f"{saved.source}: holds {kernel_dtype} numbers; say what the kernel computed in with --kernel-dtype "
            f"({', '.join(KERNEL_DTYPES)})"
        )
    held = None
    stated = dtype is not None or (isinstance(saved, SavedResult) and isinstance(saved.meta.get("dtype"), str))
    if not stated:  # the dtype is the one the numbers are stored in, not what the kernel says it computed in
        inputs = inputs_dtype or loosest(*(array.dtype.name for array in spec.inputs.arrays().values()))
        if loosest(kernel_dtype, inputs) != kernel_dtype:  # the output is more precise than its inputs
            held, kernel_dtype = kernel_dtype, inputs
    # Only what is compared, and the heads' Q, K and V the diagnoses start from: no [head, query, key]
    # matrix unless the kernel's file holds one.
    wanted = {name for name in KERNEL_TENSORS if name in (names if names is not None else tensors)}
    reference = compute(spec, "numpy", dtype="float64", needs=wanted | {Q, K, V, HEAD_OUTPUTS})
    verification = verify(reference, tensors, kernel_dtype, source=spec.source, kernel=kernel, names=names,
                          rtol=rtol, atol=atol)  # fmt: skip
    # A known bug explains values beyond tolerance; a tensor in another shape (failing alone) it cannot explain.
    diagnoses: tuple[Diagnosis, ...] = ()
    if any(not check.passed for check in verification.checks):
        with np.errstate(over="ignore"):  # atol + rtol·|r| beyond float64 (rtol 1e308) is an infinite bound
            diagnoses = diagnose(spec, verification, tensors, rtol=rtol, atol=atol)
    return replace(verification, diagnoses=diagnoses, weights_too=weights_too, held=held)
