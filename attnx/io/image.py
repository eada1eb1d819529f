"""Image files (PNG, JPEG, WebP) as RGB images, read with Pillow (the ``vision`` extra) behind attnx's caps.

The file's size is checked against ``max_bytes`` before it is read; its width × height (from the header Pillow reads
first, before any pixel is decoded) against Pillow's ``Image.MAX_IMAGE_PIXELS`` (its decompression-bomb limit) and
width × height × channels against ``max_elements`` (each axis against ``max_dimension``). Only then are the pixels
decoded. A file that is not a PNG, JPEG or WebP image, truncated or corrupt is one InputError line naming the file.

What is done to the image, as transformers does it when it loads an image and its processors convert it (each said
in ``notes``): the EXIF orientation is applied (``ImageOps.exif_transpose``, as ``transformers.image_utils.load_image``
does); an image with transparency (an alpha band, or a palette or grey image with a transparent colour) is
composited onto white, as the processors' ``convert_to_rgb`` does; a grey, palette or CMYK image is converted to RGB.
16-bit and 32-bit images (modes ``I``, ``I;16``, ``F``) are refused: Pillow would clip them to 8 bits.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.errors import InputError, LimitError
from attnx.io.capped import read_capped
from attnx.limits import Limits, count_text
from attnx.text import inert

FORMATS = ("PNG", "JPEG", "WEBP")
INSTALL = "python -m pip install 'attnx[vision]'"
# The modes a PNG, JPEG or WebP file decodes to that convert to RGB without losing bits.
MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "CMYK", "YCbCr")
ORIENTATIONS = {
    2: "mirrored left to right",
    3: "rotated 180°",
    4: "mirrored top to bottom",
    5: "mirrored along its main diagonal",
    6: "rotated 90° clockwise",
    7: "mirrored along its anti-diagonal",
    8: "rotated 90° counter-clockwise",
}
MODE_NAMES = {"1": "black-and-white", "L": "grey", "P": "palette", "CMYK": "CMYK", "YCbCr": "YCbCr"}


class ImageError(InputError):
    """An image file that cannot be read: not a PNG, JPEG or WebP image, truncated, corrupt, or of a mode attnx
    does not convert."""


@dataclass(frozen=True, eq=False)
class RawImage:
    """An image file as RGB: ``image`` (a Pillow ``Image`` of mode ``RGB``, before any resizing), the ``form`` it was
    stored in (``PNG``), the ``mode`` it was decoded to (``P``) and ``notes`` on what was done to it."""

    image: Any
    form: str
    mode: str
    notes: tuple[str, ...] = ()

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, after the EXIF orientation."""
        width, height = self.image.size
        return width, height


def pillow() -> Any:
    """Pillow's ``PIL.Image`` module; an ImageError line saying how to install it where it is missing."""
    try:
        from PIL import Image
    except ImportError:
        raise ImageError(f"reading images needs Pillow, which is not installed: {INSTALL}") from None
    return Image


def read_image(path: str | Path, limits: Limits | None = None) -> RawImage:
    """The image file ``path`` as RGB (see the module's docstring); one ImageError (or LimitError) line for any bad
    file. The file's size is checked against ``max_bytes`` before a byte is read."""
    limits = limits or Limits.from_env()
    pillow()
    raw, name = read_capped(path, limits, ImageError)
    return decode_image(raw, name, limits)


