"""WAV files as mono samples: PCM (8, 16, 24 or 32-bit) or IEEE float (32 or 64-bit), read by a bounded RIFF parser.

A WAV file is a RIFF container: ``RIFF`` <size> ``WAVE``, then chunks of <4-byte id> <4-byte little-endian size>
<data> (padded to an even length). The ``fmt `` chunk says how samples are stored; the ``data`` chunk holds them,
frame after frame, each frame one sample per channel. Every size the file claims is checked against the bytes it
has before anything is read from it, and the whole file against ``max_bytes`` before it is read at all. Several
channels are averaged to one (in float64, rounded once to float32). A rate other than the one asked for is refused,
never resampled: a line says the rate found and how to convert the file (``ffmpeg -i IN -ar 16000 OUT.wav``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnx.errors import InputError, LimitError
from attnx.io.capped import read_capped
from attnx.limits import Limits
from attnx.text import inert

PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE
# The GUID of WAVE_FORMAT_EXTENSIBLE's sub-format after its first two bytes (which hold the format code).
GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
FORMAT_NAMES = {2: "Microsoft ADPCM", 6: "A-law", 7: "µ-law", 0x11: "IMA ADPCM", 0x55: "MP3"}
PCM_BITS, FLOAT_BITS = (8, 16, 24, 32), (32, 64)
MAX_CHUNKS = 4096  # chunks before ``data``: a real file has a handful (fmt, LIST, fact, …)


class AudioError(InputError):
    """A WAV file that cannot be read: not RIFF/WAVE, truncated, lying about its sizes, or stored in a form attnx does
    not decode."""


@dataclass(frozen=True, eq=False)
class Wav:
    """The audio of a WAV file: ``samples`` ``[sample]`` float32 in [-1, 1] (mono), its ``rate`` in Hz, the
    ``channels`` and storage (``form``: ``16-bit PCM``) it was read from, and ``notes`` on what was done to it."""

    samples: np.ndarray
    rate: int
    channels: int
    form: str
    notes: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        """How long the audio lasts."""
        return len(self.samples) / self.rate


def read_wav(path: str | Path, limits: Limits | None = None, *, rate: int = 16000) -> Wav:
    """The WAV file ``path`` as mono samples at ``rate`` Hz; one AudioError (or LimitError) line for any bad file.
    The file's size is checked against ``max_bytes`` before a byte is read."""
    limits = limits or Limits.from_env()
    raw, name = read_capped(path, limits, AudioError)
    return parse_wav(raw, name, limits, rate=rate)


def parse_wav(raw: bytes, name: str, limits: Limits, *, rate: int = 16000) -> Wav:
    """The bytes of a WAV file as mono samples at ``rate`` Hz (see the module's docstring)."""
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        start = inert(repr(raw[:12]))
        raise AudioError(f"{name}: not a WAV file (a RIFF/WAVE header is expected; the file starts {start})")
    (claimed,) = struct.unpack_from("<I", raw, 4)
    if claimed + 8 > len(raw):
        raise AudioError(f"{name}: truncated: its RIFF header claims {claimed + 8:,} bytes, the file has {len(raw):,}")
    fmt, data = chunks(raw, claimed + 8, name)
    channels, form, decode = read_format(fmt, name)
    (found,) = struct.unpack_from("<I", fmt, 4)
    if found != rate:
        raise AudioError(f"{name}: the audio is sampled at {found:,} Hz; {rate:,} Hz is needed: resample it first "
                         f"(ffmpeg -i IN -ar {rate} OUT.wav)")  # fmt: skip
    width = channels * decode.itemsize
    if len(data) == 0:
        raise AudioError(f"{name}: holds no audio (its data chunk is empty)")
    if len(data) % width:
        raise AudioError(f"{name}: truncated: its data ({len(data):,} bytes) ends within a frame of {width} bytes")
    frames = len(data) // width
    if frames * channels > limits.max_elements:
        raise LimitError(f"{name}: {limits.exceeded('max_elements', f'{frames * channels:,} samples')}")
    samples = decode(data).reshape(frames, channels)  # (frames, channels)
    if not np.isfinite(samples).all():
        raise AudioError(f"{name}: holds samples that are NaN or infinite")
    notes = (f"{channels} channels averaged to mono",) if channels > 1 else ()
    mono = samples.astype(np.float64).mean(axis=1).astype(np.float32) if channels > 1 else samples[:, 0]
    return Wav(np.ascontiguousarray(mono, dtype=np.float32), found, channels, form, notes)


