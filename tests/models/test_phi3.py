"""Phi-3 beyond the shared agreement tests: longrope read as transformers reads it, its refusals, and the commands.

The tiny checkpoints are ``phi3`` (GQA 4/2, 0.75 of d_k 8 turned, longrope past its 8 trained positions, a window of
5) and ``phi3_short`` (one K/V head, every column turned, longrope within its 32 positions) of tests/models/decoders.py.
Each reference here is transformers in float64 throughout (``float64_everywhere``, the rotary module rebuilt).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.core.positions import RopeScaling, Rotary
from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built, float64_everywhere, run_reference
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import assert_close, forward

SHORT, LONG = (1.0, 1.5, 2.0), (4.0, 6.0, 12.0)  # the phi3 variant's longrope factors (3 turned pairs)


@pytest.fixture(scope="module")
def phi3(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """The Phi-3 variant: its 10 tokens run past original_max_position_embeddings 8."""
    return built("phi3", tmp_path_factory)


def copy_of(reference: DecoderReference, tmp_path: Path) -> Path:
    """A writable copy of the checkpoint folder."""
    return Path(shutil.copytree(reference.path, tmp_path / reference.path.name))


def transformers_float64(path: Path, ids: list[int], drop: tuple[int, int] | None = None) -> tuple[Any, Any]:
    """transformers' last hidden state (after the final norm) and logits in float64, with head ``drop`` (layer,
    head) zeroed before o_proj, as transformers' head_mask did."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float64)
    model.eval()
    with float64_everywhere(), torch.no_grad():
        model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
        if drop is not None:
            layer, head = drop
            d = model.config.hidden_size // model.config.num_attention_heads

            def zero(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
                x = args[0].clone()
                x[..., head * d : (head + 1) * d] = 0
                return (x,)

            model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero)
        hidden = model.model(torch.tensor([ids])).last_hidden_state
        return hidden[0].numpy(), model.lm_head(hidden)[0].numpy()


