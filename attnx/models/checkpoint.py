"""A local Hugging Face checkpoint folder: config.json, and its safetensors weights (one file, or shards named by an
index) read tensor by tensor, within the caps.

``Checkpoint`` is also the base of checkpoints stored otherwise (``attnx.models.gguf.GgufCheckpoint``): the config
accessors, the prefix, the shape and cap checks and the reading by rows are shared; a subclass supplies its config
dict and overrides the storage hooks (``keys``, ``file_of``, ``weight_files``, ``_part``, ``_readable``, ``_read``,
``_key``, ``weights_path``, ``close``), its parts answering ``get_shape()``, ``get_dtype()`` and ``[rows]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from attnx.errors import LimitError, ModelError
from attnx.io.output import note_read
from attnx.limits import Limits
from attnx.models.spm_tokenizer import sentencepiece_files

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")  # what a weight may be stored as
PACKED = "U8"  # what a quantized weight's packed values and scales are stored as (MXFP4 blocks and scales)
Shape = tuple[int | None, ...] | None  # a tensor's shape as config.json implies it (None: any size there)
T = TypeVar("T")
MAX_SIZE = 1 << 40  # no size in a config is larger (a 5,000-digit integer is refused, not computed with)
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
PREPROCESSOR = "preprocessor_config.json"  # an image or audio model's: a vision model's folder has no tokenizer
INDEX = "model.safetensors.index.json"  # a sharded checkpoint's map from tensor name to shard file
FILES = (CONFIG, WEIGHTS, TOKENIZER)
INSTALL_HINT = (
    'python -m pip install safetensors tokenizers (from a clone of attnx: python -m pip install -e ".[models]")'
)

PICKLED = "attnx reads safetensors only; re-save the model with safe_serialization=True"
# What a folder that lacks one of FILES may hold instead, and what to say about it.
ALTERNATIVES = {
    WEIGHTS: (
        ("pytorch_model.bin", "attnx reads safetensors only; re-save the model with safe_serialization=True"),
        (
            "pytorch_model.bin.index.json",
            "attnx reads safetensors only; re-save the model with safe_serialization=True",
        ),
    ),
    TOKENIZER: (
        ("vocab.txt", "attnx needs the fast tokenizer's tokenizer.json; save it with a fast tokenizer"),
        (
            "source.spm",
            "Marian's SentencePiece files are source.spm, target.spm and vocab.json, all three; or a tokenizer.json",
        ),
    ),
}


def require_libraries() -> None:
    """Raise ModelError (one line, with the install command) when safetensors or tokenizers is missing."""
    import importlib.util

    missing = [name for name in ("safetensors", "tokenizers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelError(f"reading models needs {' and '.join(missing)}, which is not installed: {INSTALL_HINT}")


class Checkpoint:
    """A checkpoint folder: its config, and its weights opened lazily, each tensor read when asked for.

    The weights are ``model.safetensors``, or the shards that ``model.safetensors.index.json`` names:
    every shard must be in the folder when it is opened, and each shard, once opened for a tensor,
    must hold every tensor the index puts in it.

    ``prefix`` is put before every tensor name: checkpoints saved from a task model carry the base
    model under a prefix (``bert.``, ``transformer.``), bare ones none (see ``use_prefix``).
    ``limits`` bound config.json (``max_bytes``, ``max_depth``) and every tensor read, checked from the file's
    header before its data is touched: a weight read whole against ``max_dimension`` and, by its bytes as
    float64, ``max_weight_bytes`` (its size is the model's, not the text's); a table read by rows (``rows``:
    the text's tokens; ``row_chunks``: an LM head) against ``max_dimension`` and ``max_elements`` for each read.
    """

    config_name = CONFIG  # what messages call the source of the config ("where config.json implies (64, 32)")
    _kept: dict[tuple[object, ...], object] | None = None  # tensors read once and kept (``kept``)

    def __init__(self, path: str | Path, limits: Limits | None = None) -> None:
        require_libraries()
        self.name = str(path)
        self.path = Path(path)
        self.limits = limits or Limits.from_env()
        if not self.path.is_dir():
            raise ModelError(f"{self.name}: no such folder; a checkpoint folder holds {', '.join(FILES)}")
        sharded = not (self.path / WEIGHTS).is_file() and (self.path / INDEX).is_file()
        spm = sentencepiece_files(self.path) if not (self.path / TOKENIZER).is_file() else None
        # Marian's or T5's SentencePiece files stand for a tokenizer.json; a folder with a preprocessor_config.json
        # may have none (a vision model's: ``Model`` asks for it where the family reads text).
        excused = spm is not None or (self.path / PREPROCESSOR).is_file()
        for name in (CONFIG, TOKENIZER) if sharded else FILES:
            if name != TOKENIZER or not excused:
                self.file(name)
        self.config = self._read_json(self.path / CONFIG)
        self.prefix = ""
        # Where each tensor is stored (None: every tensor is in model.safetensors), and the open files.
        self._map: dict[str, Path] | None = self._read_index() if sharded else None
        self._handles: dict[Path, Any] = {}
        self._headers: dict[Path, dict[str, Any]] = {}
        self._held: frozenset[str] | None = None

    def file(self, name: str) -> Path:
        """The path of ``name`` in the folder; a missing file is a ModelError that names it."""
        path = self.path / name
        if path.is_file():
            return path
        hint = next((why for other, why in ALTERNATIVES.get(name, ()) if (self.path / other).is_file()), None)
        held = "; " + hint if hint else f" (a checkpoint folder holds {', '.join(FILES)}, or one model's .gguf file)"
        if name == TOKENIZER and not hint:
            held = held[:-1] + f"; a vision model's holds {PREPROCESSOR} in place of the tokenizer)"
        raise ModelError(f"{path}: missing{held}")

    def optional_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in file ``name`` of the folder (generation_config.json), within the caps; None where the
        folder has no such file."""
        path = self.path / name
        return self._read_json(path) if path.is_file() else None

    def _read_json(self, path: Path) -> dict[str, Any]:
        """A JSON object from ``path``, within the byte and depth caps."""
        from attnx.io.jsontext import line_col, too_deep

        try:
            self.limits.check_bytes(path.stat().st_size, str(path))
            text = path.read_text("utf-8")
            note_read(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"{path}: cannot be read: {exc}") from None
        deep = too_deep(text, self.limits.max_depth)
        if deep is not None:
            offset, level = deep
            found = self.limits.exceeded("max_depth", f"level {level} of nesting")
            raise LimitError(f"{path}:{line_col(text, offset)}: {found}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
        except ValueError as exc:  # an integer of more than 4300 digits
            raise ModelError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ModelError(f"{path}: expected a JSON object")
        return data

    # config.json is untrusted input: each family reads its keys through these accessors, which check the
    # value's type and range and name the key in one line when it is wrong.

    @property
    def config_path(self) -> Path:
        """Where the config comes from, as messages name it: ``DIR/config.json``."""
        return self.path / CONFIG

    def _key(self, key: str) -> str:
        """Where config key ``key`` comes from, as messages name it: ``DIR/config.json: hidden_size``."""
        return f"{self.config_path}: {key}"

    def config_key(self, key: str) -> str:
        """Where config key ``key`` comes from, as messages name it (``_key``: a GGUF file's metadata key too)."""
        return self._key(key)

    def _wrong(self, key: str, expected: str, value: Any) -> ModelError:
        return ModelError(f"{self._key(key)} must be {expected}, got {value!r}")

    def integer(self, *keys: str, default: int | None = None) -> int:
        """The first of ``keys`` present in config.json, a whole number from 1 to 2^40 (or ``default``)."""
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
                raise self._wrong(key, f"a whole number from 1 to {MAX_SIZE:,}", value)
            return value
        if default is None:
            raise ModelError(f"{self._key(keys[0])} is missing")
        return default

    def number(self, key: str, default: float, *, low: float = -math.inf, high: float = math.inf) -> float:
        """A finite number from config.json strictly between ``low`` and ``high``, or ``default`` when absent."""
        value = self.config.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._wrong(key, "a finite number", value)
        if not low < value < high:
            raise self._wrong(key, f"a number between {low:g} and {high:g}", value)
        return float(value)

    def text(self, key: str, default: str) -> str:
        """A string from config.json, or ``default`` when absent."""
        value = self.config.get(key, default)
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings from config.json (empty when absent)."""
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(key, "a list of strings", value)
        return tuple(value)

    def flag(self, key: str, default: bool) -> bool:
        """true or false from config.json, or ``default`` when absent (or null)."""
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value)
        return value

    def mapping(self, key: str) -> dict[str, Any] | None:
        """An object from config.json, or None when absent."""
        value = self.config.get(key)
        if value is not None and not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        return value

    def _read_index(self) -> dict[str, Path]:
        """The index's map from tensor name to shard, each shard a file of this folder that exists."""
        where = self.path / INDEX
        weight_map = self._read_json(where).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelError(f"{where}: expected a non-empty weight_map from tensor names to shard files")
        shards: dict[str, Path] = {}
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
                raise ModelError(f"{where}: tensor {tensor!r} is placed in {shard!r}, which is not a file name")
            shards[tensor] = self.path / shard
        for shard in sorted(set(shards.values())):
            if not shard.is_file():
                placed = sum(1 for path in shards.values() if path == shard)
                raise ModelError(f"{shard}: missing: the index places {placed} tensors in it")
        return shards

    def weight_files(self) -> list[Path]:
        """The files that hold the weights: model.safetensors, or every shard the index names."""
        return [self.path / WEIGHTS] if self._map is None else sorted(set(self._map.values()))

    @property
    def weights_path(self) -> Path:
        """What messages about the weights as a whole name: model.safetensors (of a sharded checkpoint too)."""
        return self.path / WEIGHTS

    def file_of(self, full: str) -> Path:
        """The file that holds tensor ``full`` (prefix included)."""
        return self.path / WEIGHTS if self._map is None else self._map[full]

    def _open(self, path: Path) -> Any:
        """The open safetensors file ``path`` (opened on first use; only its header is read then)."""
        handle = self._handles.get(path)
        if handle is None:
            from safetensors import SafetensorError, safe_open

            try:
                note_read(path)
                handle = safe_open(str(path), framework="numpy")
            except (SafetensorError, OSError) as exc:
                raise ModelError(f"{path}: not a readable safetensors file: {exc}") from None
            self._handles[path] = handle
            if self._map is not None:
                held = set(handle.keys())
                missing = sorted(name for name, shard in self._map.items() if shard == path and name not in held)
                if missing:
                    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
                    raise ModelError(f"{path}: lacks tensor {missing[0]!r}{more}, which {INDEX} places in it")
        return handle

    def keys(self) -> frozenset[str]:
        """Every tensor name of the weights, as stored (prefix included)."""
        if self._held is None:
            held = self._open(self.path / WEIGHTS).keys() if self._map is None else self._map
            self._held = frozenset(held)
        return self._held

    def has(self, name: str, *, prefixed: bool = True) -> bool:
        """True when the weights hold tensor ``name`` (under the prefix, unless not ``prefixed``)."""
        return (self.prefix if prefixed else "") + name in self.keys()

    def use_prefix(self, prefixes: Sequence[str], probe: str, family: str) -> None:
        """Pick the first of ``prefixes`` under which the weights hold ``probe``; none is a ModelError."""
        held = self.keys()
        for prefix in prefixes:
            if prefix + probe in held:
                self.prefix = prefix
                return
        looked = " or ".join(repr(p + probe) for p in prefixes)
        raise ModelError(f"{self.weights_path}: no tensor {looked}: not a {family} checkpoint")

    def _slice(
        self, name: str, *alternatives: str, shape: Shape = None, prefixed: bool = True, packed: bool = False
    ) -> tuple[Any, str]:
        """The lazy slice of tensor ``name`` (or the first alternative held), once its dtype is a float (``packed``:
        bytes, ``U8``) and its shape the one config.json implies (``shape``: None checks nothing; an axis of None
        any size). Names are under the prefix unless not ``prefixed`` (a task model's head: ``lm_head.weight``)."""
        held = self.keys()
        prefix = self.prefix if prefixed else ""
        for candidate in (name, *alternatives):
            full = prefix + candidate
            if full in held:
                part = self._part(full)
                dtype, found = part.get_dtype(), tuple(part.get_shape())
                if (dtype != PACKED) if packed else not self._readable(dtype):
                    kinds = PACKED if packed else ", ".join(FLOAT_DTYPES)
                    raise ModelError(f"{self.file_of(full)}: tensor {full!r} holds {dtype} values; it should hold "
                                     f"{kinds}")  # fmt: skip
                if shape is not None and not _fits(found, shape):
                    sizes = ["any" if size is None else str(size) for size in shape]
                    implied = f"({', '.join(sizes)}{',' if len(sizes) == 1 else ''})"
                    where = f"{self.file_of(full)}: tensor {full!r}"
                    raise ModelError(f"{where} has shape {found}, where {self.config_name} implies {implied}")
                return part, full
        raise ModelError(f"{self.weights_path}: missing tensor {prefix + name!r}")

    def claim(self, name: str, shape: Shape) -> None:
        """Check tensor ``name`` (under the prefix) against ``shape``, as config.json implies it, from its header alone
        (no data is read): a ModelError naming both where they differ, or where the tensor is missing."""
        self._slice(name, shape=shape)

    def slab(self, name: str, index: int, shape: tuple[int, ...], *, packed: bool = False) -> np.ndarray:
        """Entry ``index`` of the first axis of tensor ``name`` (one expert of a fused ``[expert, …]`` tensor), read
        alone: its shape checked against ``shape`` (the whole tensor's, as config.json implies it) and the entry's
        against the weight caps. ``packed``: a tensor of bytes holding packed values (MXFP4 blocks and scales),
        read as stored."""
        part, full = self._slice(name, shape=shape, packed=packed)
        found = tuple(part.get_shape())
        if not 0 <= index < found[0]:
            raise ModelError(f"{self.file_of(full)}: tensor {full!r} has {found[0]} entries; entry {index} is needed")
        problem = self.limits.weight_problem(found[1:])
        if problem:
            raise LimitError(f"{self.file_of(full)}: tensor {full!r}: {problem}")
        return self.remember(("slab", name, index, packed), lambda: self._read(part, full, slice(index, index + 1))[0])

    def _part(self, full: str) -> Any:
        """The lazy slice of stored tensor ``full`` (its file opened on first use)."""
        return self._open(self.file_of(full)).get_slice(full)

    def _readable(self, dtype: str) -> bool:
        """Whether a tensor stored as ``dtype`` can be read as a weight."""
        return dtype in FLOAT_DTYPES

    def tensor(self, name: str, *alternatives: str, shape: Shape = None, prefixed: bool = True) -> np.ndarray:
        """Tensor ``name`` (under the prefix unless not ``prefixed``; else the first of ``alternatives`` held),
        read now, its shape checked against ``shape`` (what config.json implies) and the weight caps first."""

        def read() -> np.ndarray:
            part, full = self._slice(name, *alternatives, shape=shape, prefixed=prefixed)
            problem = self.limits.weight_problem(tuple(part.get_shape()))
            if problem:
                raise LimitError(f"{self.file_of(full)}: tensor {full!r}: {problem}")
            return self._read(part, full, slice(None))

        return self.remember(("tensor", name, alternatives, prefixed), read)

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Within: each tensor read whole (``tensor``, ``slab``) is kept, read-only, and handed out again until
        ``forget``: forward passes advanced together (``attnx.models.advance``) read a layer's weights once."""
        self._kept = {}
        try:
            yield
        finally:
            self._kept = None

    def forget(self) -> None:
        """Let go of the tensors ``kept`` holds (one layer's, as passes advance together)."""
        if self._kept is not None:
            self._kept.clear()

    def remember(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """What ``make()`` returns, made once while ``kept`` and handed out again under ``key`` until ``forget``
        (outside ``kept``: made each time). Arrays kept are made read-only: a change in place would reach every
        pass that shares them."""
        if self._kept is None:
            return make()
        if key not in self._kept:
            made = make()
            if isinstance(made, np.ndarray):
                made.flags.writeable = False
            self._kept[key] = made
        return cast(T, self._kept[key])

    def _table(self, name: str, *alternatives: str, shape: Shape, prefixed: bool) -> tuple[Any, str, tuple[int, int]]:
        """The lazy slice of 2-D tensor ``name``, its stored name and its shape (ModelError for other ranks)."""
        part, full = self._slice(name, *alternatives, shape=shape, prefixed=prefixed)
        table = tuple(part.get_shape())
        if len(table) != 2:
            raise ModelError(f"{self.file_of(full)}: tensor {full!r} has shape {table}; a table of rows has 2 axes")
        return part, full, (table[0], table[1])

    def row_chunks(
        self, name: str, *alternatives: str, shape: Shape = None, prefixed: bool = True
    ) -> tuple[tuple[int, int], Iterator[tuple[slice, np.ndarray]]]:
        """A 2-D table's shape, and its rows in order as ``(rows, values)`` chunks, each read when the iterator
        reaches it and within the element cap (``Limits.rows_per_chunk``): the table is never held whole."""
        part, full, table = self._table(name, *alternatives, shape=shape, prefixed=prefixed)
        step = self.limits.rows_per_chunk(table[1])

        def chunks() -> Iterator[tuple[slice, np.ndarray]]:
            for start in range(0, table[0], step):
                index = slice(start, min(start + step, table[0]))
                self._check_shape(full, (index.stop - start, table[1]))
                yield index, self._read(part, full, index)

        return table, chunks()

    def rows(self, name: str, index: slice | range | Sequence[int] | np.ndarray, shape: Shape = None) -> np.ndarray:
        """Rows of a 2-D tensor: a slice (or a range: an input's positions), or the rows of ``index`` (each read
        alone: the table stays on disk). ``shape`` is the whole table's, as config.json implies it; a row past the
        table's end is a ModelError."""
        if isinstance(index, range):
            index = slice(index.start, index.stop, index.step)
        part, full, table = self._table(name, shape=shape, prefixed=True)
        wanted = range(*index.indices(table[0])) if isinstance(index, slice) else np.asarray(index, dtype=np.intp)
        if isinstance(index, slice) and index.stop is not None and index.stop > table[0]:
            raise ModelError(f"{self.file_of(full)}: tensor {full!r} has {table[0]} rows; {index.stop} are needed")
        if (
            not isinstance(index, slice)
            and len(wanted)
            and (int(np.max(wanted)) >= table[0] or int(np.min(wanted)) < 0)
        ):
            raise ModelError(f"{self.file_of(full)}: tensor {full!r} has {table[0]} rows; row {int(np.max(wanted))} "
                             "is needed")  # fmt: skip
        self._check_shape(full, (len(wanted), *table[1:]))
        if isinstance(index, slice):
            return self._read(part, full, index)
        unique, inverse = np.unique(wanted, return_inverse=True)
        rows = np.concatenate([self._read(part, full, slice(int(i), int(i) + 1)) for i in unique])
        return rows[inverse]

    def _check_shape(self, full: str, shape: tuple[int, ...]) -> None:
        """Refuse to read ``shape`` rows of table ``full`` when an axis or its element count is over the caps."""
        problem = self.limits.shape_problem(shape)
        if problem:
            raise LimitError(f"{self.file_of(full)}: tensor {full!r}: {problem}")

    def _read(self, part: Any, full: str, index: slice) -> np.ndarray:
        path = self.file_of(full)
        try:
            if part.get_dtype() == "BF16":  # NumPy has no bfloat16: widen the raw 16 bits to float32
                return self._bfloat16(path, full, index)
            return np.asarray(part[index])
        except ModelError:
            raise
        except Exception as exc:  # safetensors reports bad data as assorted exception types
            raise ModelError(f"{path}: tensor {full!r} cannot be read: {exc}") from None

    def _bfloat16(self, path: Path, name: str, index: slice) -> np.ndarray:
        """Rows ``index`` of bfloat16 tensor ``name`` as float32, mapped from the file at its header's offsets."""
        header = self._headers.get(path)
        if header is None:
            with path.open("rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                header = {"": 8 + size, **json.loads(handle.read(size))}
            self._headers[path] = header
        entry = header[name]
        shape = tuple(entry["shape"])
        start, _ = entry["data_offsets"]
        raw = np.memmap(path, dtype="<u2", mode="r", offset=header[""] + start, shape=shape)
        return (raw[index].astype(np.uint32) << 16).view(np.float32)

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every tensor's shape and safetensors dtype name (``F32``, ``F16``, ``BF16``, ``I64``), from the headers."""
        out = {}
        for name in sorted(self.keys()):
            part = self._part(name)
            out[name] = (tuple(part.get_shape()), part.get_dtype())
        return out

    def close(self) -> None:
        """Let go of the weights files."""
        for handle in self._handles.values():
            if hasattr(handle, "__exit__"):
                handle.__exit__(None, None, None)
        self._handles.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fits(found: tuple[int, ...], shape: Shape) -> bool:
    """True when a tensor's ``found`` shape is ``shape`` (None: any shape; an axis of None: any size)."""
    if shape is None:
        return True
    return len(found) == len(shape) and all(want is None or want == got for want, got in zip(shape, found, strict=True))
