"""--image: a vision encoder (ViT) sees a PNG, prepared as its preprocessor_config.json says, in every command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_model import invoke
from tests.models.test_decoders import assert_close
from tests.models.vision_checkpoints import PREPROCESSOR, VitReference, run_vit

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 37 × 23 RGBA PNG of smooth gradients (odd sizes, an alpha band to convert)."""
    from PIL import Image

    y, x = np.mgrid[0:23, 0:37]
    rgba = np.stack([x * 6, y * 10, (x + y) * 4, 200 + 0 * x], axis=-1).astype(np.uint8)
    path = tmp_path_factory.mktemp("picture") / "gradient.png"
    Image.fromarray(rgba, "RGBA").save(path)
    return path


def transformers_pixels(picture: Path) -> np.ndarray:
    """transformers' Pillow-based ViT image processor on the picture: ``pixel_values[0]``."""
    transformers = pytest.importorskip("transformers")
    from PIL import Image

    processor = transformers.ViTImageProcessorPil(**PREPROCESSOR)
    with Image.open(picture) as image:
        found: np.ndarray = processor(image.convert("RGBA"), do_convert_rgb=True, return_tensors="np").pixel_values[0]
    return found


class TestSeen:
    def test_run_as_transformers(self, vit: VitReference, picture: Path) -> None:
        """`run --image`: layer 1's weights are transformers' on its own processor's pixels; the tokens are CLS and
        the patches by row and column; what was done to the image is said on stderr."""
        out = invoke("run", "--model", str(vit.path), "--image", str(picture), "--layer", "1", "-f", "json")
        data = json.loads(out.stdout)
        theirs = run_vit(vit.path, transformers_pixels(picture), "float64")[0][1]
        assert_close(np.asarray(data["weights"]), theirs, "float64")
        assert data["tokens"][:3] == ["CLS", "p(0,0)", "p(0,1)"] and data["tokens"][-1] == "p(3,3)"
        assert "alpha" in out.stderr or "RGB" in out.stderr

    def test_trace_rollout_and_model_view(self, vit: VitReference, picture: Path) -> None:
        """A patch is traced by its name; rollout and the model view see the image too."""
        base = ["--model", str(vit.path), "--image", str(picture)]
        assert "Trace of 'p(1,2)' (query 7)" in invoke("trace", *base, "--token", "p(1,2)").stdout
        assert "Attention rollout of query 0 'CLS'" in invoke("rollout", *base, "--token", "CLS").stdout
        view = json.loads(invoke("heads", *base, "--layer", "all", "-f", "json").stdout)
        assert view["n_layers"] == 2 and len(view["tokens"]) == 17

    def test_refused(self, vit: VitReference, picture: Path, tmp_path: Path) -> None:
        """--text beside --image, a model without a preprocessor config, an image for a text model, a file that is
        not an image: one line each, exit 2."""
        base = ["run", "--model", str(vit.path), "--image"]
        assert "--text is what a text model reads" in invoke(*base, str(picture), "--text", "a", code=2).stderr
        bare = Path(shutil.copytree(vit.path, tmp_path / "bare"))
        (bare / "preprocessor_config.json").unlink()
        missing = invoke("run", "--model", str(bare), "--image", str(picture), code=2).stderr
        assert "preprocessor_config.json" in missing and missing.count("\n") == 1
        junk = tmp_path / "junk.png"
        junk.write_bytes(b"not an image at all")
        bad = invoke(*base, str(junk), code=2).stderr
        assert bad.startswith("attnx: error: ") and bad.count("\n") == 1
