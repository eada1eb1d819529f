"""Reading back tensors that attnx or a kernel wrote: a result as JSON, JSON Lines, .npz or a folder of .npy
files, or one bare .npy array; and telling them apart from inputs.

Every read goes through the same caps as inputs: bytes before reading, each .npy header (shape, dtype)
before its data, nesting in JSON. Numbers come back as float64 (JSON ``null`` as NaN); ``dtype`` says
what the writer computed in, where the file tells.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from attnx.core.spec import AttentionSpec
from attnx.core.tensors import JSONL_HEAD_FIELDS, JSONL_QUERY_FIELDS, MASK, TENSORS, K, Q, TensorName, V
from attnx.errors import InputError, LimitError
from attnx.io.documents import Document
from attnx.io.output import note_read
from attnx.io.schema import InputOverrides, spec_from_document
from attnx.limits import Limits

# Tensors a result may carry (the numeric ones attnx exports), with their rank; comparisons work on these.
RESULT_TENSORS = {name: tensor.rank for name, tensor in TENSORS.items() if tensor.exported and tensor.dtype == "float"}
# Keys only a result has: an .npz or JSON object holding one of them is a result, not an input.
RESULT_ONLY = frozenset(RESULT_TENSORS) - {Q, K, V}
LABELS = ("tokens", "key_tokens")
_FLOAT_MAX = int(np.finfo(np.float64).max)  # the largest integer a float64 holds


@dataclass(frozen=True, eq=False)
class SavedResult:
    """The tensors (attnx's names and axis order) and metadata of a saved result; ``dtype`` what they were
    computed in (None when the file does not say)."""

    source: str
    meta: dict[str, Any]
    tensors: dict[TensorName, np.ndarray]
    dtype: str | None = None


@dataclass(frozen=True, eq=False)
class BareArray:
    """One array with no name: what it holds is told from its shape against a problem (see
    ``attnx.analysis.array_layouts.recognise``)."""

    source: str
    array: np.ndarray = field(repr=False)

    @property
    def dtype(self) -> str:
        """The array's dtype name."""
        return self.array.dtype.name


Saved = SavedResult | BareArray


def is_result_document(data: Mapping[str, Any]) -> bool:
    """True for a JSON object written as a result (``format_version`` and a result tensor), not an input."""
    return "format_version" in data and any(name in data for name in RESULT_ONLY)


def is_result_archive(data: Mapping[str, Any]) -> bool:
    """True for an .npz holding a result's tensors (``weights``, ``output``, ... or per-head ``q``), not an input."""
    q = data.get(Q)
    return any(name in data for name in RESULT_ONLY) or (isinstance(q, np.ndarray) and q.ndim == 3)


def load_result(source: str) -> SavedResult:
    """Read a JSON result of format version 1.x from ``source`` (a path or ``-``)."""
    from attnx.io.documents import load_document

    return result_from_document(load_document(source))


def load_input_or_result(
    source: str, overrides: InputOverrides | None = None, limits: Limits | None = None
) -> AttentionSpec | Saved:
    """What ``source`` holds: an input (as ``load_spec`` reads it), a saved result, or one bare array.

    JSON, YAML and .npz are read once, under ``limits`` (default: ``Limits.from_env()``), so ``-`` (stdin)
    works for them; a folder is read as .npy files named after tensors, a ``.jsonl`` file as `attnx run -f
    jsonl` writes it, and a ``.npy`` file as one bare array.
    """
    from attnx.io import load_source  # the package imports this module's neighbours, not this module

    limits = limits or Limits.from_env()
    path = Path(source)
    if source != "-" and path.is_dir():
        return _npy_folder(path, limits)
    if source.lower().endswith(".npy"):
        return BareArray(source, read_npy(path, source, limits))
    if source.lower().endswith(".jsonl"):
        return _jsonl(source, limits)
    doc = load_source(source, limits)
    if doc.name.lower().endswith(".npz") or _is_archive_data(doc.data):
        if is_result_archive(doc.data):
            return _archive_result(doc)
    elif is_result_document(doc.data):
        return result_from_document(doc)
    return spec_from_document(doc, overrides)


def _is_archive_data(data: Mapping[str, Any]) -> bool:
    return any(isinstance(value, np.ndarray) for value in data.values())


def read_npy(path: Path, name: str, limits: Limits) -> np.ndarray:
    """One ``.npy`` file, its header checked against the caps (and for pickled objects) before its data is read."""
    from attnx.io.arrays import check_header

    try:
        size = path.stat().st_size
        limits.check_bytes(size, name)
        with path.open("rb") as stream:
            shape, _, _ = check_header(stream, name, size)
            problem = limits.shape_problem(shape)
            if problem:
                raise LimitError(f"{name}: {problem}")
            stream.seek(0)
            array = np.load(stream, allow_pickle=False)
        note_read(path)
    except OSError as exc:
        raise InputError(f"{name}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # data shorter than the header says
        raise InputError(f"{name}: not a valid .npy array: {str(exc).split(';')[0]}") from None
    if array.dtype.kind not in "biuf":
        raise InputError(f"{name}: holds {array.dtype} values, not numbers")
    return array


def _tensor(name: TensorName, value: Any, where: str, limits: Limits, doc: Document | None = None) -> np.ndarray:
    """``value`` as tensor ``name``: numbers (null: NaN) with the tensor's rank, its shape within ``limits``; a cell
    that is no number float64 holds is an error naming it (located in ``doc``, where the value came from one)."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        if _first_bad(value, ())[0] is not None:  # one walk over the cells: a boolean would pass as 1.0
            raise _bad_cell(name, value, where, doc)
        array = np.array(value, dtype=np.float64)
    if array.ndim != RESULT_TENSORS[name]:
        raise InputError(f"{where}: {name}: expected {RESULT_TENSORS[name]} dimensions, got {array.ndim}")
    check_shape(array.shape, f"{where}: {name}", limits)
    if array.dtype.kind not in "biuf":
        raise InputError(f"{where}: {name}: holds {array.dtype} values, not numbers")
    return array.astype(np.float64, copy=False)


def check_shape(shape: tuple[int, ...], where: str, limits: Limits) -> None:
    """The one cap rule for every tensor a result holds, however it was written: its axes within
    ``max_dimension``, its elements within ``max_elements``."""
    problem = limits.shape_problem(shape)
    if problem:
        raise LimitError(f"{where}: {problem}")


def _bad_cell(name: str, value: Any, where: str, doc: Document | None) -> InputError:
    """The error for tensor ``name``'s first cell that is neither a number float64 holds nor null."""
    path, cell = _first_bad(value, ())
    if cell is _RAGGED:
        message = f"{name}: rows of different lengths"
    elif isinstance(cell, int) and not isinstance(cell, bool):
        message = f"{name}: an integer of {len(str(abs(cell)))} digits is beyond float64's range"
    else:
        message = f"{name}: expected numbers (or null), got {type(cell).__name__}"
    if doc is not None and path is not None:
        return cast(InputError, doc.error((name, *path), message.split(": ", 1)[1], kind=InputError))
    return InputError(f"{where}: {message}")


_RAGGED = object()


def _first_bad(value: Any, path: tuple[int, ...]) -> tuple[tuple[int, ...] | None, Any]:
    """Where in nested lists ``value`` the first cell float64 cannot hold is, and that cell (``_RAGGED``: lists of
    different lengths side by side)."""
    if isinstance(value, list):
        lengths = {len(item) if isinstance(item, list) else -1 for item in value}
        if len(lengths) > 1:
            return path, _RAGGED
        for index, item in enumerate(value):
            found, cell = _first_bad(item, (*path, index))
            if found is not None:
                return found, cell
        return None, None
    if value is None or type(value) is float or (type(value) is int and abs(value) <= _FLOAT_MAX):
        return None, None
    return path, value


def result_from_document(doc: Document) -> SavedResult:
    """The JSON result of format version 1.x held by an already parsed document, each tensor within the caps."""
    data = doc.data
    version = data.get("format_version", "")
    if not isinstance(version, str) or not version.startswith("1."):
        shown = version if isinstance(version, str) and version else "missing" if not version else repr(version)
        raise InputError(f"{doc.name}: not an attnx JSON result of format 1.x (format_version {shown:.40})")
    limits = doc.limits
    tensors = {name: _tensor(name, data[name], doc.name, limits, doc) for name in RESULT_TENSORS if name in data}
    meta = {key: value for key, value in data.items() if key not in RESULT_TENSORS}
    for key in LABELS:
        if key in meta and not (isinstance(meta[key], list) and all(isinstance(t, str) for t in meta[key])):
            raise doc.error(
                (key,), f"expected a list of token strings, got {type(meta[key]).__name__}", kind=InputError
            )
    dtype = data.get("dtype")
    return SavedResult(doc.name, meta, tensors, dtype if isinstance(dtype, str) else None)


def _archive_result(doc: Document) -> SavedResult:
    """An .npz of tensors under their names (as `attnx run -f npz` writes), with ``tokens`` and ``key_tokens``."""
    data = doc.data
    unknown = sorted(set(data) - set(RESULT_TENSORS) - set(LABELS) - {MASK})
    if unknown:
        names = ", ".join(RESULT_TENSORS)
        raise InputError(f"{doc.name}: {unknown[0]!r} is not a result tensor; a result .npz holds {names}")
    limits = doc.limits
    tensors = {name: _tensor(name, data[name], doc.name, limits) for name in RESULT_TENSORS if name in data}
    dtypes = {data[name].dtype.name for name in tensors if isinstance(data[name], np.ndarray)}
    meta = {key: data[key] for key in LABELS if key in data}
    for key in LABELS:
        if key in meta and not (isinstance(meta[key], list) and all(isinstance(t, str) for t in meta[key])):
            raise InputError(f"{doc.name}: {key}: expected a 1-d array of token strings")
    return SavedResult(doc.name, meta, tensors, dtypes.pop() if len(dtypes) == 1 else None)


def _npy_folder(path: Path, limits: Limits) -> SavedResult:
    """A folder of ``NAME.npy`` files, one per tensor (other files are left alone)."""
    tensors: dict[TensorName, np.ndarray] = {}
    dtypes: set[str] = set()
    for name in RESULT_TENSORS:
        file = path / f"{name}.npy"
        if file.is_file():
            array = read_npy(file, str(file), limits)
            tensors[name] = _tensor(name, array, str(path), limits)
            dtypes.add(array.dtype.name)
    if not tensors:
        raise InputError(f"{path}: a folder of results holds NAME.npy files, NAME one of {', '.join(RESULT_TENSORS)}")
    return SavedResult(str(path), {}, tensors, dtypes.pop() if len(dtypes) == 1 else None)


def _jsonl(source: str, limits: Limits) -> SavedResult:
    """The records of `attnx run -f jsonl` put back together as tensors."""
    from attnx.io.documents import read_text

    text, name = read_text(source, limits)
    cells: dict[TensorName, dict[tuple[int, ...], Any]] = {}
    tokens: dict[int, str] = {}
    meta: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise InputError(f"{name}:{number}: not a JSON record: {str(exc)[:80]}") from None
        if not isinstance(record, dict) or record.get("record") not in ("head_query", "query"):
            raise InputError(f"{name}:{number}: not a record of attnx run -f jsonl (record head_query or query)")
        query = _index(record, "query", name, number)
        if "query_token" in record:
            tokens[query] = str(record["query_token"])
        if record["record"] == "head_query":
            key: tuple[int, ...] = (_index(record, "head", name, number), query)
            fields = JSONL_HEAD_FIELDS
        else:
            key, fields = (query,), JSONL_QUERY_FIELDS
        for field_name, tensor in fields.items():
            if field_name in record:
                cells.setdefault(tensor, {})[key] = _tensor_row(record[field_name], tensor, f"{name}:{number}")
        meta.setdefault("format_version", record.get("format_version"))
    if not cells:
        raise InputError(f"{name}: no records of attnx run -f jsonl")
    tensors = {tensor: _assemble(tensor, found, name, limits) for tensor, found in cells.items()}
    if tokens:
        meta["tokens"] = [tokens.get(i, "") for i in range(max(tokens) + 1)]
    return SavedResult(name, meta, tensors, None)


def _index(record: Mapping[str, Any], key: str, name: str, number: int) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise InputError(f"{name}:{number}: {key} must be a whole number from 0, got {value!r}")
    return value


def _assemble(
    tensor: TensorName, found: Mapping[tuple[int, ...], list[float]], name: str, limits: Limits
) -> np.ndarray:
    """One tensor from its rows, each at its (head, query) or (query,) place, its shape within the caps before it
    is built; a missing row is an error."""
    shape = tuple(max(index[i] for index in found) + 1 for i in range(len(next(iter(found)))))
    widths = {len(row) for row in found.values()}
    check_shape((*shape, max(widths)), f"{name}: {tensor}", limits)
    expected = math.prod(shape)
    if len(found) != expected:
        raise InputError(f"{name}: {tensor}: {len(found)} records of the {expected} a complete result has")
    if len(widths) != 1:
        raise InputError(f"{name}: {tensor}: records of different lengths")
    return np.array([found[index] for index in np.ndindex(*shape)], dtype=np.float64).reshape(*shape, widths.pop())


def _tensor_row(value: Any, tensor: str, where: str) -> list[float]:
    """A record's row of ``tensor`` as floats (null: NaN); a cell float64 cannot hold is an error at ``where``."""
    if not isinstance(value, list):
        raise InputError(f"{where}: {tensor}: expected a list of numbers")
    if _first_bad(value, ())[0] is not None:
        raise _bad_cell(tensor, value, where, None)
    return [float("nan") if x is None else float(x) for x in value]
