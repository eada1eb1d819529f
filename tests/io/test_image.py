"""The image reader: PNG, JPEG and WebP of every common mode to RGB as transformers converts them, the EXIF
orientation applied, and every bad file (corrupt, truncated, a decompression bomb, over a cap) one line."""

from __future__ import annotations

import io
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import InputError, LimitError
from attnx.io.image import ImageError, read_image
from attnx.limits import Limits

Image = pytest.importorskip("PIL.Image")
image_transforms = pytest.importorskip("transformers.image_transforms")


def pattern(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """A ``width`` × ``height`` image of random pixels in ``mode`` (a palette image quantized from RGB)."""
    rng = np.random.default_rng(seed)
    if mode in ("L", "1"):
        return Image.fromarray(rng.integers(0, 256, (height, width), dtype=np.uint8)).convert(mode)
    bands = 4 if mode == "RGBA" else 3
    image = Image.fromarray(rng.integers(0, 256, (height, width, bands), dtype=np.uint8))
    return image.quantize(64) if mode == "P" else image


def save(image: Image.Image, path: Path, **options: object) -> Path:
    """``image`` written to ``path`` (its format from the suffix)."""
    image.save(path, **options)
    return path


def reference(path: Path) -> np.ndarray:
    """What transformers makes of the file: its loader's EXIF orientation, then its processors' RGB conversion."""
    from PIL import ImageOps

    with Image.open(path) as image:
        oriented = ImageOps.exif_transpose(image)
        return np.asarray(image_transforms.convert_to_rgb(oriented, return_numpy=True))


@pytest.mark.parametrize(
    ("mode", "suffix"),
    [
        ("RGB", "png"),
        ("L", "png"),
        ("P", "png"),
        ("RGBA", "png"),
        ("1", "png"),
        ("RGB", "jpg"),
        ("L", "jpg"),
        ("RGB", "webp"),
        ("RGBA", "webp"),
    ],
)
def test_modes_convert_to_rgb_as_transformers(tmp_path: Path, mode: str, suffix: str) -> None:
    path = save(pattern(37, 23, mode), tmp_path / f"in.{suffix}")
    found = read_image(path)
    assert found.image.mode == "RGB" and found.size == (37, 23)
    assert np.array_equal(np.asarray(found.image), reference(path))
    assert bool(found.notes) == (mode != "RGB")


def test_alpha_is_composited_onto_white(tmp_path: Path) -> None:
    pixels = np.zeros((5, 7, 4), dtype=np.uint8)
    pixels[..., 0], pixels[..., 3] = 200, 0  # red, fully transparent: white
    pixels[0, 0, 3] = 255  # one opaque red pixel
    found = read_image(save(Image.fromarray(pixels), tmp_path / "a.png"))
    rgb = np.asarray(found.image)
    assert rgb[0, 0].tolist() == [200, 0, 0] and rgb[1, 1].tolist() == [255, 255, 255]
    assert found.notes == ("RGBA image (alpha) composited onto white",)


def test_palette_with_a_transparent_colour(tmp_path: Path) -> None:
    image = pattern(11, 9, "P")
    path = save(image, tmp_path / "t.png", transparency=3)
    found = read_image(path)
    assert np.array_equal(np.asarray(found.image), reference(path))
    assert found.notes == ("P image (a transparent colour) composited onto white",)


@pytest.mark.parametrize("orientation", [3, 6, 8, 2])
def test_exif_orientation_is_applied(tmp_path: Path, orientation: int) -> None:
    image = pattern(30, 20)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = save(image, tmp_path / "o.jpg", exif=exif.tobytes(), quality=95)
    found = read_image(path)
    assert found.size == ((20, 30) if orientation in (6, 8) else (30, 20))
    assert np.array_equal(np.asarray(found.image), reference(path))
    assert f"EXIF orientation ({orientation})" in found.notes[0]


def one_line(path: Path, error: type[InputError] = ImageError, limits: Limits | None = None) -> str:
    """The message reading ``path`` fails with, checked to be one line naming the file."""
    with pytest.raises(error) as caught:
        read_image(path, limits)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.png"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 500, dtype=np.uint8).tobytes())
    assert "not a PNG, JPEG or WebP image" in one_line(path)


def test_other_formats_are_refused(tmp_path: Path) -> None:
    assert "not a PNG, JPEG or WebP image" in one_line(save(pattern(8, 8), tmp_path / "in.bmp"))


@pytest.mark.parametrize("suffix", ["png", "jpg", "webp"])
def test_truncated(tmp_path: Path, suffix: str) -> None:
    whole = io.BytesIO()
    pattern(64, 48).save(whole, format={"jpg": "JPEG"}.get(suffix, suffix.upper()))
    path = tmp_path / f"cut.{suffix}"
    path.write_bytes(whole.getvalue()[: len(whole.getvalue()) * 2 // 3])
    one_line(path)


def test_corrupt_png_data(tmp_path: Path) -> None:
    raw = bytearray(save(pattern(40, 40), tmp_path / "ok.png").read_bytes())
    at = raw.index(b"IDAT") + 20
    raw[at : at + 40] = bytes(40)
    path = tmp_path / "bad.png"
    path.write_bytes(bytes(raw))
    one_line(path)


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` × ``height`` RGB pixels and holds almost no data (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_decompression_bomb(tmp_path: Path) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header(100_000, 100_000))
    assert "decompression-bomb limit" in one_line(path, LimitError)


def test_over_pillows_limit_but_under_twice_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    path = save(pattern(40, 40), tmp_path / "big.png")  # 1,600 pixels: Pillow only warns
    assert "decompression-bomb limit of 1,000" in one_line(path, LimitError)


def test_element_cap(tmp_path: Path) -> None:
    path = save(pattern(40, 30), tmp_path / "in.png")
    message = one_line(path, LimitError, Limits(max_elements=3 * 40 * 30 - 1))
    assert "element cap" in message
    assert read_image(path, Limits(max_elements=3 * 40 * 30)).size == (40, 30)


def test_dimension_cap(tmp_path: Path) -> None:
    path = tmp_path / "wide.png"
    path.write_bytes(png_header(5000, 1))
    assert "dimension cap" in one_line(path, LimitError, Limits(max_dimension=4096))


def test_byte_cap_before_reading(tmp_path: Path) -> None:
    path = save(pattern(40, 30), tmp_path / "in.png")
    assert "input size cap" in one_line(path, LimitError, Limits(max_bytes=100))


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot be read" in one_line(tmp_path / "none.png")


def test_sixteen_bit_grey_is_refused(tmp_path: Path) -> None:
    image = Image.fromarray(np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000)
    path = save(image, tmp_path / "deep.png")
    assert "8-bit" in one_line(path)


def test_without_pillow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save(pattern(4, 4), tmp_path / "in.png")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImageError) as caught:
        read_image(path)
    assert str(caught.value).endswith("which is not installed: python -m pip install 'attnx[vision]'")


def test_an_animation_gives_its_first_frame(tmp_path: Path) -> None:
    frames = [pattern(9, 7, seed=seed) for seed in range(3)]
    path = tmp_path / "moving.png"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    found = read_image(path)
    assert np.array_equal(np.asarray(found.image), np.asarray(frames[0]))
    assert found.notes == ("the first of its 3 frames",)


@pytest.mark.parametrize("form", ["PNG", "JPEG", "WEBP"])
def test_damaged_files_are_read_or_one_line(form: str) -> None:
    """Bytes changed and files cut at random: each read, or refused with an InputError, never another exception."""
    from attnx.io.image import decode_image

    rng = np.random.default_rng(7)
    exif = Image.Exif()
    exif[0x0112] = 6
    whole = io.BytesIO()
    pattern(40, 30).save(whole, format=form, **({"exif": exif.tobytes()} if form == "JPEG" else {}))
    raw = whole.getvalue()
    for _ in range(300):
        damaged = bytearray(raw)
        for _ in range(int(rng.integers(1, 6))):
            damaged[int(rng.integers(0, len(damaged)))] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            damaged = damaged[: int(rng.integers(0, len(damaged)))]
        try:
            decode_image(bytes(damaged), "damaged", Limits())
        except InputError as exc:
            assert "\n" not in str(exc)
