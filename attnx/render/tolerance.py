"""Differences and tolerances as people and JSON read them: ``3.1e-03``, ``1.3e-06``, a tensor's difference as keys."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnx.analysis.tolerance import TensorDiff
from attnx.render.serialize import to_plain


def sci(value: float, digits: int = 1) -> str:
    """A difference in scientific notation: ``3.1e-03``; exactly ``0`` for zero."""
    return "0" if value == 0 else f"{value:.{digits}e}"


def tolerance_text(value: float) -> str:
    """Tolerances as compactly as they are exact: ``1e-07``, ``1.3e-06``."""
    return sci(value, 0) if float(sci(value, 0)) == value else sci(value)


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
