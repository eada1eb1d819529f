"""Reading back a result that attnx wrote as JSON (`attnx run --format json`), for comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attnx.core.spec import AttentionSpec
from attnx.core.tensors import TENSORS
from attnx.errors import InputError
from attnx.io.documents import Document, load_document
from attnx.io.schema import Overrides, spec_from_document
from attnx.limits import Limits

# Tensors a JSON result may carry (the numeric ones attnx exports), with their rank; comparisons work on these.
RESULT_TENSORS = {name: tensor.rank for name, tensor in TENSORS.items() if tensor.exported and tensor.dtype == "float"}


@dataclass(frozen=True, eq=False)
class SavedResult:
    """The tensors and metadata of a JSON result; ``null`` numbers come back as NaN."""

    source: str
    meta: dict[str, Any]
    tensors: dict[str, np.ndarray]


def is_result_document(data: dict[str, Any]) -> bool:
    """True for a JSON object written by `attnx run --format json` (not an input)."""
    return "format_version" in data and "weights" in data


def load_result(source: str) -> SavedResult:
    """Read a JSON result of format version 1.x from ``source`` (a path or ``-``)."""
    return result_from_document(load_document(source))


def load_input_or_result(
    source: str, overrides: Overrides | None = None, limits: Limits | None = None
) -> AttentionSpec | SavedResult:
    """What ``source`` holds: an input (as ``load_spec`` reads it) or a JSON result attnx wrote.

    The source is read once, under ``limits`` (default: ``Limits.from_env()``), so ``-`` (stdin)
    works for either.
    """
    from attnx.io import load_source  # the package imports this module's neighbours, not this module

    doc = load_source(source, limits)
    if is_result_document(doc.data):
        return result_from_document(doc)
    return spec_from_document(doc, overrides)


def result_from_document(doc: Document) -> SavedResult:
    """The JSON result of format version 1.x held by an already parsed document."""
    data = doc.data
    version = str(data.get("format_version", ""))
    if not version.startswith("1."):
        raise InputError(f"{doc.name}: not an attnx JSON result of format 1.x (format_version {version or 'missing'})")
    tensors = {}
    for name, rank in RESULT_TENSORS.items():
        if name not in data:
            continue
        try:
            array = np.array(data[name], dtype=np.float64)  # null -> NaN
        except (TypeError, ValueError):
            raise InputError(f"{doc.name}: {name}: not a numeric array") from None
        if array.ndim != rank:
            raise InputError(f"{doc.name}: {name}: expected {rank} dimensions, got {array.ndim}")
        tensors[name] = array
    meta = {key: value for key, value in data.items() if key not in RESULT_TENSORS}
    return SavedResult(doc.name, meta, tensors)