class TestSpecs:
    """What attnx reads from each Phi-3 config."""

    def test_long(self, phi3: DecoderReference) -> None:
        """GQA 4/2, d_k 8, 0.75 turned, longrope ×8 (64 / 8) with attention √(1 + ln 8 / ln 8) = √2, window 5 on all."""
        spec = load_model_spec(phi3.path, TEXT, 1)
        s = spec.settings
        assert (s.heads, s.kv_heads, spec.d_k, s.window) == (4, 2, 8, 5)
        scaling = RopeScaling("longrope", 8.0, original_max_positions=8, short_factor=SHORT, long_factor=LONG)
        assert s.rotary == Rotary(theta=100.0, fraction=0.75, scaling=scaling)
        assert s.rotary.attention == pytest.approx(math.sqrt(2), rel=1e-15)
        assert describe(phi3.path).windows == (5, 5, 5)

    def test_short(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """One K/V head, every column turned, longrope ×2 against 32 positions, no window."""
        info = describe(built("phi3_short", tmp_path_factory).path)
        assert info.kv_heads == 1 and info.windows == (None, None, None)
        assert info.rotary is not None and info.rotary.fraction == 1.0 and info.rotary.scaling is not None
        assert info.rotary.scaling.original_max_positions == 32 and info.rotary.scaling.factor == 2.0
        assert info.rotary.attention == pytest.approx(math.sqrt(1 + math.log(2) / math.log(32)), rel=1e-15)


class TestWhatMatters:
    """The settings the agreement tests check are ones that change the weights."""

    @pytest.mark.parametrize(("name", "used", "unused"), [("phi3", "long_factor", "short_factor"),
                                                           ("phi3_short", "short_factor", "long_factor")])  # fmt: skip
    def test_the_factors_of_the_text_length(
        self, tmp_path_factory: pytest.TempPathFactory, name: str, used: str, unused: str
    ) -> None:
        """10 tokens: past 8 positions the long factors turn Q and K, within 32 the short ones; the others do not."""
        from attnx.engines import compute

        reference = built(name, tmp_path_factory)
        spec = load_model_spec(reference.path, TEXT, 2, on=Placement(dtype="float64"))
        rotary = spec.settings.rotary
        assert rotary is not None and rotary.scaling is not None
        scaling, theirs = rotary.scaling, reference.attentions["float64"][2]

        def weights(**factors: Any) -> np.ndarray:
            turned = replace(rotary, scaling=replace(scaling, **factors))
            return compute(spec.with_settings(rotary=turned), "numpy", dtype="float64").weights

        assert np.abs(weights(**{used: getattr(scaling, unused)}) - theirs).max() > 1e-3
        assert np.abs(weights(**{unused: getattr(scaling, used)}) - theirs).max() <= 1e-10

    def test_the_window(self, phi3: DecoderReference) -> None:
        """Without its window of 5, layer 0's weights differ from transformers'."""
        from attnx.engines import compute

        spec = load_model_spec(phi3.path, TEXT, 0, on=Placement(dtype="float64"))
        plain = compute(spec.with_settings(window=None), "numpy", dtype="float64").weights
        assert np.abs(plain - phi3.attentions["float64"][0]).max() > 1e-3


# Config edits and what each must read: trained context, longrope factor, attention factor.
LEGACY = {
    "su": ({"rope_parameters": None, "rope_scaling": {"type": "su", "short_factor": list(SHORT),
            "long_factor": list(LONG), "original_max_position_embeddings": 4}}, (8, 8.0, math.sqrt(2))),
    "yarn": ({"rope_parameters": None, "rope_theta": 100.0, "rope_scaling": {"type": "yarn",
              "short_factor": list(SHORT), "long_factor": list(LONG)}}, (8, 8.0, math.sqrt(2))),
    "no top-level context": ({"original_max_position_embeddings": None, "rms_norm_eps": None}, (4096, 64 / 4096, 1.0)),
    "no max length": ({"max_position_embeddings": None}, (8, 512.0, 2.0)),
}  # fmt: skip


class TestAsTransformersReadsIt:
    """Phi-3's config quirks, each run by attnx and by transformers on the same edited folder."""

    @pytest.mark.parametrize("case", list(LEGACY))
    def test_edited_config(self, phi3: DecoderReference, tmp_path: Path, case: str) -> None:
        """A legacy ``su`` or ``yarn`` rope type is longrope; the top-level original_max_position_embeddings (absent:
        4096) wins over the rope object's; max length 4096 and eps 1e-5 where absent: every layer within 1e-10."""
        changes, (context, factor, attention) = LEGACY[case]
        path = copy_of(phi3, tmp_path)
        edit_config(path, **changes)
        rotary = describe(path).rotary
        assert rotary is not None and rotary.scaling is not None and rotary.scaling.kind == "longrope"
        assert rotary.scaling.original_max_positions == context and rotary.scaling.factor == pytest.approx(factor)
        assert rotary.attention == pytest.approx(attention, rel=1e-12)
        weights, hidden = forward(path, "float64")
        theirs_weights, theirs_hidden = run_reference(path, phi3.ids, "float64")
        for ours, theirs in zip([*weights, *hidden], [*theirs_weights, *theirs_hidden], strict=True):
            assert_close(ours, theirs, "float64")

    def test_other_scalings_are_refused(self, phi3: DecoderReference, tmp_path: Path) -> None:
        """A linear rope on Phi-3 is refused by transformers' Phi3Config, and by attnx in one line naming it."""
        transformers = pytest.importorskip("transformers")
        path = copy_of(phi3, tmp_path)
        edit_config(path, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0})
        with pytest.raises(ModelError, match=r"config.json: rope type 'linear' is not one Phi-3 runs"):
            open_model(path)
        with pytest.raises(Exception, match="must be one of"):
            transformers.AutoConfig.from_pretrained(path)

    def test_a_bias_is_refused(self, phi3: DecoderReference, tmp_path: Path) -> None:
        """Phi-3 has no biases: a qkv_proj bias in the file, which transformers would leave unread, is named."""
        from safetensors.numpy import load_file, save_file

        path = copy_of(phi3, tmp_path)
        tensors = load_file(path / "model.safetensors")
        tensors["model.layers.0.self_attn.qkv_proj.bias"] = np.ones(64, dtype=np.float32)
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
        with pytest.raises(ModelError, match=r"tensor 'model.layers.0.self_attn.qkv_proj.bias' is not used by phi3"):
            open_model(path)


