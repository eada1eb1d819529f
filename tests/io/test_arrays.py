"""NumPy inputs: headers checked before loading, archives, a causal member, and reading from a source."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import ConfigError, InputError, LimitError
from attnx.io import load_source
from attnx.io.arrays import parse_npz
from attnx.limits import Limits
from tests.corpus.make_corpus import npy_claiming, zipped

EYE = {"q": np.eye(2), "k": np.eye(2), "v": np.eye(2)}


def saved(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def message(raw: bytes, limits: Limits | None = None) -> str:
    with pytest.raises((InputError, ConfigError)) as info:
        parse_npz(raw, "in.npz", limits or Limits())
    return str(info.value)


class PickleTrap:
    """Unpickling this touches a file: proof that something ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


class TestHeadersFirst:
    """A member's header is checked before any of its data is read or allocated."""

    def test_144_bytes_claiming_a_hundred_thousand_squared(self) -> None:
        """A 144-byte .npy claiming 100000 × 100000 float64 (74.5 GiB) is refused by what it holds."""
        member = npy_claiming((100_000, 100_000), data=b"\0" * 16)
        assert len(member) == 144
        assert message(zipped([("q.npy", member)])) == (
            "in.npz: q: the header claims a 100000 × 100000 float64 array (74.51 GiB) but the member holds "
            "16 bytes of data"
        )

    def test_element_cap(self) -> None:
        """A real 5 × 5 array is over an element cap of 10, and the message says how to raise it."""
        with pytest.raises(
            LimitError,
            match=r"^in\.npz: q: an array of 5 × 5 \(25 elements\) exceeds the element cap of 10 elements per array; raise it with --max-elements or ATTNX_MAX_ELEMENTS$",
        ):
            parse_npz(saved(q=np.ones((5, 5))), "in.npz", Limits(max_elements=10))

    def test_zip_bomb_is_refused_before_inflating(self) -> None:
        """2 MiB of zeros deflate to a few KiB; the declared size is over a 1 MiB cap, so nothing is inflated."""
        raw = zipped([("q.npy", npy_claiming((512, 512), data=b"\0" * (512 * 512 * 8)))], zipfile.ZIP_DEFLATED)
        assert len(raw) < 10_000
        with pytest.raises(LimitError, match=r"^in\.npz: 2 MiB of array data exceeds the input size cap of 1 MiB; "):
            parse_npz(raw, "in.npz", Limits(max_bytes=1 << 20))

    @pytest.mark.parametrize(("method", "label"), [(zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "lzma")])
    def test_bzip2_and_lzma_are_refused_unopened(self, method: int, label: str) -> None:
        """zipfile inflates bzip2 and lzma members whole even to read a header, so they are refused unopened."""
        raw = zipped([("q.npy", npy_claiming((1024, 1024), data=bytes(8 << 20)))], method)
        assert len(raw) < 10_000
        assert message(raw).startswith(
            f"in.npz: member 'q.npy' is compressed with {label}, which zipfile inflates whole"
        )

    def test_pickled_member_is_never_unpickled(self, tmp_path: Path) -> None:
        """An object array whose unpickling would touch a file is refused, and the file does not appear."""
        marker = tmp_path / "pickle-ran"
        buffer = io.BytesIO()
        np.save(buffer, np.array([PickleTrap(marker)], dtype=object), allow_pickle=True)
        assert b"touch" in buffer.getvalue()  # the payload is really in the file
        assert message(zipped([("q.npy", buffer.getvalue())])) == (
            "in.npz: q: holds pickled objects, which attnx never loads (dtype object)"
        )
        assert not marker.exists()

    @pytest.mark.parametrize(
        ("member", "expected"),
        [
            (
                npy_claiming((2,), "<c16", b"\0" * 32),
                "in.npz: q: dtype complex128 holds neither booleans, numbers nor text",
            ),
            (npy_claiming((2,), "<M8[s]", b"\0" * 16), "in.npz: q: dtype datetime64[s] holds neither"),
            (npy_claiming((2,), "|V8", b"\0" * 16), "in.npz: q: dtype |V8 holds neither"),
            (npy_claiming((-1, 5)), "in.npz: q: the header claims a negative axis, shape (-1, 5)"),
            (npy_claiming((2,), version=b"\x03\x00"), "in.npz: q: .npy format 3.0 is not read"),
            (b"not an npy at all", "in.npz: q: not a valid .npy array: the magic string is not correct"),
            (npy_claiming((2,))[:20], "in.npz: q: not a valid .npy array: its header claims 118 bytes, but the file"),
            (
                b"\x93NUMPY\x02\x00\xf0\xff\xff\xff{",
                "in.npz: q: not a valid .npy array: its header claims 4,294,967,280",
            ),
        ],
    )
    def test_bad_members(self, member: bytes, expected: str) -> None:
        """Odd dtypes, negative or bogus headers, other formats and truncation: one line each."""
        assert message(zipped([("q.npy", member)])).startswith(expected)


