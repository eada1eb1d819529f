"""The WAV reader: every PCM and float form it decodes, and every hostile file one line, nothing read past the caps."""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import InputError, LimitError
from attnx.io.audio import AudioError, read_wav
from attnx.limits import Limits

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(40)


def riff(fmt: bytes, data: bytes, *, claimed: int | None = None, extra: bytes = b"") -> bytes:
    """A RIFF/WAVE file of a ``fmt `` chunk and a ``data`` chunk (``claimed``: the data size it says)."""
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra
    body += b"data" + struct.pack("<I", len(data) if claimed is None else claimed) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def fmt_chunk(code: int, channels: int, rate: int, bits: int) -> bytes:
    """A 16-byte ``fmt `` chunk."""
    align = channels * bits // 8
    return struct.pack("<HHIIHH", code, channels, rate, rate * align, align, bits)


def write(tmp_path: Path, raw: bytes, name: str = "in.wav") -> Path:
    """``raw`` as a file."""
    path = tmp_path / name
    path.write_bytes(raw)
    return path


SAMPLES = np.array([0.0, 0.5, -0.5, 0.25, -1.0, 0.75], dtype=np.float32)


class TestForms:
    def test_16_bit_pcm(self, tmp_path: Path) -> None:
        """16-bit PCM written by the standard library reads back as int / 32768."""
        path = tmp_path / "a.wav"
        ints = np.array([0, 16384, -16384, 32767, -32768], dtype="<i2")
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(16000)
            out.writeframes(ints.tobytes())
        found = read_wav(path)
        np.testing.assert_array_equal(found.samples, ints / np.float32(32768))
        assert (found.rate, found.channels, found.form, found.notes) == (16000, 1, "16-bit PCM", ())

    @pytest.mark.parametrize(("bits", "dtype"), [(32, "<f4"), (64, "<f8")])
    def test_float(self, tmp_path: Path, bits: int, dtype: str) -> None:
        """IEEE float WAV (format 3) reads as stored."""
        path = write(tmp_path, riff(fmt_chunk(3, 1, 16000, bits), SAMPLES.astype(dtype).tobytes()))
        found = read_wav(path)
        np.testing.assert_array_equal(found.samples, SAMPLES)
        assert found.form == f"{bits}-bit float"

    @pytest.mark.parametrize("bits", [8, 24, 32])
    def test_other_pcm(self, tmp_path: Path, bits: int) -> None:
        """8-bit (unsigned), 24-bit and 32-bit PCM read as int / 2^(bits-1)."""
        exact = np.array([0.0, 0.5, -0.5, -1.0], dtype=np.float64)
        ints = (exact * 2 ** (bits - 1)).astype(np.int64)
        if bits == 8:
            data = (ints + 128).astype(np.uint8).tobytes()
        elif bits == 24:
            data = b"".join(int(i).to_bytes(3, "little", signed=True) for i in ints)
        else:
            data = ints.astype("<i4").tobytes()
        found = read_wav(write(tmp_path, riff(fmt_chunk(1, 1, 16000, bits), data)))
        np.testing.assert_array_equal(found.samples, exact.astype(np.float32))

    def test_stereo_averaged(self, tmp_path: Path) -> None:
        """Two channels are averaged to one, and a note says so."""
        left, right = SAMPLES, -SAMPLES / 2
        frames = np.stack([left, right], axis=1).astype("<f4").tobytes()
        found = read_wav(write(tmp_path, riff(fmt_chunk(3, 2, 16000, 32), frames)))
        np.testing.assert_allclose(found.samples, (left + right) / 2)
        assert found.channels == 2 and found.notes == ("2 channels averaged to mono",)

    def test_extensible(self, tmp_path: Path) -> None:
        """WAVE_FORMAT_EXTENSIBLE with the PCM sub-format reads as PCM."""
        guid = struct.pack("<H", 1) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = fmt_chunk(0xFFFE, 1, 16000, 16) + struct.pack("<HHI", 22, 16, 4) + guid
        found = read_wav(write(tmp_path, riff(fmt, np.array([16384], dtype="<i2").tobytes())))
        assert found.samples.tolist() == [0.5]

    def test_chunks_before_data_are_skipped(self, tmp_path: Path) -> None:
        """A LIST chunk of odd size (padded) between fmt and data is stepped over."""
        extra = b"LIST" + struct.pack("<I", 3) + b"abc\x00"
        found = read_wav(write(tmp_path, riff(fmt_chunk(3, 1, 16000, 32), SAMPLES.tobytes(), extra=extra)))
        np.testing.assert_array_equal(found.samples, SAMPLES)


