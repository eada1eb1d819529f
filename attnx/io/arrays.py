"""NumPy inputs: an .npz archive holding the same keys as a YAML input, each member checked by its header first."""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy

from attnx.errors import ConfigError, InputError, LimitError
from attnx.io.documents import Document
from attnx.io.messages import first_clause
from attnx.limits import Limits, count_text, size_text

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an archive with members, an empty archive
NPY_MAGIC = b"\x93NUMPY"
MAX_MEMBERS = 64  # the input contract has 25 keys
MAX_DIRECTORY = 64 * 1024  # bytes of the zip's central directory: room for far more than 64 members
# Stored or deflated members only: zipfile inflates deflate in bounded steps, but bzip2 and lzma whole.
READABLE_COMPRESSION = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
KINDS = "biufUS"  # booleans, integers, floats and text: everything an input key can hold
MAX_HEADER = 65535  # bytes of an .npy header (numpy.save writes 128 or so; NumPy itself refuses past 10,000)
MAX_AXES = 32  # NumPy 1.x builds arrays of at most 32 axes (2.x: 64); a result has 3


def parse_npz(raw: bytes, name: str, limits: Limits) -> Document:
    """The ``.npz`` archive ``raw`` as a document; member ``q.npy`` is key ``q``.

    Nothing is allocated for a member before its header passed: a format 1.0 or 2.0 ``.npy`` whose
    dtype holds booleans, numbers or text (objects would need pickle, which attnx never runs), whose
    shape fits the dimension and element caps, and whose data is really there; all members'
    data together fit the input size cap. Arrays stay NumPy arrays (the schema checks them without
    turning them into lists); 0-d members become scalars; 1-d text arrays become lists of strings.
    """
    _check_directory(raw, name)
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = _members(archive, name, limits)
            data = {key: _plain(_read(archive, info), f"{name}: {key}") for key, info in members.items()}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        # NotImplementedError (a RuntimeError, so caught first): a compression method zipfile does not know
        raise InputError(f"{name}: cannot read as .npz: {first_clause(exc)}") from None
    except RuntimeError:  # zipfile's answer to an encrypted member
        raise InputError(f"{name}: cannot read as .npz: a member is encrypted (attnx asks for no passwords)") from None
    return Document(data, name, limits=limits)


def _check_directory(raw: bytes, name: str) -> None:
    """Refuse an archive whose central directory lists too much, before zipfile builds an entry for each."""
    end = raw.rfind(b"PK\x05\x06", max(0, len(raw) - 22 - 65535))
    if end < 0 or len(raw) < end + 22:
        raise InputError(f"{name}: cannot read as .npz: not a zip archive (no end-of-archive record)")
    entries, directory_size = struct.unpack_from("<HI", raw, end + 10)
    if entries > MAX_MEMBERS or directory_size > MAX_DIRECTORY:
        raise InputError(
            f"{name}: the archive lists {entries} members in {size_text(directory_size)}; "
            f"an input has at most {MAX_MEMBERS} (one per key)"
        )


def _members(archive: zipfile.ZipFile, name: str, limits: Limits) -> dict[str, zipfile.ZipInfo]:
    """Each member by key, after its header and the declared sizes passed."""
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise InputError(f"{name}: member {info.filename!r} is not an .npy array (an .npz input holds q.npy, ...)")
        if info.compress_type not in READABLE_COMPRESSION:
            method = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}.get(info.compress_type)
            method = method or f"method {info.compress_type}"
            raise InputError(
                f"{name}: member {info.filename!r} is compressed with {method}, which zipfile inflates whole before "
                "its header can be checked; write it with numpy.savez or numpy.savez_compressed"
            )
        key = info.filename[: -len(".npy")]
        if key in members:
            raise ConfigError(f"{name}: duplicate key {key!r} (two members named {info.filename!r})")
        with archive.open(info) as stream:
            nbytes = check_npy(stream, f"{name}: {key}", info.file_size, limits, part="member")[2]
        total += nbytes
        if total > limits.max_bytes:
            raise LimitError(f"{name}: {limits.exceeded('max_bytes', f'{size_text(total)} of array data')}")
        members[key] = info
    return members


