"""Image preprocessing equal to transformers' Pillow-based image processors (within 1e-6), for each processor the
vision families use, on images of odd sizes and modes; settings attnx does not apply refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.io.image import read_image
from attnx.models.preprocess import CLIP_MEAN, CLIP_STD, IMAGENET_STANDARD, preprocess, settings

Image = pytest.importorskip("PIL.Image")
transformers = pytest.importorskip("transformers")

# Typical preprocessor_config.json files of each processor (as the hub's checkpoints ship them).
VIT = {"image_processor_type": "ViTImageProcessor", "do_normalize": True, "do_rescale": True, "do_resize": True,
       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 0.00392156862745098,
       "size": {"height": 224, "width": 224}}  # fmt: skip
DEIT = {"image_processor_type": "DeiTImageProcessor", "crop_size": {"height": 224, "width": 224},
        "do_center_crop": True, "do_normalize": True, "do_resize": True, "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": {"height": 256, "width": 256}}  # fmt: skip
CLIP = {"image_processor_type": "CLIPImageProcessor", "crop_size": {"height": 224, "width": 224},
        "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD), "resample": 3, "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 224}, "processor_class": "CLIPProcessor"}  # fmt: skip
BIT = {"image_processor_type": "BitImageProcessor", "crop_size": {"height": 224, "width": 224}, "do_center_crop": True,
       "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
       "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "resample": 3,
       "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 256}}  # fmt: skip
SIGLIP = {"image_processor_type": "SiglipImageProcessor", "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "SiglipProcessor",
          "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}}  # fmt: skip
SMALL = {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 30}, "crop_size": 27, "resample": 5}
CONFIGS = {"vit": VIT, "deit": DEIT, "clip": CLIP, "bit": BIT, "siglip": SIGLIP, "small-crop": SMALL,
           "vit-defaults": {"image_processor_type": "ViTImageProcessor"},
           "clip-defaults": {"image_processor_type": "CLIPImageProcessor"},
           "deit-defaults": {"image_processor_type": "DeiTImageProcessor"},
           "siglip-defaults": {"image_processor_type": "SiglipImageProcessor"},
           "bit-defaults": {"image_processor_type": "BitImageProcessor"},
           "no-resize": {**CLIP, "do_resize": False, "crop_size": {"height": 20, "width": 31}},
           "pad-in-crop": {**DEIT, "size": {"height": 20, "width": 17}, "crop_size": {"height": 25, "width": 24}},
           "int-size": {**VIT, "size": 48, "resample": 0},
           "no-rescale": {**SIGLIP, "do_rescale": False, "image_mean": 127.5, "image_std": 60.0},
           "no-normalize": {**VIT, "do_normalize": False},
           "legacy": {"feature_extractor_type": "ViTFeatureExtractor", "size": 64, "resample": 4},
           # As the first CLIP and DeiT checkpoints ship them: sizes as numbers (CLIP's the shortest edge, DeiT's a
           # square).
           "clip-legacy": {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                           "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": list(CLIP_MEAN),
                           "image_std": list(CLIP_STD), "resample": 3, "size": 224},
           "deit-legacy": {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                           "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": [0.485, 0.456, 0.406],
                           "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": 256}}  # fmt: skip
SIZES = [(37, 23), (23, 37), (300, 200), (224, 224), (1, 5), (257, 256)]
MODES = ["RGB", "L", "P", "RGBA"]
SEEN: dict[str, float] = {}


def processor(config: dict[str, Any]) -> Any:
    """transformers' Pillow-based processor for ``config`` (the ``…Pil`` class, not the torchvision one)."""
    name = (config.get("image_processor_type") or config["feature_extractor_type"]).replace(
        "FeatureExtractor", "ImageProcessor"
    )
    kwargs = {k: v for k, v in config.items() if k not in ("image_processor_type", "feature_extractor_type")}
    kwargs.pop("processor_class", None)
    return getattr(transformers, f"{name}Pil")(**kwargs)


def image_file(tmp_path: Path, size: tuple[int, int], mode: str, seed: int) -> Path:
    """An image of ``size`` (width, height) and ``mode`` of smooth gradients and noise, as a PNG."""
    width, height = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
    rgb = (rgb + rng.integers(-40, 40, rgb.shape)).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(rgb)
    if mode == "L":
        image = image.convert("L")
    elif mode == "P":
        image = image.quantize(50)
    elif mode == "RGBA":
        image = Image.fromarray(np.dstack([rgb, rng.integers(0, 256, (height, width), dtype=np.uint8)]))
    path = tmp_path / f"{mode}-{width}x{height}.png"
    image.save(path)
    return path


