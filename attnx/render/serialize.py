"""Machine-readable results: JSON with a format version, non-finite numbers written as null."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from attnx.result import AttentionResult

FORMAT_VERSION = "1.0"
TENSORS = ("scores", "scaled", "weights", "head_outputs", "output", "average_weights")


def to_plain(array: np.ndarray) -> Any:
    """Nested lists of Python floats at full precision; NaN and infinities become None."""
    if np.isfinite(array).all():
        return array.tolist()
    cleaned = array.astype(object)
    cleaned[~np.isfinite(array)] = None
    return cleaned.tolist()


def result_to_dict(result: AttentionResult) -> dict[str, Any]:
    """The JSON object of `attnx run --format json` (``format_version`` first)."""
    out: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "tokens": list(result.tokens),
        "heads": result.heads,
        "d_model": result.d_model,
        "d_k": result.d_k,
        "scale": result.scale,
        "engine": result.engine,
        "device": result.device,
        "dtype": result.dtype,
    }
    for name in TENSORS:
        out[name] = to_plain(getattr(result, name))
    return out


def dumps(obj: dict[str, Any]) -> str:
    """Strict JSON text (``allow_nan=False``) ending in a newline."""
    return json.dumps(obj, allow_nan=False) + "\n"