class TestHostile:
    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            (PNG, r"not a WAV file \(a RIFF/WAVE header is expected; the file starts b'\\x89PNG"),
            (b"", "not a WAV file"),
            (riff(fmt_chunk(1, 1, 16000, 16), bytes(100))[:60], "truncated: its RIFF header claims 144 bytes"),
            (riff(fmt_chunk(1, 1, 16000, 16), bytes(10), claimed=1000), "chunk 'data' at byte 36 claims 1,000 bytes"),
            (riff(fmt_chunk(1, 0, 16000, 16), bytes(10)), "says 0 channels"),
            (riff(fmt_chunk(7, 1, 16000, 8), bytes(10)), r"format code 7 \(µ-law\) is not read"),
            (riff(fmt_chunk(1, 1, 16000, 12), bytes(10)), "12-bit PCM is not read"),
            (riff(fmt_chunk(1, 1, 16000, 16), b""), "holds no audio"),
            (riff(fmt_chunk(1, 1, 16000, 16), bytes(11)), "ends within a frame of 2 bytes"),
            (riff(fmt_chunk(1, 1, 16000, 16)[:12], bytes(10)), "its fmt chunk holds 12 bytes"),
            (riff(fmt_chunk(3, 1, 16000, 32), np.array([np.nan], "<f4").tobytes()), "NaN or infinite"),
            (b"RIFF" + struct.pack("<I", 4) + b"WAVE", "no fmt chunk"),
        ],
    )
    def test_one_line(self, tmp_path: Path, raw: bytes, message: str) -> None:
        """Each bad file is one AudioError (an InputError) line that says what is wrong."""
        with pytest.raises(AudioError, match=message) as caught:
            read_wav(write(tmp_path, raw, "song.wav"))
        assert isinstance(caught.value, InputError) and "\n" not in str(caught.value)
        assert str(caught.value).startswith(str(tmp_path / "song.wav"))

    def test_another_rate_is_refused(self, tmp_path: Path) -> None:
        """8 kHz audio is refused with the rate found and how to resample it (attnx does not resample)."""
        path = write(tmp_path, riff(fmt_chunk(1, 1, 8000, 16), bytes(100)))
        with pytest.raises(AudioError, match=r"sampled at 8,000 Hz; 16,000 Hz is needed: .*ffmpeg -i IN -ar 16000"):
            read_wav(path)

    def test_size_cap_before_reading(self, tmp_path: Path) -> None:
        """A file over max_bytes is a LimitError from its size alone."""
        path = write(tmp_path, riff(fmt_chunk(1, 1, 16000, 16), bytes(4000)))
        with pytest.raises(LimitError, match="exceeds the input size cap"):
            read_wav(path, Limits(max_bytes=1000))

    def test_sample_cap(self, tmp_path: Path) -> None:
        """More samples than max_elements is a LimitError before they are decoded."""
        path = write(tmp_path, riff(fmt_chunk(1, 1, 16000, 16), bytes(4000)))
        with pytest.raises(LimitError, match="2,000 samples exceeds the element cap"):
            read_wav(path, Limits(max_elements=1000))

    def test_missing_file(self, tmp_path: Path) -> None:
        """A file that is not there is one AudioError line."""
        with pytest.raises(AudioError, match="cannot be read"):
            read_wav(tmp_path / "none.wav")

    def test_escapes_in_names(self, tmp_path: Path) -> None:
        """A terminal escape in the file's name comes back visibly escaped."""
        path = write(tmp_path, PNG, "a\x1b[31m.wav")
        with pytest.raises(AudioError) as caught:
            read_wav(path)
        assert "\x1b" not in str(caught.value)
