"""GGUF files read as untrusted input: the header parsed within the caps, tensor data memory-mapped and dequantized
by rows with the ``gguf`` package, split files (``NAME-00001-of-00003.gguf``) joined into one model.

The layout (GGUF v2 and v3, little-endian): ``GGUF``, the version, the tensor and key counts, the metadata keys
(a string, a value type and a value each), then one entry per tensor (name, dimensions fastest-first, ggml type,
offset into the data), then the data from the next ``general.alignment`` boundary (32 bytes by default).
``gguf.GGUFReader`` builds a NumPy view per metadata element (4 s for a 49,152-token vocabulary), so the header
is parsed here with ``struct``; dequantizing is the package's (each type's ``dequantize_rows``, on larger groups of
rows than ``gguf.quants.dequantize`` gives it).
"""

from __future__ import annotations

import functools
import math
import mmap
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from attnx.errors import LimitError, ModelError
from attnx.io.output import note_read
from attnx.limits import Limits, size_text

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # v1 counted in 32 bits; llama.cpp has written v3 since 2023
MAX_DIMS = 4  # GGML_MAX_DIMS
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT, where general.alignment is absent
STRING, ARRAY = 8, 9  # the two metadata value types that are not fixed-size
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
SPLIT = re.compile(r"(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
_LENGTH = struct.Struct("<Q")  # a string's length prefix
LAZY = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")  # arrays of strings decoded when first used (``Strings``)
# Values per call of a type's row dequantizer. gguf.quants.dequantize calls it on 16 rows at a time, and on rows of
# 576 values its Python overhead took most of the time; blocks are independent, so any grouping gives the same values.
# 2^16 keeps each temporary array (256 KiB in float32) in L2: on SmolLM2 Q4_1 every layer took 0.39 s at 2^16, 0.34 s
# at 2^17 and 0.82 s at 2^18 (the package: 1.1 s), on an AVX2 EPYC with 1 MiB of L2 per core.
CHUNK = 1 << 16


def install_hint() -> str:
    """The command that installs what reading GGUF files needs."""
    return 'python -m pip install gguf tokenizers (from a clone of attnx: python -m pip install -e ".[models]")'


def require_gguf() -> None:
    """Raise ModelError (one line, with the install command) when the gguf package is missing."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"reading GGUF files needs gguf, which is not installed: {install_hint()}")


@functools.cache
def type_name(kind: int) -> str:
    """A ggml type's name (``Q4_K``), or ``type 99`` for a number the gguf package does not know."""
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(kind).name
    except ValueError:
        return f"type {kind}"


@functools.cache
def block_of(kind: int) -> tuple[int, int] | None:
    """Elements and bytes of one block of ggml type ``kind`` (1 and 4 for F32), or None for an unknown type."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        return None


@functools.cache
def dequantizable(kind: int) -> bool:
    """Whether the gguf package dequantizes ggml type ``kind`` (tried on one block of zeros)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    block = block_of(kind)
    if block is None:
        return False
    try:
        dequantize(np.zeros((1, block[1]), dtype=np.uint8), GGMLQuantizationType(kind))
    except NotImplementedError:
        return False
    except Exception:  # any other failure on zeros: the type cannot be trusted either
        return False
    return True


@functools.cache
def row_dequantizer(kind: int) -> Callable[[np.ndarray], np.ndarray] | None:
    """The gguf package's dequantizer of whole rows of ggml type ``kind`` (``[rows, bytes]`` uint8 to ``[rows,
    values]`` float32, what ``gguf.quants.dequantize`` applies to 16 rows at a time), or None where the package
    has no such class for the type (F32 and F16, which it views or casts whole)."""
    from gguf import quants

    trait = getattr(quants, type_name(kind), None)
    if not isinstance(trait, type) or getattr(trait, "qtype", None) != kind:
        return None
    kernel, grid = getattr(trait, "dequantize_rows", None), getattr(trait, "init_grid", None)
    if not callable(kernel) or not callable(grid):
        return None
    grid()  # the IQ types' lookup grids, as gguf.quants.dequantize builds them first
    return kernel


def readable_types() -> tuple[str, ...]:
    """The ggml types the gguf package dequantizes, by name."""
    from gguf import GGMLQuantizationType

    return tuple(kind.name for kind in GGMLQuantizationType if dequantizable(kind))


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: ``shape`` in NumPy's order (rows first: GGUF's dimensions reversed), its ggml type,
    and where its bytes are (``start`` from the file's beginning, ``size`` bytes)."""

    name: str
    shape: tuple[int, ...]
    kind: int
    start: int
    size: int
    path: Path

    @property
    def elements(self) -> int:
        """How many values it holds."""
        return math.prod(self.shape)

    @property
    def width(self) -> int:
        """Values per row (GGUF's first dimension): quantization blocks never cross a row."""
        return self.shape[-1]

    @property
    def rows(self) -> int:
        """Rows of the tensor seen as 2-D (every axis but the last flattened)."""
        return self.elements // self.width

    @property
    def type_name(self) -> str:
        """Its ggml type's name."""
        return type_name(self.kind)


class Cursor:
    """Reads a header front to back from a mapped file, every read checked against the file's end and the cap."""

    def __init__(self, data: mmap.mmap, path: Path, limits: Limits) -> None:
        self.data, self.path, self.limits, self.at = data, path, limits, 0
        self.end = min(len(data), limits.max_bytes)

    def need(self, size: int, what: str) -> None:
        """Refuse ``size`` more bytes of ``what`` past the file's end (truncated) or past the cap."""
        if self.at + size <= self.end:
            return
        if self.at + size <= len(self.data):
            found = f"a header of more than {size_text(self.end)}"
            raise LimitError(f"{self.path}: {self.limits.exceeded('max_bytes', found)}")
        raise ModelError(f"{self.path}: truncated: {what} at byte {self.at:,} runs past the file's end")

    def take(self, size: int, what: str) -> int:
        """Move past ``size`` bytes of ``what`` and return where they start."""
        self.need(size, what)
        self.at += size
        return self.at - size

    def scalar(self, kind: int, what: str) -> Any:
        """One fixed-size value of metadata type ``kind``."""
        form = SCALARS[kind]
        return struct.unpack_from(form, self.data, self.take(struct.calcsize(form), what))[0]

    def text(self, what: str) -> str:
        """A length-prefixed UTF-8 string."""
        size = self.scalar(10, what)
        start = self.take(size, what)
        try:
            return self.data[start : start + size].decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{self.path}: {what} at byte {start:,} is not UTF-8") from None

    def value(self, kind: int, what: str, depth: int = 0, *, lazy: bool = False) -> Any:
        """A metadata value of type ``kind``: a number, a string, true or false, or a list (arrays nest); with
        ``lazy``, an array of strings as ``Strings``, its bytes kept and decoded when first used."""
        if kind in SCALARS:
            return self.scalar(kind, what)
        if kind == STRING:
            return self.text(what)
        if kind != ARRAY:
            raise ModelError(f"{self.path}: {what} has value type {kind}, which GGUF does not define")
        if depth >= self.limits.max_depth:
            found = self.limits.exceeded("max_depth", f"arrays nested {depth + 1} deep")
            raise LimitError(f"{self.path}: {what}: {found}")
        item, count = self.scalar(4, what), self.scalar(10, what)
        if item in SCALARS:  # numbers: one read of the whole array
            form = SCALARS[item]
            start = self.take(count * struct.calcsize(form), what)
            return np.frombuffer(self.data, dtype=np.dtype(form), count=count, offset=start).tolist()
        self.need(count * 8, what)  # each string or array takes 8 bytes or more: a false count fails here
        if item == STRING:
            return self.skip_texts(count, what) if lazy else self.texts(count, what)
        return [self.value(item, what, depth + 1) for _ in range(count)]

    def texts(self, count: int, what: str) -> list[str]:
        """``count`` length-prefixed UTF-8 strings (a vocabulary, its merges) in one loop; the first that runs past
        the end or is not UTF-8 is read again by ``text``, which says what is wrong with it."""
        data, end, at, out = self.data, self.end, self.at, []
        length = _LENGTH.unpack_from
        try:
            for _ in range(count):
                if at + 8 > end:
                    break
                size = length(data, at)[0]
                if at + 8 + size > end:
                    break
                out.append(data[at + 8 : at + 8 + size].decode("utf-8"))
                at += 8 + size
        except UnicodeDecodeError:
            pass
        self.at = at
        out.extend(self.text(what) for _ in range(count - len(out)))  # raises at the string that stopped the loop
        return out

    def skip_texts(self, count: int, what: str) -> Sequence[str]:
        """``count`` length-prefixed strings passed over (their lengths checked against the end and the cap), kept as
        ``Strings``; the first that runs past the end is read again by ``text``, which says so."""
        data, end, at = self.data, self.end, self.at
        length = _LENGTH.unpack_from
        for _ in range(count):
            if at + 8 > end:
                return self.texts(count, what)  # raises at the string that runs past the end
            at += 8 + length(data, at)[0]
        if at > end:
            return self.texts(count, what)
        strings = Strings(bytes(data[self.at : at]), count, self.path, what, self.at)
        self.at = at
        return strings


class Strings(Sequence[str]):
    """A metadata array of strings whose bytes were only passed over (a vocabulary of 262,144 tokens takes longer to
    decode than the rest of the header to read): its length is known, and its first use decodes every string (one
    that is not UTF-8 is a ModelError then, naming the key and the byte)."""

    def __init__(self, raw: bytes, count: int, path: Path, what: str, offset: int) -> None:
        self.raw, self.size, self.path, self.what, self.offset = raw, count, path, what, offset
        self._items: list[str] | None = None

    def items(self) -> list[str]:
        """Every string, decoded (once)."""
        if self._items is None:
            raw, at, out = self.raw, 0, []
            length = _LENGTH.unpack_from
            try:
                for _ in range(self.size):
                    size = length(raw, at)[0]
                    out.append(raw[at + 8 : at + 8 + size].decode("utf-8"))
                    at += 8 + size
            except UnicodeDecodeError:
                byte = self.offset + at + 8
                raise ModelError(f"{self.path}: {self.what} at byte {byte:,} is not UTF-8") from None
            self._items = out
        return self._items

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self.items()[index]


def _header(cursor: Cursor) -> tuple[int, int, int]:
    """The version, tensor count and key count, once the magic is there."""
    path = cursor.path
    if len(cursor.data) < 4 or cursor.data[:4] != MAGIC:
        raise ModelError(f"{path}: not a GGUF file (it does not start with the bytes GGUF)")
    cursor.take(4, "the magic")
    version = cursor.scalar(4, "the version")
    if version not in VERSIONS:
        order = " (a big-endian file: attnx reads little-endian GGUF)" if version >= 1 << 16 else ""
        raise ModelError(f"{path}: GGUF version {version} is not supported (versions 2 and 3){order}")
    return version, cursor.scalar(10, "the tensor count"), cursor.scalar(10, "the key count")


def _metadata(cursor: Cursor, count: int) -> dict[str, Any]:
    """Every metadata key and its value (the vocabulary and its merges as ``Strings``, decoded when first used)."""
    metadata: dict[str, Any] = {}
    for number in range(count):
        key = cursor.text(f"metadata key {number}")
        if key in metadata:
            raise ModelError(f"{cursor.path}: metadata key {key!r} appears twice")
        kind, what = cursor.scalar(4, f"metadata key {key!r}"), f"metadata key {key!r}"
        metadata[key] = cursor.value(kind, what, lazy=key in LAZY)
    return metadata


def _tensor(cursor: Cursor, number: int) -> tuple[str, tuple[int, ...], int, int]:
    """One tensor entry: its name, shape (NumPy's order), ggml type and offset into the data."""
    path = cursor.path
    name = cursor.text(f"tensor {number}'s name")
    dims = cursor.scalar(4, f"tensor {name!r}")
    if not 1 <= dims <= MAX_DIMS:
        raise ModelError(f"{path}: tensor {name!r} has {dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}")
    sizes = [cursor.scalar(10, f"tensor {name!r}") for _ in range(dims)]
    if any(size < 1 for size in sizes) or math.prod(sizes) >= 1 << 62:
        raise ModelError(f"{path}: tensor {name!r} has dimensions {sizes}, which no tensor has")
    kind, offset = cursor.scalar(4, f"tensor {name!r}"), cursor.scalar(10, f"tensor {name!r}")
    return name, tuple(reversed(sizes)), kind, offset


def _place(path: Path, name: str, shape: tuple[int, ...], kind: int, start: int, length: int) -> TensorInfo:
    """The tensor's entry checked: a type the gguf package knows, rows whole blocks, its bytes inside the file."""
    block = block_of(kind)
    if block is None:
        raise ModelError(f"{path}: tensor {name!r} is stored as ggml {type_name(kind)}, which the gguf package does "
                         "not know")  # fmt: skip
    if shape[-1] % block[0]:
        raise ModelError(f"{path}: tensor {name!r} has rows of {shape[-1]} values, not whole {type_name(kind)} "
                         f"blocks of {block[0]}")  # fmt: skip
    size = math.prod(shape) // block[0] * block[1]
    if start + size > length:
        raise ModelError(f"{path}: truncated: tensor {name!r} ends at byte {start + size:,}, past the file's end "
                         f"({length:,} bytes)")  # fmt: skip
    return TensorInfo(name, shape, kind, start, size, path)


@dataclass(frozen=True)
class GgufFile:
    """One GGUF file's header: version, metadata and tensor entries (none of the tensor data is read)."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    size: int

    @classmethod
    def read(cls, path: Path, limits: Limits) -> GgufFile:
        """Parse ``path``'s header within ``limits`` (``max_bytes`` bounds the header, ``max_depth`` nested
        arrays); anything malformed or truncated is one ModelError line naming the file."""
        try:
            with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                note_read(path)
                return cls._parse(path, data, limits)
        except ValueError as exc:  # an empty file cannot be mapped
            raise ModelError(f"{path}: not a GGUF file ({exc})") from None
        except OSError as exc:
            raise ModelError(f"{path}: cannot be read: {exc.strerror or exc}") from None

    @classmethod
    def _parse(cls, path: Path, data: mmap.mmap, limits: Limits) -> GgufFile:
        cursor = Cursor(data, path, limits)
        version, tensor_count, key_count = _header(cursor)
        metadata = _metadata(cursor, key_count)
        entries = [_tensor(cursor, number) for number in range(tensor_count)]
        alignment = metadata.get("general.alignment", ALIGNMENT)
        if isinstance(alignment, bool) or not isinstance(alignment, int) or not 1 <= alignment <= 1 << 20:
            raise ModelError(f"{path}: general.alignment must be a whole number from 1 to {1 << 20}, got {alignment!r}")
        base = -(-cursor.at // alignment) * alignment
        tensors, seen = [], set()
        for name, shape, kind, offset in entries:
            if name in seen:
                raise ModelError(f"{path}: tensor {name!r} appears twice")
            if offset % alignment:
                raise ModelError(f"{path}: tensor {name!r} starts at offset {offset}, not a multiple of {alignment}")
            seen.add(name)
            tensors.append(_place(path, name, shape, kind, base + offset, len(data)))
        return cls(path, version, metadata, tuple(tensors), len(data))


def split_parts(path: Path) -> list[Path]:
    """The files of a split model (``NAME-00001-of-00003.gguf``: all three, each one there), else ``[path]``."""
    match = SPLIT.fullmatch(path.name)
    if match is None:
        return [path]
    count = int(match["count"])
    if count < 1 or not 1 <= int(match["no"]) <= count:
        raise ModelError(f"{path}: split file {match['no']} of {match['count']} is not a valid split name")
    parts = [path.with_name(f"{match['stem']}-{no:05d}-of-{count:05d}.gguf") for no in range(1, count + 1)]
    missing = [part for part in parts if not part.is_file()]
    if missing:
        raise ModelError(f"{missing[0]}: missing: the model is split into {count} files and needs every one")
    return parts


class GgufModel:
    """One model's GGUF file (or split files, read as one): metadata from the first, tensors from all, each
    tensor's bytes memory-mapped when it is first read and dequantized by rows."""

    def __init__(self, path: Path, limits: Limits) -> None:
        require_gguf()
        self.path = path
        self.files = [GgufFile.read(part, limits) for part in split_parts(path)]
        self.metadata: Mapping[str, Any] = self.files[0].metadata
        self.tensors: dict[str, TensorInfo] = {}
        for file in self.files:
            for info in file.tensors:
                if info.name in self.tensors:
                    raise ModelError(f"{file.path}: tensor {info.name!r} is also in {self.tensors[info.name].path}")
                self.tensors[info.name] = info
        self._check_split()
        self._maps: dict[Path, np.ndarray] = {}

    def _check_split(self) -> None:
        """Split files must say they are the parts they are named as, and hold the tensors the first one counts."""
        if len(self.files) == 1 and "split.count" not in self.metadata:
            return
        for number, file in enumerate(self.files):
            no, count = file.metadata.get("split.no"), file.metadata.get("split.count")
            if no != number or count != len(self.files):
                raise ModelError(f"{file.path}: its split.no {no!r} and split.count {count!r} do not make it part "
                                 f"{number + 1} of {len(self.files)}")  # fmt: skip
        total = self.metadata.get("split.tensors.count")
        if total != len(self.tensors):
            raise ModelError(f"{self.path}: split.tensors.count is {total!r}, but the files hold {len(self.tensors)}")

    @property
    def size(self) -> int:
        """Bytes of every file."""
        return sum(file.size for file in self.files)

    def raw(self, info: TensorInfo, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``info`` (seen as 2-D) as stored: ``[rows, bytes per row]`` uint8, mapped."""
        data = self._maps.get(info.path)
        if data is None:
            note_read(info.path)
            data = self._maps[info.path] = np.memmap(info.path, dtype=np.uint8, mode="r")
        row = info.size // info.rows
        return np.asarray(data[info.start + start * row : info.start + stop * row]).reshape(stop - start, row)

    def rows(self, info: TensorInfo, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``info`` (seen as 2-D) dequantized to float32 ``[rows, width]``: only their
        blocks are read."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        if not dequantizable(info.kind):
            raise ModelError(f"{info.path}: tensor {info.name!r} is stored as {info.type_name}, which the gguf "
                             f"package cannot dequantize (it reads {', '.join(readable_types())})")  # fmt: skip
        kernel = row_dequantizer(info.kind)
        try:
            raw = self.raw(info, start, stop)
            with np.errstate(all="ignore"):  # a non-finite block reads as stored; the forward pass reports its result
                if kernel is None:
                    values = np.array(dequantize(raw, GGMLQuantizationType(info.kind)), dtype=np.float32)
                else:  # the same dequantizer on chunks of rows: far fewer calls than the package's 16 rows at a time
                    values = np.empty((stop - start, info.width), dtype=np.float32)
                    step = max(1, CHUNK // info.width)
                    for at in range(0, stop - start, step):
                        values[at : at + step] = kernel(raw[at : at + step])
        except Exception as exc:  # the dequantizers report bad blocks as assorted exceptions
            raise ModelError(f"{info.path}: tensor {info.name!r} ({info.type_name}) cannot be read: {exc}") from None
        return values.reshape(stop - start, info.width)

    def close(self) -> None:
        """Let go of the mapped files."""
        self._maps.clear()
