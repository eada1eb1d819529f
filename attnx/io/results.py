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
from attnx.core.tensors import (
    JSONL_HEAD_FIELDS,
    JSONL_QUERY_FIELDS,
    JSONL_SINK_FIELD,
    MASK,
    TENSORS,
    K,
    Q,
    TensorName,
    V,
)
from attnx.errors import InputError, LimitError
from attnx.io import jsontext
from attnx.io.cells import describe
from attnx.io.documents import Document, format_path
from attnx.io.messages import clip, first_clause
from attnx.io.output import note_read
from attnx.io.schema import InputOverrides, spec_from_document
from attnx.limits import Limits, digits

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
    """One ``.npy`` file of numbers, passed by the check every ``.npy`` reader makes (``attnx.io.arrays.check_npy``:
    its header's length, its header, its data really there, its shape within the caps) before its data is read."""
    from attnx.io.arrays import check_npy, read_array

    try:
        size = path.stat().st_size
        limits.check_bytes(size, name)
        with path.open("rb") as stream:
            dtype = check_npy(stream, name, size, limits)[1]
            if dtype.kind not in "biuf":
                raise InputError(f"{name}: holds {dtype} values, not numbers")
            stream.seek(0)
            array = read_array(stream)
        note_read(path)
    except OSError as exc:
        raise InputError(f"{name}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # what NumPy finds wrong past the header
        raise InputError(f"{name}: not a valid .npy array: {first_clause(exc)}") from None
    return array


def _tensor(name: TensorName, value: Any, where: str, limits: Limits, doc: Document | None = None) -> np.ndarray:
    """``value`` as tensor ``name``: numbers (null: NaN) with the tensor's rank, its shape within ``limits`` before
    it is built; a cell that is no number float64 holds is an error naming it (located in ``doc``, where the value
    came from one: there a number written beyond float64's range, ``1e400``, is one too)."""
    rank = RESULT_TENSORS[name]
    if not isinstance(value, np.ndarray):
        path, cell = _first_bad(value, rank)
        if path is not None:
            problem = _cell_problem(cell)
            if doc is not None:
                raise doc.error((name, *path), problem, kind=InputError)
            raise InputError(f"{where}: {format_path((name, *path))}: {problem}")
    shape = value.shape if isinstance(value, np.ndarray) else _list_shape(value)
    if len(shape) != rank:
        raise InputError(f"{where}: {name}: expected {rank} dimensions, got {len(shape)}")
    check_shape(shape, f"{where}: {name}", limits)
    if isinstance(value, np.ndarray) and value.dtype.kind not in "biuf":
        raise InputError(f"{where}: {name}: holds {value.dtype} values, not numbers")
    array = np.asarray(value, dtype=np.float64)
    found = None if doc is None else _written_overflow(doc, name, array)
    if doc is not None and found is not None:
        raise doc.error((name, *found[0]), _overflow_problem(found[1]), kind=InputError)
    return array


def check_shape(shape: tuple[int, ...], where: str, limits: Limits) -> None:
    """The one cap rule for every tensor a result holds, however it was written: its axes within
    ``max_dimension``, its elements within ``max_elements``."""
    problem = limits.shape_problem(shape)
    if problem:
        raise LimitError(f"{where}: {problem}")


_RAGGED = object()


def _first_bad(value: Any, rank: int) -> tuple[tuple[int, ...] | None, Any]:
    """Where in ``value``, nested lists for a tensor of ``rank`` axes, the first problem is, and what: a cell that is
    no number float64 holds (nor null), a list nested deeper than ``rank``, or ``_RAGGED`` at rows of different
    lengths (or shapes). ``(None, None)`` when the lists are rectangular cells; their rank is checked after."""
    shape = _list_shape(value)
    if len(shape) > rank:  # the first cell where a number belongs is a list
        path = (0,) * rank
        for index in path:
            value = value[index]
        return path, value
    return _walk(value, shape, ())


def _walk(value: Any, shape: tuple[int, ...], path: tuple[int, ...]) -> tuple[tuple[int, ...] | None, Any]:
    """``_first_bad`` below ``path``, every list held to ``shape`` (the shape the first items imply)."""
    level = len(path)
    if level == len(shape):
        return (None, None) if _is_cell(value) else (path, value)
    if not isinstance(value, list) or len(value) != shape[level]:
        return (path[:-1], _RAGGED) if isinstance(value, list) or _is_cell(value) else (path, value)
    for index, item in enumerate(value):
        found, cell = _walk(item, shape, (*path, index))
        if found is not None:
            return found, cell
    return None, None


def _is_cell(value: Any) -> bool:
    """True for null or a number float64 holds (a boolean is no number; an integer past ±1.8e308 is not held)."""
    return value is None or type(value) is float or (type(value) is int and abs(value) <= _FLOAT_MAX)


def _cell_problem(cell: Any) -> str:
    """What is wrong with a cell ``_first_bad`` found."""
    if cell is _RAGGED:
        return "rows of different lengths"
    if type(cell) is int:
        return f"an integer of {digits(cell)} digits is beyond float64's range"
    return f"expected numbers (or null), got {describe(cell)}"


def _list_shape(value: Any) -> tuple[int, ...]:
    """The shape of nested lists that ``_first_bad`` passed (as rectangular as NumPy would build them)."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _overflow(text: str, path: tuple[str | int, ...], array: np.ndarray) -> tuple[tuple[int, ...], str] | None:
    """The place in ``array``, read from the JSON value at ``path`` of ``text``, of its first number written beyond
    float64's range (``1e400``: JSON reads it as inf, as it reads ``Infinity``), and that literal; None if none."""
    if not np.isinf(array).any():  # only then is the text scanned
        return None
    start = jsontext.value_offset(text, path)
    found = None if start is None else jsontext.overflowing_float(text, start)
    if found is None:
        return None
    cell = np.argwhere(np.isinf(array))[found[0]]
    return tuple(int(i) for i in cell), found[2]


def _written_overflow(doc: Document, name: str, array: np.ndarray) -> tuple[tuple[int, ...], str] | None:
    """``_overflow`` for tensor ``name`` of a JSON or a YAML document (where YAML's ``1e400`` is not ``.inf``)."""
    if doc.text is not None:
        return _overflow(doc.text, (name,), array)
    if doc.root is None or not np.isinf(array).any():
        return None
    from attnx.io.yamltext import child  # a node tree exists only if YAML was read

    for cell in np.argwhere(np.isinf(array)):
        place = tuple(int(i) for i in cell)
        node = child(doc.root, name)
        for index in place:
            node = child(node, index)
        literal = getattr(node, "value", None)
        if isinstance(literal, str) and not literal.lower().endswith(".inf"):
            return place, literal
    return None


def _overflow_problem(literal: str) -> str:
    return f"the number {clip(literal, 24)} is beyond float64's range"


def result_from_document(doc: Document) -> SavedResult:
    """The JSON result of format version 1.x held by an already parsed document, each tensor within the caps; its
    token labels lists of strings, its mask rows of booleans."""
    data = doc.data
    version = data.get("format_version", "")
    if not isinstance(version, str) or not version.startswith("1."):
        shown = version if isinstance(version, str) and version else "missing" if not version else repr(version)
        raise InputError(f"{doc.name}: not an attnx JSON result of format 1.x (format_version {shown:.40})")
    limits = doc.limits
    tensors = {name: _tensor(name, data[name], doc.name, limits, doc) for name in RESULT_TENSORS if name in data}
    meta = {key: value for key, value in data.items() if key not in RESULT_TENSORS}
    for key in LABELS:
        if key in meta:
            _labels(doc, key, meta[key])
    if meta.get(MASK) is not None:
        _mask(doc, meta[MASK])
    dtype = data.get("dtype")
    return SavedResult(doc.name, meta, tensors, dtype if isinstance(dtype, str) else None)


def _labels(doc: Document, key: str, value: Any) -> None:
    """Refuse ``tokens`` or ``key_tokens`` that are not a list of strings, or longer than the dimension cap."""
    if not isinstance(value, list):
        raise doc.error((key,), f"expected a list of token strings, got {describe(value)}", kind=InputError)
    bad = next((i for i, token in enumerate(value) if not isinstance(token, str)), None)
    if bad is not None:
        raise doc.error((key, bad), f"expected a token string, got {describe(value[bad])}", kind=InputError)
    check_shape((len(value),), f"{doc.where((key,))}: {key}", doc.limits)


def _mask(doc: Document, value: Any) -> None:
    """Refuse a ``mask`` that is not rows of booleans (``[query, key]``), all of one length."""
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise doc.error((MASK,), "expected rows of booleans (true: the query may attend the key)", kind=InputError)
    for i, row in enumerate(value):
        if len(row) != len(value[0]):
            raise doc.error((MASK, i), f"has {len(row)} values but row 0 has {len(value[0])}", kind=InputError)
        bad = next((j for j, cell in enumerate(row) if not isinstance(cell, bool)), None)
        if bad is not None:
            raise doc.error((MASK, i, bad), f"expected true or false, got {describe(row[bad])}", kind=InputError)


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
    """The records of `attnx run -f jsonl` put back together as tensors, each checked where it is read."""
    from attnx.io.documents import read_text

    text, name = read_text(source, limits)
    records = _Records()
    for number, line in enumerate(text.split("\n"), start=1):  # "\n" only: a string may hold U+2028 as it is
        if line.strip():
            records.add(_Line(name, number, line))
    return records.result(name, limits)


@dataclass(frozen=True)
class _Line:
    """One line of a JSON Lines file, that values are located in: ``file:line:column``."""

    name: str
    number: int
    text: str

    def error(self, path: tuple[str | int, ...], message: str) -> InputError:
        """An InputError at the value at ``path`` (just the line for ``()``): ``r.jsonl:3:40: weights[2]: ...``."""
        offset = jsontext.value_offset(self.text, path) if path else None
        place = f"{self.name}:{self.number}" + ("" if offset is None else f":{offset + 1}")
        return InputError(f"{place}: {format_path(path) + ': ' if path else ''}{message}")

    def record(self) -> dict[str, Any]:
        """The line as a record of `attnx run -f jsonl` (``record`` head_query or query)."""
        try:
            record = json.loads(self.text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:  # ValueError: past Python's int digits
            raise self.error((), f"not a JSON record: {clip(first_clause(exc), 80)}") from None
        if not isinstance(record, dict) or record.get("record") not in ("head_query", "query"):
            raise self.error((), "not a record of attnx run -f jsonl (record head_query or query)")
        version = record.get("format_version", "1.")
        if not isinstance(version, str) or not version.startswith("1."):
            raise self.error(("format_version",), f"expected a format 1.x, got {describe(version)}")
        return cast(dict[str, Any], record)


@dataclass
class _Records:
    """What the records of a JSON Lines result hold so far: each tensor's rows by place (``(head, query)`` or
    ``(query,)``), each query's token, the format version."""

    rows: dict[TensorName, dict[tuple[int, ...], list[Any]]] = field(default_factory=dict)
    tokens: dict[int, str] = field(default_factory=dict)
    version: str | None = None

    def add(self, line: _Line) -> None:
        """The record on ``line``, each value checked: indices, token, every row's cells."""
        record = line.record()
        query = _index(record, "query", line)
        if record["record"] == "head_query":
            place: tuple[int, ...] = (_index(record, "head", line), query)
            fields = {**JSONL_HEAD_FIELDS, JSONL_SINK_FIELD[0]: JSONL_SINK_FIELD[1]}
        else:
            place, fields = (query,), dict(JSONL_QUERY_FIELDS)
        if "query_token" in record:
            token = record["query_token"]
            if not isinstance(token, str):
                raise line.error(("query_token",), f"expected a token string, got {describe(token)}")
            self.tokens[query] = token
        for key, tensor in fields.items():
            if key in record:
                found = self.rows.setdefault(tensor, {})
                if place in found:
                    where = f"head {place[0]}, query {place[1]}" if len(place) == 2 else f"query {place[0]}"
                    raise line.error((), f"a second record of {tensor} at {where}")
                found[place] = _row(record[key], key, line, scalar=RESULT_TENSORS[tensor] == len(place))
        if self.version is None and isinstance(record.get("format_version"), str):
            self.version = record["format_version"]

    def result(self, name: str, limits: Limits) -> SavedResult:
        """The tensors assembled (each shape within the caps first), with the tokens of the queries."""
        if not self.rows:
            raise InputError(f"{name}: no records of attnx run -f jsonl")
        tensors = {tensor: _assemble(tensor, found, name, limits) for tensor, found in self.rows.items()}
        meta: dict[str, Any] = {"format_version": self.version}
        if self.tokens:
            count = max(self.tokens) + 1
            check_shape((count,), f"{name}: tokens", limits)
            meta["tokens"] = [self.tokens.get(i, "") for i in range(count)]
        return SavedResult(name, meta, tensors, None)


def _index(record: Mapping[str, Any], key: str, line: _Line) -> int:
    """A record's ``head`` or ``query``: a whole number from 0 (how large the caps say, once all are read)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise line.error((), f"{key} must be a whole number from 0, got {describe(value)}")
    return value


def _assemble(tensor: TensorName, found: Mapping[tuple[int, ...], list[Any]], name: str, limits: Limits) -> np.ndarray:
    """One tensor from its rows, each at its (head, query) or (query,) place, the shape they imply within the caps
    before anything is built (a record at query 2^31 − 1 allocates nothing); a missing row is an error."""
    shape = tuple(max(index[i] for index in found) + 1 for i in range(len(next(iter(found)))))
    widths = {len(row) for row in found.values()}
    scalar = RESULT_TENSORS[tensor] == len(shape)  # one number per place: a sink's weight
    check_shape(shape if scalar else (*shape, max(widths)), f"{name}: {tensor}", limits)
    expected = math.prod(shape)
    if len(found) != expected:
        raise InputError(f"{name}: {tensor}: {len(found)} records of the {expected} a complete result has")
    if len(widths) != 1:
        raise InputError(f"{name}: {tensor}: records of different lengths")
    array = np.array([found[index] for index in np.ndindex(*shape)], dtype=np.float64)
    return array.reshape(shape if scalar else (*shape, widths.pop()))


def _row(value: Any, key: str, line: _Line, *, scalar: bool = False) -> list[Any]:
    """A record's row for ``key`` (a ``scalar`` field's one number, as a row of one): numbers float64 holds, or
    null (NaN); anything else, ``1e400`` included, is an error at its place on ``line``."""
    if not scalar and not isinstance(value, list):
        raise line.error((key,), f"expected a list of numbers, got {describe(value)}")
    path, cell = _first_bad(value, 0 if scalar else 1)
    if path is not None:
        raise line.error((key, *path), _cell_problem(cell))
    row = [value] if scalar else value
    found = _overflow(line.text, (key,), np.array(row, dtype=np.float64))
    if found is not None:
        raise line.error((key,) if scalar else (key, *found[0]), _overflow_problem(found[1]))
    return row