class TestCommands:
    """model, run, trace, heads --layer all, ablate and rollout on the Phi-3 checkpoint."""

    def args(self, phi3: DecoderReference, *more: str) -> list[str]:
        return ["--model", str(phi3.path), "--text", TEXT, *more]

    def test_model(self, phi3: DecoderReference) -> None:
        """The family, the partial longrope and the window, in words and in JSON."""
        out = invoke("model", phi3.path).stdout
        assert "Phi-3 (pre-RMSNorm causal decoder)" in out and "phi3 (Phi3ForCausalLM)" in out
        assert "0.75 of d_k, longrope ×8, long factors past 8 positions (attention ×1.414)" in out
        data = json.loads(invoke("model", phi3.path, "-f", "json").stdout)
        assert data["rope"]["fraction"] == 0.75 and data["rope"]["scaling"]["kind"] == "longrope"
        assert data["windows"] == [5, 5, 5] and (data["kv_heads"], data["d_k"]) == (2, 8)

    def test_run_and_heads(self, phi3: DecoderReference) -> None:
        """run's layer 1 equals transformers' float64 weights; the model view has 3 layers of 4 heads."""
        data = json.loads(invoke("run", *self.args(phi3, "--layer", "1", "-f", "json")).stdout)
        assert np.abs(np.array(data["weights"]) - phi3.attentions["float64"][1]).max() <= 1e-10
        view = json.loads(invoke("heads", *self.args(phi3, "--layer", "all", "-f", "json")).stdout)
        assert [len(layer["heads"]) for layer in view["layers"]] == [4, 4, 4]

    def test_trace(self, phi3: DecoderReference) -> None:
        """Query 9 sees keys 5-9 (window 5); each score splits into 3 turned pairs and the 2 unturned columns."""
        data = json.loads(invoke("trace", *self.args(phi3, "--layer", "2", "--query", "9", "-f", "json")).stdout)
        assert data["window"] == 5
        keys = data["heads"][0]["keys"]
        assert [k["masked"] for k in keys] == [i < 5 for i in range(10)]
        assert all(len(k["bands"]) == 4 and abs(sum(k["bands"]) - k["raw"]) < 1e-12 for k in keys)

    def test_ablate(self, phi3: DecoderReference) -> None:
        """ablate --head L1H2: each token's shift of the last hidden state and KL of the next token equal
        transformers' with head 2's slice of layer 1's o_proj input zeroed."""
        data = json.loads(invoke("ablate", *self.args(phi3, "--head", "L1H2", "-f", "json")).stdout)
        (effect,) = data["ablations"]
        hidden, logits = transformers_float64(phi3.path, phi3.ids)
        dropped, dropped_logits = transformers_float64(phi3.path, phi3.ids, drop=(1, 2))
        shift = np.linalg.norm(dropped - hidden, axis=1) / np.linalg.norm(hidden, axis=1)
        p, q = (np.exp(x - x.max(1, keepdims=True)) for x in (logits, dropped_logits))
        p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
        kl = (p * (np.log(p) - np.log(q))).sum(1)
        assert shift.min() > 0.01 and np.abs(np.array(effect["shift"]) - shift).max() <= 1e-10
        assert np.abs(np.array(effect["kl"]) - kl).max() <= 1e-10

    def test_rollout(self, phi3: DecoderReference) -> None:
        """rollout: the product of each layer's (mean of transformers' heads + I) / 2, rows renormalised."""
        data = json.loads(invoke("rollout", *self.args(phi3, "--query", "9", "-f", "json")).stdout)
        rollout = np.eye(10)
        for weights in phi3.attentions["float64"]:
            step = (weights.mean(0) + np.eye(10)) / 2
            rollout = step / step.sum(1, keepdims=True) @ rollout
        assert np.abs(np.array(data["rollout"]) - rollout).max() <= 1e-10
