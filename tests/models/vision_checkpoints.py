"""Fixtures: a tiny random ViT built with transformers, random pixels, and what transformers computes on them."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.models.decoders import float64_everywhere, randomise

VIT_SIZES = {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 40,
             "image_size": 16, "patch_size": 4, "num_channels": 3}  # fmt: skip
PREPROCESSOR = {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                "image_processor_type": "ViTImageProcessor", "image_std": [0.5, 0.5, 0.5], "resample": 2,
                "rescale_factor": 1 / 255, "size": {"height": 16, "width": 16}}  # fmt: skip


def pixels() -> np.ndarray:
    """Preprocessed pixels of a 16 × 16 RGB image, ``[3, 16, 16]`` float32 in [-1, 1]."""
    return np.random.default_rng(5).uniform(-1, 1, (3, 16, 16)).astype(np.float32)


@dataclass(frozen=True)
class VitReference:
    """A checkpoint folder and what transformers computes on ``pixels()`` per dtype: each layer's weights, each layer's
    output and the last hidden state."""

    path: Path
    attentions: dict[str, list[np.ndarray]]
    hidden: dict[str, list[np.ndarray]]
    last: dict[str, np.ndarray]


def run_vit(path: Path, image: np.ndarray, dtype: str) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """transformers' ViTModel (eager attention) on ``image``: weights and output per layer, the last hidden state."""
    import torch
    import transformers

    wide = dtype == "float64"
    torch_dtype = torch.float64 if wide else torch.float32
    model = transformers.ViTModel.from_pretrained(path, attn_implementation="eager", dtype=torch_dtype)
    model.eval()
    with float64_everywhere() if wide else contextlib.nullcontext(), torch.no_grad():
        out = model(pixel_values=torch.tensor(image[None], dtype=torch_dtype), output_attentions=True,
                    output_hidden_states=True)  # fmt: skip
    attentions = [a[0].numpy() for a in out.attentions]
    hidden = [h[0].numpy() for h in out.hidden_states[1:]]  # the output of each layer
    return attentions, hidden, out.last_hidden_state[0].numpy()


def save_vit(path: Path, class_name: str = "ViTModel", **config: Any) -> Path:
    """A random tiny ``class_name`` (``config`` over ``VIT_SIZES``) with a preprocessor_config.json (and no
    tokenizer) saved in ``path``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    model = getattr(transformers, class_name)(transformers.ViTConfig(initializer_range=0.2, **{**VIT_SIZES, **config}))
    randomise(model)
    model.save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return path


@pytest.fixture(scope="session")
def vit(tmp_path_factory: pytest.TempPathFactory) -> VitReference:
    """The tiny ViT, built once per session, and transformers' pass over ``pixels()`` in both dtypes."""
    path = save_vit(tmp_path_factory.mktemp("vit"))
    found: dict[str, Any] = {"attentions": {}, "hidden": {}, "last": {}}
    for dtype in ("float32", "float64"):
        found["attentions"][dtype], found["hidden"][dtype], found["last"][dtype] = run_vit(path, pixels(), dtype)
    return VitReference(path, **found)
