"""Mixtral, Qwen 2 MoE and Qwen 3 MoE beyond the shared agreement tests: what is read, what matters, the commands.

The tiny checkpoints are ``mixtral`` (4 experts, top-2 renormalised, every layer; window 4), ``qwen2_moe`` (top-2 not
renormalised, a shared expert, layer 1 dense) and ``qwen3_moe`` (top-2 renormalised, only layer 1 routed) of
tests/models/decoders.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.architecture import Mixture
from attnx.models.families.moe import top_k
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built, float64_everywhere
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import forward


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    return built("mixtral", tmp_path_factory)


@pytest.fixture(scope="module")
def qwen2_moe(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    return built("qwen2_moe", tmp_path_factory)


def test_ties_pick_the_lower_expert() -> None:
    """Equal probabilities: the lower expert index first (a stable sort), as documented in families/moe.py."""
    weights, chosen = top_k(np.array([[0.25, 0.25, 0.25, 0.25], [0.1, 0.3, 0.3, 0.3]]), 2)
    assert chosen.tolist() == [[0, 1], [1, 2]] and weights.tolist() == [[0.25, 0.25], [0.3, 0.3]]


def test_facts(mixtral: DecoderReference, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The mixture's experts, top-k, renormalisation, shared expert and dense layers, as ModelInfo's mixture."""
    info = describe(mixtral.path)
    assert info.design == "pre-RMSNorm causal decoder, routed MLP" and info.windows == (4, 4, 4)
    assert info.mixture is not None and info.mixture.describe() == "4 experts × 48, top-2 renormalised"
    qwen2 = describe(built("qwen2_moe", tmp_path_factory).path)
    assert qwen2.family == "Qwen 2 MoE" and qwen2.mixture == Mixture(4, 2, 24, False, 40, (1,))
    assert (
        qwen2.mixture.describe() == "4 experts × 24, top-2 not renormalised, shared expert × 40, dense MLP on layer 1"
    )
    qwen3 = describe(built("qwen3_moe", tmp_path_factory).path)
    assert qwen3.qk_norm_over == "head" and qwen3.mixture is not None
    assert qwen3.mixture.describe().endswith("top-2 renormalised, dense MLP on layers 0, 2")


def test_what_matters(qwen2_moe: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
    """Renormalising Qwen 2 MoE's top-2, or dropping its shared expert, moves layer 0's output off transformers'."""
    from attnx.models.families.moe import Qwen2Moe

    theirs = qwen2_moe.hidden["float64"][0]
    for attribute, value in (("renormalise", True), ("shared_width", None)):
        with monkeypatch.context() as patch:
            patch.setattr(Qwen2Moe, "read_config", changed(Qwen2Moe.read_config, attribute, value))
            assert np.abs(forward(qwen2_moe.path, "float64")[1][0] - theirs).max() > 1e-3


def changed(read_config: Any, attribute: str, value: object) -> Any:
    """``read_config``, then ``attribute`` set to ``value``."""

    def read(self: Any) -> None:
        read_config(self)
        setattr(self, attribute, value)

    return read


def test_refusals(mixtral: DecoderReference, tmp_path: Path) -> None:
    """An expert's bias (transformers has none) is an unused tensor; Qwen 3 MoE's sliding windows are refused."""
    from safetensors.numpy import load_file, save_file

    path = Path(shutil.copytree(mixtral.path, tmp_path / "mixtral"))
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.block_sparse_moe.experts.0.w1.bias"] = np.ones(48, dtype=np.float32)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"block_sparse_moe.experts.0.w1.bias' is not used by mixtral"):
        open_model(path)
    edit_config(path, model_type="qwen3_moe", use_sliding_window=True, architectures=None)
    with pytest.raises(ModelError, match=r"use_sliding_window True is not read by qwen3_moe"):
        open_model(path)


def transformers_ablated(path: Path, ids: list[int], drop: tuple[int, int] | None) -> tuple[Any, Any]:
    """transformers' float64 last hidden state and logits (experts run one by one), head ``drop`` zeroed."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", experts_implementation="eager", dtype=torch.float64
    )
    with float64_everywhere(), torch.no_grad():
        model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
        if drop is not None:
            layer, head = drop

            def zero(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
                x = args[0].clone()
                x[..., head * 8 : (head + 1) * 8] = 0  # d_k 8
                return (x,)

            model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero)
        hidden = model.model(torch.tensor([ids])).last_hidden_state
        return hidden[0].numpy(), model.lm_head(hidden)[0].numpy()


def test_commands(mixtral: DecoderReference) -> None:
    """model, run (layer 2's weights), heads --layer all and ablate (shift and KL) agree with transformers."""
    args = ["--model", str(mixtral.path), "--text", TEXT]
    shown = invoke("model", mixtral.path).stdout
    assert "Mixtral (pre-RMSNorm causal decoder, routed MLP)" in shown and "4 experts × 48, top-2 renormalised" in shown
    data = json.loads(invoke("run", *args, "--layer", "2", "-f", "json").stdout)
    assert np.abs(np.array(data["weights"]) - mixtral.attentions["float64"][2]).max() <= 1e-10
    view = json.loads(invoke("heads", *args, "--layer", "all", "-f", "json").stdout)
    assert [len(layer["heads"]) for layer in view["layers"]] == [4, 4, 4]
    (effect,) = json.loads(invoke("ablate", *args, "--head", "L1H2", "-f", "json").stdout)["ablations"]
    (hidden, logits), (dropped, dropped_logits) = (transformers_ablated(mixtral.path, mixtral.ids, d)
                                                   for d in (None, (1, 2)))  # fmt: skip
    shift = np.linalg.norm(dropped - hidden, axis=1) / np.linalg.norm(hidden, axis=1)
    p, q = (np.exp(x - x.max(1, keepdims=True)) for x in (logits, dropped_logits))
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    assert shift.min() > 0.01 and np.abs(np.array(effect["shift"]) - shift).max() <= 1e-10
    assert np.abs(np.array(effect["kl"]) - (p * (np.log(p) - np.log(q))).sum(1)).max() <= 1e-10