def chunks(raw: bytes, end: int, name: str) -> tuple[bytes, bytes]:
    """The ``fmt `` and ``data`` chunks of a RIFF/WAVE file's first ``end`` bytes, each size checked against what is
    left; a missing one, or a chunk claiming more than the file has, is an AudioError."""
    fmt: bytes | None = None
    at, count = 12, 0
    while at + 8 <= end and count < MAX_CHUNKS:
        kind, size = raw[at : at + 4], struct.unpack_from("<I", raw, at + 4)[0]
        if size > end - at - 8:
            label = inert(kind.decode("latin-1"))
            raise AudioError(f"{name}: truncated: chunk {label!r} at byte {at:,} claims {size:,} bytes, "
                             f"{end - at - 8:,} are left")  # fmt: skip
        body = raw[at + 8 : at + 8 + size]
        if kind == b"fmt ":
            fmt = body
        elif kind == b"data":
            if fmt is None:
                raise AudioError(f"{name}: its data chunk comes before the fmt chunk that says how it is stored")
            return fmt, body
        at, count = at + 8 + size + (size & 1), count + 1
    what = "fmt" if fmt is None else "data"
    raise AudioError(f"{name}: truncated or not a WAV file: no {what} chunk within its first {min(at, end):,} bytes")


def read_format(fmt: bytes, name: str) -> tuple[int, str, Decoder]:
    """The channels, a name for the storage (``16-bit PCM``) and the decoder of a ``fmt `` chunk; an AudioError
    for a form attnx does not decode."""
    if len(fmt) < 16:
        raise AudioError(f"{name}: truncated: its fmt chunk holds {len(fmt)} bytes, at least 16 are needed")
    code, channels, _, _, align, bits = struct.unpack_from("<HHIIHH", fmt)
    if code == EXTENSIBLE:
        if len(fmt) < 40 or fmt[26:40] != GUID_TAIL:
            raise AudioError(f"{name}: an extensible WAV whose sub-format is not PCM or IEEE float")
        (code,) = struct.unpack_from("<H", fmt, 24)
    if code not in (PCM, FLOAT):
        known = FORMAT_NAMES.get(code)
        what = f"format code {code}" + (f" ({known})" if known else "")
        raise AudioError(f"{name}: {what} is not read: attnx reads PCM (1) and IEEE float (3) WAV files")
    if channels == 0:
        raise AudioError(f"{name}: its fmt chunk says 0 channels")
    allowed = PCM_BITS if code == PCM else FLOAT_BITS
    if bits not in allowed:
        kind = "PCM" if code == PCM else "float"
        raise AudioError(f"{name}: {bits}-bit {kind} is not read; {kind} samples of "
                         f"{', '.join(map(str, allowed))} bits are")  # fmt: skip
    if align != channels * bits // 8:
        raise AudioError(f"{name}: its fmt chunk says {align} bytes a frame; {channels} channels of {bits} bits "
                         f"take {channels * bits // 8}")  # fmt: skip
    return channels, f"{bits}-bit {'PCM' if code == PCM else 'float'}", Decoder(code, bits)


@dataclass(frozen=True)
class Decoder:
    """Samples stored as ``bits``-bit PCM or float (``code``) to float32 in [-1, 1]: PCM divided by 2^(bits-1)
    (8-bit PCM is unsigned: 128 subtracted first), float as stored."""

    code: int
    bits: int

    @property
    def itemsize(self) -> int:
        """Bytes a sample."""
        return self.bits // 8

    def __call__(self, data: bytes) -> np.ndarray:
        """The samples of ``data``, a whole number of samples, as float32."""
        if self.code == FLOAT:
            return np.frombuffer(data, dtype="<f4" if self.bits == 32 else "<f8").astype(np.float32)
        if self.bits == 8:
            return (np.frombuffer(data, dtype=np.uint8).astype(np.float32) - 128) / np.float32(128)
        if self.bits == 24:
            triples = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3).astype(np.int32)  # (samples, 3)
            values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
            values = np.where(values >= 1 << 23, values - (1 << 24), values)
            return (values / float(1 << 23)).astype(np.float32)
        ints = np.frombuffer(data, dtype="<i2" if self.bits == 16 else "<i4")
        return (ints / float(1 << (self.bits - 1))).astype(np.float32)