def check_npy(
    stream: IO[bytes], where: str, size: int, limits: Limits, *, part: str = "file"
) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data bytes of the ``.npy`` in ``stream`` (a ``part``, file or member, of ``size`` bytes),
    the one check every ``.npy`` reader makes before any data: the header's length and contents
    (``check_header``), the data the header claims really there, the shape within the caps. No size is turned
    into a float, so a header may claim an axis of 10^309."""
    shape, dtype, header_size = check_header(stream, where, size)
    nbytes = math.prod(shape) * dtype.itemsize
    if header_size + nbytes > size:
        dims = " × ".join(count_text(axis, grouped=False) for axis in shape) or "0-d"
        raise InputError(
            f"{where}: the header claims a {dims} {dtype} array ({size_text(nbytes)}) but the {part} holds "
            f"{size_text(max(0, size - header_size))} of data"
        )
    problem = limits.shape_problem(shape)
    if problem:
        raise LimitError(f"{where}: {problem}")
    return shape, dtype, nbytes


def check_header(stream: IO[bytes], where: str, size: int) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and header size of the ``.npy`` in ``stream`` (``size`` bytes in all), refusing objects, odd
    dtypes and odd shapes. The header's length field is checked against ``size`` and ``MAX_HEADER`` before the
    header is read: NumPy would read as many bytes as it says (a 13-byte file can say 4 GiB)."""
    header = _bounded_header(stream, where, size)
    try:
        version = npy.read_magic(header)
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = read(header, max_header_size=MAX_HEADER)
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{where}: not a valid .npy array: {first_clause(exc)}") from None
    if dtype.hasobject:
        raise InputError(f"{where}: holds pickled objects, which attnx never loads (dtype {dtype})")
    if dtype.kind not in KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise InputError(f"{where}: dtype {dtype} holds neither booleans, numbers nor text")
    odd = next((axis for axis in shape if type(axis) is not int), None)  # a boolean passes NumPy's check
    if odd is not None:
        raise InputError(f"{where}: the header claims an axis of {odd!r}, not a whole number")
    if any(axis < 0 for axis in shape):
        raise InputError(f"{where}: the header claims a negative axis, shape {shape}")
    if len(shape) > MAX_AXES:
        raise InputError(f"{where}: the header claims {len(shape):,} axes; an array has at most {MAX_AXES}")
    return shape, dtype, header.tell()


def read_array(stream: IO[bytes]) -> np.ndarray:
    """The array of the ``.npy`` in ``stream``, once ``check_npy`` passed it (its header read again up to
    ``MAX_HEADER``, which NumPy would otherwise hold to 10,000 bytes); never unpickled."""
    return npy.read_array(stream, allow_pickle=False, max_header_size=MAX_HEADER)


def _bounded_header(stream: IO[bytes], where: str, size: int) -> io.BytesIO:
    """The magic, version, length field and header of the ``.npy`` in ``stream``, read once the length field has
    passed: within ``size`` and ``MAX_HEADER``."""
    prefix = stream.read(len(NPY_MAGIC) + 2)  # the magic string, then major and minor version
    if len(prefix) < len(NPY_MAGIC) + 2 or not prefix.startswith(NPY_MAGIC):
        raise InputError(f"{where}: not a valid .npy array: the magic string is not correct")
    major, minor = prefix[-2], prefix[-1]
    if (major, minor) not in ((1, 0), (2, 0)):
        raise InputError(f"{where}: .npy format {major}.{minor} is not read (numpy.save writes 1.0)")
    width = 2 if major == 1 else 4
    field = stream.read(width)
    if len(field) < width:
        raise InputError(f"{where}: not a valid .npy array: the file ends in its header's length field")
    length = int.from_bytes(field, "little")
    if length > size - len(prefix) - width:
        raise InputError(
            f"{where}: not a valid .npy array: its header claims {length:,} bytes, but the file holds "
            f"{size:,} bytes in all"
        )
    if length > MAX_HEADER:
        found = f"its header claims {length:,} bytes; at most {MAX_HEADER:,} are read (numpy.save writes about 128)"
        raise InputError(f"{where}: not a valid .npy array: {found}")
    return io.BytesIO(prefix + field + stream.read(length))


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    with archive.open(info) as stream:
        return read_array(stream)


def _plain(array: np.ndarray, where: str) -> Any:
    """A member as the schema reads it: text as ``str`` (byte strings decoded as UTF-8), arrays kept."""
    if array.dtype.kind == "S":  # numpy.array([b"the", ...]): labels are text, not b'the'
        array = _decoded(array, where)
    if array.ndim == 0:
        return array.item()
    if array.dtype.kind == "U":
        return [str(item) for item in array.tolist()] if array.ndim == 1 else array.tolist()
    return array


def _decoded(array: np.ndarray, where: str) -> np.ndarray:
    """A byte-string array as text; an item that is not UTF-8 is an error naming it and its first bad byte."""
    texts = []
    for index, item in np.ndenumerate(array):
        try:
            texts.append(item.decode("utf-8"))
        except UnicodeDecodeError as exc:
            place = "".join(f"[{i}]" for i in index)
            bad = item[exc.start]
            raise InputError(f"{where}{place}: byte {bad:#04x} at offset {exc.start} is not UTF-8") from None
    return np.array(texts, dtype=str).reshape(array.shape)
