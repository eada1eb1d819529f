"""An RGB image as a vision encoder's pixels, exactly as transformers' Pillow-based image processors make them.

From a checkpoint's preprocessor_config.json, for the processors of the vision families (``ViTImageProcessor``,
``DeiTImageProcessor``, ``CLIPImageProcessor``, ``BitImageProcessor``, ``SiglipImageProcessor``; a key the file
leaves out, or sets to null, takes the processor's default, as in transformers), step by step as transformers' Pillow
backend does them:

1. resize (``do_resize``), with Pillow, on the 8-bit image, with the filter ``resample`` names (Pillow's codes:
   0 nearest, 1 Lanczos, 2 bilinear, 3 bicubic, 4 box, 5 Hamming), to ``size``: ``{height, width}`` exactly, or
   ``{shortest_edge}`` (the shorter side to it, the longer to ``int(edge × long / short)``);
2. center crop (``do_center_crop``) to ``crop_size``: the top-left corner at ``(size - crop) // 2``, an image smaller
   than the crop padded with zeros first (``ceil`` of half the difference before it);
3. rescale (``do_rescale``): times ``rescale_factor`` in float64, then float32;
4. normalise (``do_normalize``): ``(x - mean) / std`` in float32, per channel.

The image comes in as RGB: ``attnx.io.image.read_image`` converts every image as the processors' ``convert_to_rgb``
does, whatever ``do_convert_rgb`` says. Without that conversion transformers fails on grey, palette, CMYK and alpha
images (their channels are not 3), so the one case that differs is an RGB image with a transparent colour (a PNG's
tRNS chunk) under a processor that does not convert (ViT's and DeiT's default): attnx composites it onto white.

Any other setting that would change the pixels (``do_pad`` true, ``do_reduce_labels`` true, …) is refused by name;
settings that change nothing (false or null, the processor's name) pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from attnx.errors import ModelError

IMAGENET_STANDARD = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
BILINEAR, BICUBIC = 2, 3
RESAMPLING = {0: "nearest", 1: "Lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "Hamming"}

# Each processor's defaults: what a key left out (or null) of preprocessor_config.json means.
COMMON = {"do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
          "do_center_crop": False, "crop_size": None, "do_convert_rgb": False, "default_to_square": True}  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "ViTImageProcessor": {
        **COMMON,
        "resample": BILINEAR,
        "image_mean": IMAGENET_STANDARD,
        "image_std": IMAGENET_STANDARD,
        "size": {"height": 224, "width": 224},
    },
    "DeiTImageProcessor": {
        **COMMON,
        "resample": BICUBIC,
        "image_mean": IMAGENET_STANDARD,
        "image_std": IMAGENET_STANDARD,
        "size": {"height": 256, "width": 256},
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
    },
    "CLIPImageProcessor": {
        **COMMON,
        "resample": BICUBIC,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "size": {"shortest_edge": 224},
        "default_to_square": False,
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
        "do_convert_rgb": True,
    },
    "SiglipImageProcessor": {
        **COMMON,
        "resample": BICUBIC,
        "image_mean": IMAGENET_STANDARD,
        "image_std": IMAGENET_STANDARD,
        "size": {"height": 224, "width": 224},
        "default_to_square": False,
        "do_convert_rgb": True,
    },
}
DEFAULTS["BitImageProcessor"] = DEFAULTS["CLIPImageProcessor"]
# Keys that never change the pixels, whatever their value.
HARMLESS = {"image_processor_type", "feature_extractor_type", "processor_class", "return_tensors", "device",
            "disable_grouping", "image_seq_length", "input_data_format"}  # fmt: skip


def processor_type(config: Mapping[str, Any], where: str) -> str:
    """The processor a preprocessor_config.json names (``image_processor_type``, else ``feature_extractor_type``
    with ``FeatureExtractor`` read as ``ImageProcessor``; the ``Pil`` suffix dropped); a ModelError for one attnx
    does not compute."""
    name = config.get("image_processor_type") or config.get("feature_extractor_type")
    if not isinstance(name, str):
        raise ModelError(f"{where}: names no image processor (image_processor_type); attnx computes "
                         f"{', '.join(DEFAULTS)}")  # fmt: skip
    name = name.removesuffix("Pil").replace("FeatureExtractor", "ImageProcessor")
    if name.endswith("Fast") and name.removesuffix("Fast") in DEFAULTS:
        raise ModelError(f"{where}: {name} (torchvision) is not computed; attnx computes the Pillow-based "
                         f"{name.removesuffix('Fast')} (set image_processor_type to it)")  # fmt: skip
    if name not in DEFAULTS:
        raise ModelError(f"{where}: image processor {name!r} is not computed; attnx computes {', '.join(DEFAULTS)}")
    return name


def settings(config: Mapping[str, Any], where: str = "preprocessor_config.json") -> dict[str, Any]:
    """The settings of ``config`` (a preprocessor_config.json), its processor's defaults filled in, each checked;
    a ModelError naming a setting attnx does not apply or a value it does not read."""
    kind = processor_type(config, where)
    found = dict(DEFAULTS[kind])
    for key, value in config.items():
        if key in HARMLESS:
            continue
        if key == "data_format":
            if value not in (None, "channels_first"):
                raise ModelError(f"{where}: data_format {value!r} is not computed; attnx makes channels_first")
        elif key in found:
            if value is not None:
                found[key] = value
        elif value not in (None, False):
            raise ModelError(f"{where}: {key} {value!r} is not applied by attnx (it would change the pixels)")
    for key in ("do_resize", "do_center_crop", "do_rescale", "do_normalize", "do_convert_rgb", "default_to_square"):
        if not isinstance(found[key], bool):
            raise ModelError(f"{where}: {key} must be true or false, got {found[key]!r}")
    if found["do_resize"]:
        found["size"] = size_of(found["size"], where, "size", square=found["default_to_square"])
        resample = found["resample"]
        if isinstance(resample, bool) or resample not in RESAMPLING:
            raise ModelError(f"{where}: resample {resample!r} is not a Pillow filter code (0 to 5)")
    if found["do_center_crop"]:
        found["crop_size"] = size_of(found["crop_size"], where, "crop_size", square=True)
        if "height" not in found["crop_size"]:
            raise ModelError(f"{where}: crop_size must have height and width, got {found['crop_size']!r}")
    if found["do_rescale"]:
        factor = found["rescale_factor"]
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor):
            raise ModelError(f"{where}: rescale_factor must be a number, got {factor!r}")
    if found["do_normalize"]:
        for key in ("image_mean", "image_std"):
            found[key] = channels_of(found[key], where, key)
        if any(value == 0 for value in found["image_std"]):
            raise ModelError(f"{where}: image_std has a zero")
    return found


def size_of(value: Any, where: str, key: str, *, square: bool) -> dict[str, int]:
    """A size setting as ``{height, width}`` or ``{shortest_edge}`` (an int: a square when ``square``, else the
    shortest edge; a list: height and width), as transformers' ``get_size_dict`` reads it."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"height": value, "width": value} if square else {"shortest_edge": value}
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        value = {"height": value[0], "width": value[1]}
    if not isinstance(value, Mapping) or set(value) not in ({"height", "width"}, {"shortest_edge"}):
        raise ModelError(f"{where}: {key} {value!r} is not computed; attnx reads {{height, width}} or "
                         f"{{shortest_edge}}")  # fmt: skip
    for side, length in value.items():
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ModelError(f"{where}: {key}'s {side} must be a positive whole number, got {length!r}")
    return dict(value)