class TestArchive:
    """The archive itself: members, names, and not being a zip at all."""

    def test_valid_archive(self) -> None:
        """q, k, v and tokens come back as arrays and a list of strings."""
        doc = parse_npz(saved(**EYE, tokens=np.array(["a", "b"])), "in.npz", Limits())
        assert doc.data["tokens"] == ["a", "b"] and doc.data["q"].tolist() == [[1, 0], [0, 1]]

    def test_byte_string_tokens_are_text(self) -> None:
        """Tokens saved as bytes (``np.array([b"the"])``) read as UTF-8 text, not as ``b'the'``; a 0-d ``b"causal"`` too."""
        raw = saved(**EYE, tokens=np.array([b"the", "cät".encode()]), mask=np.array(b"causal"))
        doc = parse_npz(raw, "in.npz", Limits())
        assert doc.data["tokens"] == ["the", "cät"] and doc.data["mask"] == "causal"

    def test_byte_string_that_is_not_utf8(self) -> None:
        """A label that is not UTF-8 is refused with its place and its first bad byte."""
        raw = saved(**EYE, tokens=np.array([b"ok", b"c\xffat"]))
        assert message(raw) == "in.npz: tokens[1]: byte 0xff at offset 1 is not UTF-8"

    def test_member_that_is_not_npy(self) -> None:
        """A member without .npy is named."""
        assert message(zipped([("notes.txt", b"hi")])).startswith("in.npz: member 'notes.txt' is not an .npy array")

    def test_duplicate_members(self) -> None:
        """Two members of one name are a duplicate key, not last-one-wins."""
        member = npy_claiming((1,), data=b"\0" * 8)
        assert message(zipped([("q.npy", member), ("q.npy", member)])) == (
            "in.npz: duplicate key 'q' (two members named 'q.npy')"
        )

    def test_too_many_members(self) -> None:
        """65 members are refused from the end-of-archive record, before zipfile lists them."""
        raw = zipped([(f"m{i}.npy", b"") for i in range(65)])
        assert message(raw).startswith("in.npz: the archive lists 65 members in ")

    @pytest.mark.parametrize("raw", [b"", b"PK\x03\x04 not really", saved(**EYE)[:-30]])
    def test_not_a_zip(self, raw: bytes) -> None:
        """Empty, fake and truncated archives are one line each."""
        assert message(raw).startswith("in.npz: cannot read as .npz: ")


class TestCausalMember:
    """``numpy.savez(..., causal=True)``, as docs/kernels.md's recipe saves it: a causal mask, like --causal."""

    @pytest.mark.parametrize("value", [True, np.array(True), 1, np.int64(1)])
    def test_true_or_1_is_a_causal_mask(self, tmp_path: Path, value: object) -> None:
        """A 0-d boolean or integer 1 masks every key after its query (top-left aligned)."""
        from attnx.io import load_spec

        path = tmp_path / "in.npz"
        path.write_bytes(saved(q=np.eye(3), k=np.eye(3), v=np.eye(3), causal=value))
        spec = load_spec(str(path))
        assert spec.settings.causal and spec.allowed().tolist() == np.tril(np.ones((3, 3), bool)).tolist()

    def test_false_or_0_is_no_mask(self, tmp_path: Path) -> None:
        from attnx.io import load_spec

        for value in (False, 0):
            path = tmp_path / "in.npz"
            path.write_bytes(saved(**EYE, causal=np.array(value)))
            assert not load_spec(str(path)).settings.causal

    @pytest.mark.parametrize(
        ("value", "got"), [(2, "int 2"), (np.array([1, 0]), "ndarray"), (np.array("yes"), "text 'yes'"), (0.5, "float")]
    )
    def test_anything_else_is_refused(self, tmp_path: Path, value: object, got: str) -> None:
        from attnx.io import load_spec

        path = tmp_path / "in.npz"
        path.write_bytes(saved(**EYE, causal=value))
        with pytest.raises(ConfigError, match=rf"in\.npz: causal: expected true or false \(or 1 or 0\), got {got}"):
            load_spec(str(path))


class TestLoadSource:
    """load_source tells the kind of input by its name or its first bytes."""

    def test_npy_is_refused_unread(self, tmp_path: Path) -> None:
        """A .npy path is refused with how to make an .npz, without being opened."""
        with pytest.raises(InputError, match=r"^x\.npy: a \.npy file holds one array, but an input needs q, k and v; "):
            load_source("x.npy")

    def test_npy_content_under_another_name(self, tmp_path: Path) -> None:
        """.npy bytes in a .yaml file get the same answer."""
        path = tmp_path / "in.yaml"
        path.write_bytes(npy_claiming((1,), data=b"\0" * 8))
        with pytest.raises(InputError, match=r"a \.npy file holds one array"):
            load_source(str(path))

    def test_float32_arrays_stay_float32(self, tmp_path: Path) -> None:
        """float32 members reach the spec as float32 (no conversion to undo later); integers become float64."""
        from attnx.io import load_spec

        path = tmp_path / "in.npz"
        path.write_bytes(
            saved(q=np.eye(2, dtype=np.float32) / 3, k=np.eye(2, dtype=np.float32), v=np.eye(2, dtype=int))
        )
        spec = load_spec(str(path))
        assert (spec.inputs.q.dtype, spec.inputs.k.dtype, spec.inputs.v.dtype) == (np.float32, np.float32, np.float64)
        assert spec.inputs.q[0, 0] == np.float32(1 / 3)

    def test_npz_content_under_another_name(self, tmp_path: Path) -> None:
        """An .npz is read as one whatever its name."""
        path = tmp_path / "in.bin"
        path.write_bytes(saved(**EYE))
        assert sorted(load_source(str(path)).data) == ["k", "q", "v"]
