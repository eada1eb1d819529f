"""Machine formats of a run: tidy CSV, JSON Lines, NPY and NPZ, named as the JSON keys."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from attnx.core.result import AttentionResult
from attnx.core.tensors import (
    COLUMN_ORDER,
    EXPORTED,
    JSONL_HEAD_FIELDS,
    JSONL_QUERY_FIELDS,
    JSONL_SINK_FIELD,
    PROJECTED,
    TENSORS,
    TensorName,
    is_tensor_name,
)
from attnx.errors import UsageError
from attnx.render.serialize import FORMAT_VERSION, to_plain

# The axes of every tensor a run can export, as CSV columns name them, in the order the formats list them.
TENSOR_AXES: dict[TensorName, tuple[str, ...]] = {name: TENSORS[name].column_axes for name in EXPORTED}


def result_tensors(result: AttentionResult) -> dict[TensorName, np.ndarray]:
    """Every tensor the result holds, named as its JSON key (``projected`` and ``mask`` when present)."""
    out = {name: getattr(result, name) for name in TENSOR_AXES if getattr(result, name) is not None}
    return out


def check_tensor_names(names: Sequence[str] | None) -> None:
    """Refuse a ``--tensor`` name that no result can have, before anything is computed."""
    unknown = [name for name in names or () if name not in TENSOR_AXES]
    if unknown:
        raise UsageError(f"unknown tensor {unknown[0]!r} for --tensor; choose from {', '.join(TENSOR_AXES)}")


def pick(result: AttentionResult, names: Sequence[str] | None) -> dict[TensorName, np.ndarray]:
    """The tensors named (all when ``names`` is empty), checked against what the result holds."""
    check_tensor_names(names)
    available = result_tensors(result)
    if not names:
        return available
    chosen = [name for name in dict.fromkeys(names) if is_tensor_name(name)]  # each one is, once checked
    absent = [name for name in chosen if name not in available]
    if absent:
        reason = TENSORS[absent[0]].absent
        raise UsageError(f"this result has no {absent[0]!r} ({reason})")
    return {name: available[name] for name in chosen}


CSV_ROWS = 65_536  # rows per chunk of streamed CSV: the first bytes leave at once, memory stays flat


def to_csv(result: AttentionResult, names: Sequence[str] | None = None) -> Iterator[str]:
    """Tidy long form, streamed in chunks of ``CSV_ROWS`` rows: one number per row; the header names the axes,
    then labels, then ``value``.

    Indices are 0-based; ``query_token``/``key_token`` carry the labels of ``query``/``key``. ``dim``
    counts within a head's slice for ``q``, ``k``, ``v`` and ``head_outputs`` (0..d_k-1), within
    d_model for ``output``. The tensors are checked (``pick``) before the first chunk is made.
    """
    tensors = pick(result, names)
    axes = [axis for axis in COLUMN_ORDER if any(axis in TENSOR_AXES[name] for name in tensors)]
    labels: list[str] = [axis for axis in ("query", "key") if axis in axes]
    tokens = {"query": result.tokens, "key": result.key_tokens}
    header = ",".join(["tensor", *axes, *(f"{axis}_token" for axis in labels), "value"]) + "\n"
    return itertools.chain([header], _csv_rows(tensors, axes, labels, tokens))


def _csv_rows(
    tensors: dict[TensorName, np.ndarray], axes: list[str], labels: list[str], tokens: dict[str, tuple[str, ...]]
) -> Iterator[str]:
    """The rows of every tensor, ``CSV_ROWS`` at a time, each chunk made column by column."""
    for name, array in tensors.items():
        own = TENSOR_AXES[name]
        values = (array.astype(np.float64) if array.dtype == bool else array).reshape(-1)
        for start in range(0, values.size, CSV_ROWS):
            flat = np.arange(start, min(start + CSV_ROWS, values.size))
            index = dict(zip(own, np.unravel_index(flat, array.shape), strict=True))
            columns: list[Iterable[object]] = [itertools.repeat(name, len(flat))]
            columns += [index[axis].tolist() if axis in index else itertools.repeat("", len(flat)) for axis in axes]
            for axis in labels:
                words = tokens[axis]
                columns.append([words[i] for i in index[axis].tolist()] if axis in index else itertools.repeat(""))
            chunk = values[flat].astype(np.float64, copy=False)
            numbers = chunk.tolist()
            columns.append(map(repr, numbers) if np.isfinite(chunk).all() else map(_number, numbers))
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\n").writerows(zip(*columns, strict=False))
            yield buffer.getvalue()


def _number(value: Any) -> str:
    value = float(value)
    return repr(value) if np.isfinite(value) else ""


def jsonl_records(result: AttentionResult) -> Iterable[dict[str, Any]]:
    """One record per head and query, then one per query (outputs and averaged weights); with learned sinks, a
    head-query record carries its sink's share too.

    A head-query record carries the query's slice ``q`` too; K and V, which belong to keys, are in
    the JSON, CSV, NPY and NPZ formats.
    """
    per_head = {field: result.tensor(name) for field, name in JSONL_HEAD_FIELDS.items()}  # the format asks for all
    field, name = JSONL_SINK_FIELD
    if getattr(result, name) is not None:
        per_head[field] = result.tensor(name)
    per_query = {
        field: result.tensor(name)
        for field, name in JSONL_QUERY_FIELDS.items()
        if name != PROJECTED or result.projected is not None
    }
    for h in range(result.heads):
        for i, token in enumerate(result.tokens):
            yield _record("head_query", {"head": h, "query": i}, token, {f: a[h, i] for f, a in per_head.items()})
    for i, token in enumerate(result.tokens):
        yield _record("query", {"query": i}, token, {f: a[i] for f, a in per_query.items()})


def _record(kind: str, place: dict[str, int], token: str, rows: dict[str, np.ndarray]) -> dict[str, Any]:
    """One JSON Lines record: its kind, its place (``head`` and ``query``, or ``query``), the query's token and
    each field's row."""
    fields = {field: to_plain(row) for field, row in rows.items()}
    return {"format_version": FORMAT_VERSION, "record": kind, **place, "query_token": token, **fields}


def to_jsonl(records: Iterable[dict[str, Any]]) -> str:
    """JSON Lines: one strict JSON object per line."""
    return "".join(json.dumps(record, allow_nan=False) + "\n" for record in records)


def to_npy(result: AttentionResult, names: Sequence[str] | None) -> bytes:
    """One tensor as ``.npy`` bytes; exactly one must be named."""
    if not names or len(names) != 1:
        raise UsageError(f"--format npy writes one tensor: name it with --tensor ({', '.join(result_tensors(result))})")
    (array,) = pick(result, names).values()
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def to_npz(result: AttentionResult, names: Sequence[str] | None = None) -> bytes:
    """The chosen tensors (default all) as ``.npz`` bytes, plus ``tokens`` and ``key_tokens``."""
    tokens, key_tokens = np.array(result.tokens, dtype=str), np.array(result.key_tokens, dtype=str)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **pick(result, names), tokens=tokens, key_tokens=key_tokens)
    return buffer.getvalue()