def decode_image(raw: bytes, name: str, limits: Limits) -> RawImage:
    """The bytes of a PNG, JPEG or WebP file as RGB (see the module's docstring)."""
    image_module = pillow()
    from PIL import ImageOps

    with warnings.catch_warnings():  # what Pillow warns of (odd EXIF, …) stays off the one-line output
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", image_module.DecompressionBombWarning)
        image = open_image(raw, name, limits)
        try:
            image.load()
            orientation = image.getexif().get(0x0112)
            oriented = ImageOps.exif_transpose(image)
        except (OSError, SyntaxError, ValueError, EOFError, KeyError, TypeError) as exc:
            raise ImageError(f"{name}: {failure(exc)}") from None
        notes = []
        frames = getattr(image, "n_frames", 1)
        if isinstance(frames, int) and frames > 1:
            notes.append(f"the first of its {frames} frames")
        if isinstance(orientation, int) and orientation in ORIENTATIONS:
            notes.append(f"{ORIENTATIONS[orientation]}, as its EXIF orientation ({orientation}) says")
        rgb, note = to_rgb(oriented if oriented is not None else image, image_module)
    if note:
        notes.append(note)
    return RawImage(rgb, str(image.format), str(image.mode), tuple(notes))


def open_image(raw: bytes, name: str, limits: Limits) -> Any:
    """The image of ``raw`` opened (its header read, no pixel decoded yet) and checked: a PNG, JPEG or WebP of a
    mode attnx converts, within Pillow's pixel limit and attnx's caps."""
    image_module = pillow()
    from PIL import UnidentifiedImageError

    try:
        image = image_module.open(io.BytesIO(raw), formats=FORMATS)
    except UnidentifiedImageError:
        raise ImageError(f"{name}: not a PNG, JPEG or WebP image (or a corrupt one)") from None
    except (image_module.DecompressionBombError, image_module.DecompressionBombWarning):
        raise LimitError(f"{name}: {bomb_text(image_module)}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(f"{name}: {failure(exc)}") from None
    width, height = image.size
    check_pixels(image_module, width, height, len(image.getbands()), name, limits)
    if image.mode not in MODES:
        raise ImageError(f"{name}: a {image.mode} image ({image.format}) is not read: attnx reads 8-bit images "
                         "(grey, palette, RGB, with or without alpha, CMYK); convert it to 8-bit RGB")  # fmt: skip
    return image


def failure(exc: BaseException) -> str:
    """What Pillow's failure to decode says: ``truncated: …`` or ``a corrupt image: …``."""
    text = inert(str(exc)) or type(exc).__name__
    return f"{'truncated' if 'truncat' in text.lower() else 'a corrupt image'}: {text}"


def bomb_text(image_module: Any) -> str:
    """What a decompression bomb is refused with."""
    cap = image_module.MAX_IMAGE_PIXELS
    return (f"more pixels than Pillow's decompression-bomb limit of {count_text(int(cap))} (Image.MAX_IMAGE_PIXELS); "
            "a decompression bomb?")  # fmt: skip


def check_pixels(image_module: Any, width: int, height: int, bands: int, name: str, limits: Limits) -> None:
    """Refuse, before the pixels are decoded, an image over Pillow's pixel limit or attnx's caps (its
    ``[channel, height, width]`` array, with at least the 3 channels of RGB)."""
    cap = image_module.MAX_IMAGE_PIXELS
    if cap is not None and width * height > cap:
        raise LimitError(f"{name}: {width:,} × {height:,} pixels: {bomb_text(image_module)}")
    problem = limits.shape_problem((max(bands, 3), height, width))
    if problem:
        raise LimitError(f"{name}: {width:,} × {height:,} pixels: {problem}")


def to_rgb(image: Any, image_module: Any) -> tuple[Any, str | None]:
    """``image`` as RGB, and a note on the conversion (None for an RGB image): transparency composited onto white,
    as transformers' ``convert_to_rgb`` does; any other mode converted by Pillow."""
    mode = image.mode
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = image_module.new("RGBA", rgba.size, (255, 255, 255, 255))
        what = "alpha" if "A" in image.getbands() else "a transparent colour"
        composited = image_module.alpha_composite(background, rgba).convert("RGB")
        return composited, f"{mode} image ({what}) composited onto white"
    if mode == "RGB":
        return image, None
    return image.convert("RGB"), f"{MODE_NAMES.get(mode, mode)} image converted to RGB"