def channels_of(value: Any, where: str, key: str) -> tuple[float, ...]:
    """A mean or std: one finite number for each of the 3 channels (a single number for all three)."""
    values = [value] * 3 if isinstance(value, (int, float)) else value
    if (
        not isinstance(values, (list, tuple))
        or len(values) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
    ):
        raise ModelError(f"{where}: {key} must be 3 numbers (one a channel), got {value!r}")
    return tuple(float(v) for v in values)


def resized_size(width: int, height: int, size: Mapping[str, int]) -> tuple[int, int]:
    """(height, width) after resizing to ``size``: exactly ``{height, width}``, or the shorter side to
    ``shortest_edge`` and the longer to ``int(edge * long / short)``."""
    if "shortest_edge" not in size:
        return size["height"], size["width"]
    short, long = (width, height) if width <= height else (height, width)
    edge = size["shortest_edge"]
    new_long = int(edge * long / short)
    return (new_long, edge) if width <= height else (edge, new_long)


def center_crop(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """``pixels`` ``[channel, height, width]`` cut to ``height`` × ``width`` about its centre; a side shorter than the
    crop padded with zeros first (as transformers' ``center_crop``)."""
    rows, columns = pixels.shape[1:]
    top, left = (rows - height) // 2, (columns - width) // 2
    if top >= 0 and left >= 0:
        return pixels[:, top : top + height, left : left + width]
    new_rows, new_columns = max(height, rows), max(width, columns)
    padded = np.zeros((pixels.shape[0], new_rows, new_columns), dtype=pixels.dtype)
    top_pad, left_pad = math.ceil((new_rows - rows) / 2), math.ceil((new_columns - columns) / 2)
    padded[:, top_pad : top_pad + rows, left_pad : left_pad + columns] = pixels
    top, left = top + top_pad, left + left_pad
    return padded[:, max(0, top) : min(new_rows, top + height), max(0, left) : min(new_columns, left + width)]


def preprocess(image: Any, config: Mapping[str, Any], where: str = "preprocessor_config.json") -> np.ndarray:
    """The RGB Pillow ``image`` (as ``attnx.io.image.read_image`` returns it) as pixels ``[channel, height, width]``
    float32, as ``config`` (a preprocessor_config.json) says (see the module's docstring)."""
    found = settings(config, where)
    if image.mode != "RGB":
        raise ValueError(f"preprocess takes an RGB image, got mode {image.mode}")
    if found["do_resize"]:
        height, width = resized_size(image.width, image.height, found["size"])
        image = image.resize((width, height), resample=found["resample"])
    pixels = np.moveaxis(np.asarray(image, dtype=np.uint8), -1, 0)  # [channel, height, width]
    if found["do_center_crop"]:
        pixels = center_crop(pixels, found["crop_size"]["height"], found["crop_size"]["width"])
    values: np.ndarray = pixels
    if found["do_rescale"]:
        values = (pixels.astype(np.float64) * found["rescale_factor"]).astype(np.float32)
    if found["do_normalize"]:
        values = values.astype(np.float32)
        mean = np.array(found["image_mean"], dtype=np.float32)[:, None, None]
        std = np.array(found["image_std"], dtype=np.float32)[:, None, None]
        values = (values - mean) / std
    return np.ascontiguousarray(values, dtype=np.float32)
