"""ViT against transformers: every layer's weights and output, the last hidden state, the names of the positions."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.stacks import InputKind
from attnx.render.model import info_rows
from tests.models.test_decoders import assert_close
from tests.models.vision_checkpoints import VitReference, pixels, run_vit, save_vit
from tests.models.whisper_checkpoints import WhisperReference


def forward(path: object, dtype: str) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """attnx's pass over ``pixels()``: each layer's weights, the stream leaving each layer, the last hidden state."""
    with open_model(str(path), dtype) as model:
        run = model.run(model.encode_image(pixels()))
        weights, hidden = [], []
        for _ in range(model.layers):
            weights.append(run.step({"weights"}).weights)
            hidden.append(run.stream())
        return weights, hidden, run.finish()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_equal_to_transformers(vit: VitReference, dtype: str) -> None:
    """Every layer's weights (every head) and output, and the last hidden state: 1e-5 in float32, 1e-10 in float64."""
    weights, hidden, last = forward(vit.path, dtype)
    assert len(weights) == len(vit.attentions[dtype]) == 2
    for ours, theirs in zip(weights, vit.attentions[dtype], strict=True):
        assert ours.shape == (3, 17, 17) and ours.dtype == np.dtype(dtype)
        assert_close(ours, theirs, dtype)
    for ours, theirs in zip(hidden, vit.hidden[dtype], strict=True):
        assert_close(ours, theirs, dtype)
    assert_close(last, vit.last[dtype], dtype)


def test_positions_are_named(vit: VitReference) -> None:
    """The CLS token first (special), then the 4 × 4 patches row by row."""
    with open_model(vit.path) as model:
        image = model.encode_image(pixels())
        assert model.stack.reads is InputKind.IMAGE and image.kind is InputKind.IMAGE
    assert image.tokens[:3] == ("CLS", "p(0,0)", "p(0,1)") and image.tokens[-1] == "p(3,3)"
    assert len(image.tokens) == 17 and image.grid == (4, 4) and image.special == (True,) + (False,) * 16


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 16, 16), (3, 16, 12), (16, 16)])
def test_other_sizes_refused(vit: VitReference, shape: tuple[int, ...]) -> None:
    """Pixels of another size or channels are refused in one line (positions are not interpolated)."""
    with open_model(vit.path) as model, pytest.raises(ModelError, match=r"reads pixels of shape \(3, 16, 16\)") as e:
        model.encode_image(np.zeros(shape, dtype=np.float32))
    assert "\n" not in str(e.value) and "interpolating" in str(e.value)


def test_no_text(vit: VitReference) -> None:
    """The folder has no tokenizer: the model opens, and refuses text in one line."""
    with open_model(vit.path) as model, pytest.raises(ModelError, match="reads images and has no tokenizer"):
        model.encode("a cat")
    info = describe(vit.path)
    assert info.architecture == "vit" and info.stacks[0].reads is InputKind.IMAGE
    assert info.tokenizer == "none" and info.vocab_size == 0 and info.max_length == 17
    assert "4 × 4-pixel patches of 16 × 16-pixel images" in info.design
    assert [head.describe() for head in info.task_heads] == ["pooler: 2 tensors (pooler.dense.*)"]
    rows = dict(info_rows(info))
    assert rows["encoder"] == "2 layers · self-attention over an image" and "vocabulary" not in rows
    assert rows["max length"] == "17 positions (CLS and patches)" and rows["tokenizer"] == "none: it reads images"


def test_classifier_not_read(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ViTForImageClassification opens (under vit.), its classifier a task head it does not read; equal to its base."""
    path = save_vit(tmp_path_factory.mktemp("vit_classifier"), "ViTForImageClassification")
    info = describe(path)
    assert [head.kind for head in info.task_heads] == ["classification head"]
    with open_model(path) as model:
        assert model.checkpoint.prefix == "vit."
    weights, hidden, last = forward(path, "float32")
    their_weights, their_hidden, their_last = run_vit(path, pixels(), "float32")
    for ours, expected in zip([*weights, *hidden, last], [*their_weights, *their_hidden, their_last], strict=True):
        assert_close(ours, expected, "float32")


def test_without_qkv_biases(tmp_path: Path) -> None:
    """``qkv_bias: false``: q, k and v without biases (none saved), equal to transformers in float64."""
    path = save_vit(tmp_path / "vit", qkv_bias=False)
    weights, hidden, last = forward(path, "float64")
    their_weights, their_hidden, their_last = run_vit(path, pixels(), "float64")
    for ours, expected in zip([*weights, *hidden, last], [*their_weights, *their_hidden, their_last], strict=True):
        assert_close(ours, expected, "float64")


def test_a_text_model_still_needs_its_tokenizer(whisper: WhisperReference, tmp_path: Path) -> None:
    """A preprocessor_config.json excuses a missing tokenizer.json only where the model reads images: Whisper's
    folder without one is refused, naming it."""
    path = tmp_path / "whisper"
    shutil.copytree(whisper.path, path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match=r"tokenizer\.json: missing"):
        open_model(path)