@pytest.mark.parametrize("name", list(CONFIGS))
def test_equal_to_transformers(tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    reference = processor(config)
    worst = 0.0
    for index, (size, mode) in enumerate((size, mode) for size in SIZES for mode in MODES):
        path = image_file(tmp_path, size, mode, index)
        raw = read_image(path)
        found = preprocess(raw.image, config)
        with Image.open(path) as original:  # transformers converts the original mode itself
            expected = reference(original, do_convert_rgb=True, return_tensors="np").pixel_values[0]
        assert found.dtype == np.float32 and found.shape == expected.shape, (size, mode)
        difference = float(np.abs(found - expected.astype(np.float32)).max())
        assert difference <= 1e-6, (size, mode, difference)
        worst = max(worst, difference)
    SEEN[name] = worst


def test_exif_oriented_jpeg(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "turned.jpg"
    Image.fromarray(rng.integers(0, 256, (23, 37, 3), dtype=np.uint8)).save(path, exif=exif.tobytes())
    raw = read_image(path)
    expected = processor(CLIP)(transformers.image_utils.load_image(str(path)), return_tensors="np").pixel_values[0]
    assert np.abs(preprocess(raw.image, CLIP) - expected).max() <= 1e-6


def test_defaults_are_transformers(tmp_path: Path) -> None:
    for name in ("ViT", "DeiT", "CLIP", "Bit", "Siglip"):
        found = settings({"image_processor_type": f"{name}ImageProcessor"})
        cls = getattr(transformers, f"{name}ImageProcessorPil")
        assert found["resample"] == cls.resample
        assert found["image_mean"] == tuple(cls.image_mean) and found["image_std"] == tuple(cls.image_std)
        assert found["size"] == {k: v for k, v in cls.size.items() if v is not None}
    assert tuple(transformers.image_utils.IMAGENET_STANDARD_MEAN) == IMAGENET_STANDARD
    assert tuple(transformers.image_utils.OPENAI_CLIP_MEAN) == CLIP_MEAN


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"do_pad": True}, "do_pad True is not applied"),
        ({"do_reduce_labels": True}, "do_reduce_labels True is not applied"),
        ({"use_square_size": True}, "use_square_size"),
        ({"image_processor_type": "ViTImageProcessorFast"}, "(torchvision) is not computed"),
        ({"image_processor_type": "DetrImageProcessor"}, "'DetrImageProcessor' is not computed"),
        ({"image_processor_type": None}, "names no image processor"),
        ({"size": {"longest_edge": 300}}, "size {'longest_edge': 300} is not computed"),
        ({"size": {"height": 0, "width": 4}}, "positive whole number"),
        ({"resample": 7}, "resample 7"),
        ({"do_resize": "yes"}, "do_resize must be true or false"),
        ({"image_mean": [0.5, 0.5]}, "image_mean must be 3 numbers"),
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std has a zero"),
        ({"rescale_factor": "1/255"}, "rescale_factor must be a number"),
        ({"data_format": "channels_last"}, "data_format"),
        ({"do_center_crop": True, "crop_size": {"shortest_edge": 3}}, "crop_size"),
    ],
)
def test_refused_by_name(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ModelError, match=None) as caught:
        settings({**VIT, **change}, "ckpt/preprocessor_config.json")
    message = str(caught.value)
    assert message.startswith("ckpt/preprocessor_config.json: ") and words in message and "\n" not in message


def test_harmless_keys_pass() -> None:
    found = settings({**CLIP, "do_pad": False, "pad_size": None, "do_reduce_labels": False, "data_format": "channels_first",
                      "feature_extractor_type": "CLIPFeatureExtractor", "input_data_format": None})  # fmt: skip
    assert found["size"] == {"shortest_edge": 224}


def test_worst_differences_seen() -> None:
    """Printed with ``-s``: the largest difference from transformers seen for each configuration."""
    for name, worst in SEEN.items():
        print(f"{name}: max |attnx - transformers| = {worst:.3g}")
