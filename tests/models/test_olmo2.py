"""OLMo 2 (``olmo2``): QK-norm over the whole projections reaches the spec, it matters, and the commands show it.

The agreement with transformers layer by layer is ``TestAgreement`` (test_decoders.py) on the variant ``olmo2``
(GQA: q_norm 32 wide, k_norm 16; rms_norm_eps absent from config.json).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.core.inputs import ProjectedInputs
from attnx.engines import compute
from attnx.engines.placement import Placement
from attnx.models import describe
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built
from tests.models.test_checkpoint import edit_config


@pytest.fixture(scope="module")
def olmo2(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """4 heads of d_k 8 sharing 2 K/V heads, RoPE θ 500, untied, eps absent (10⁻⁵)."""
    return built("olmo2", tmp_path_factory)


def test_spec_carries_projection_norms(olmo2: DecoderReference) -> None:
    """Layer 1's spec has q_norm 32 wide and k_norm 16 over the projection, eps 10⁻⁵; without them the weights leave
    transformers'."""
    info = describe(olmo2.path)
    assert (info.family, info.qk_norm, info.qk_norm_over) == ("OLMo 2", True, "projection")
    spec = load_model_spec(olmo2.path, TEXT, 1, on=Placement(dtype="float64"))
    inputs = spec.inputs
    assert isinstance(inputs, ProjectedInputs) and inputs.q_norm is not None and inputs.k_norm is not None
    assert (inputs.q_norm.over, inputs.q_norm.weight.shape, inputs.k_norm.weight.shape) == ("projection", (32,), (16,))
    assert inputs.q_norm.eps == inputs.k_norm.eps == 1e-5
    bare = dataclasses.replace(spec, inputs=dataclasses.replace(inputs, q_norm=None, k_norm=None))
    assert np.abs(compute(bare).weights - olmo2.attentions["float64"][1]).max() > 1e-3


def test_commands(olmo2: DecoderReference) -> None:
    """model says where QK-norm applies; trace's Q before RoPE is layer 0's normed projection (the embeddings, with no
    norm before attention); run --show q and heads --layer all exit 0 with every head."""
    from safetensors.numpy import load_file

    assert "QK-norm     RMSNorm over the whole projection of q and of k" in invoke("model", olmo2.path).stdout
    model = ["--model", olmo2.path, "--text", TEXT]
    trace = json.loads(invoke("trace", *model, "--layer", "0", "--query", "3", "-f", "json").stdout)
    tensors = load_file(str(olmo2.path / "model.safetensors"))
    q = tensors["model.embed_tokens.weight"][olmo2.ids[3]].astype(np.float64) @ tensors[
        "model.layers.0.self_attn.q_proj.weight"].T.astype(np.float64)  # fmt: skip
    q = q / np.sqrt(np.mean(q * q) + 1e-5) * tensors["model.layers.0.self_attn.q_norm.weight"]
    for head in trace["heads"]:
        np.testing.assert_allclose(head["q_before_rope"], q[8 * head["head"] : 8 * head["head"] + 8], rtol=1e-10)
    shown = json.loads(invoke("run", *model, "--layer", "2", "--show", "q", "-f", "json").stdout)
    assert np.asarray(shown["q"]).shape == (4, len(olmo2.ids), 8)
    view = json.loads(invoke("heads", *model, "--layer", "all", "-f", "json").stdout)
    assert len(view["layers"]) == 3 and all(len(layer["heads"]) == 4 for layer in view["layers"])


def test_olmo3_windows_and_rope_by_layer_type(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """OLMo 3: windows on the layers layer_types says slide (three sliding to one full where it is absent: all
    three here), each layer type turned by its own rope object; without the windows the weights move off
    transformers'."""
    olmo3 = built("olmo3", tmp_path_factory)
    info = describe(olmo3.path)
    assert (info.family, info.windows) == ("OLMo 3", (3, None, 3))
    sliding, full = info.rotaries[0], info.rotaries[1]
    assert sliding is not None and full is not None
    assert (sliding.theta, sliding.scaling, full.theta) == (300.0, None, 900.0)
    assert full.scaling is not None and full.scaling.kind == "linear"
    spec = load_model_spec(olmo3.path, TEXT, 2, on=Placement(dtype="float64"))
    plain = compute(spec.with_settings(window=None), "numpy", dtype="float64")
    assert np.abs(plain.weights - olmo3.attentions["float64"][2]).max() > 1e-3
    derived = Path(shutil.copytree(olmo3.path, tmp_path / "olmo3"))
    edit_config(derived, layer_types=None)
    assert describe(derived).windows == (3, 3, 3)
