"""gpt-oss beyond the shared agreement tests: learned sinks in every view, the clamped experts, what is read.

The tiny checkpoint is ``gpt_oss`` of tests/models/decoders.py: 4 heads on 2 K/V heads with a learned sink each
(logits drawn as large as the scores), windows of 3 on layers 0 and 2, YaRN past its 16 original positions,
4 experts of which 2 are chosen, and a SwiGLU clamp of 0.5 that the random weights reach.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.engines import compute
from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.architecture import Mixture
from attnx.models.families.gpt_oss import FP4, GptOss, mxfp4
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT, gpt2_tokenizer
from tests.models.decoders import DecoderReference, built, randomise, run_reference
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import assert_close, forward
from tests.models.test_moe import changed


@pytest.fixture(scope="module")
def oss(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    return built("gpt_oss", tmp_path_factory)


def args(oss: DecoderReference, *more: str) -> list[str]:
    return ["--model", str(oss.path), "--text", TEXT, *more]


class TestRead:
    def test_facts(self, oss: DecoderReference) -> None:
        """Sinks, the mixture, windows on the sliding layers and YaRN, as `attnx model` says them."""
        info = describe(oss.path)
        assert (info.family, info.sinks, info.windows) == ("gpt-oss", True, (3, None, 3))
        assert info.mixture == Mixture(4, 2, 48, True)
        assert info.rotary is not None and info.rotary.scaling is not None and info.rotary.scaling.kind == "yarn"
        shown = invoke("model", oss.path).stdout
        assert "a learned logit per head joins each row's softmax" in shown
        assert "4 experts × 48, top-2 renormalised" in shown
        data = json.loads(invoke("model", oss.path, "-f", "json").stdout)
        assert data["sinks"] is True and data["mixture"]["top_k"] == 2

    def test_sinks_are_read(self, oss: DecoderReference) -> None:
        """Layer 1's spec carries the checkpoint's sink logits, one per head."""
        from safetensors.numpy import load_file

        stored = load_file(oss.path / "model.safetensors")["model.layers.1.self_attn.sinks"]
        spec = load_model_spec(oss.path, TEXT, 1, on=Placement(dtype="float64"))
        assert spec.settings.sink_logits == tuple(float(x) for x in stored)


class TestWhatMatters:
    @pytest.mark.parametrize("layer", [0, 1])
    def test_sinks(self, oss: DecoderReference, layer: int) -> None:
        """The sinks take weight: each row's weights and its sink share add up to 1, and without the sinks the
        weights move off transformers'."""
        spec = load_model_spec(oss.path, TEXT, layer, on=Placement(dtype="float64"))
        result = compute(spec, "numpy", dtype="float64")
        theirs = oss.attentions["float64"][layer]
        assert result.sink_weights is not None and result.sink_weights.min() > 0 and result.sink_weights.mean() > 0.1
        assert np.abs(result.weights.sum(axis=2) + result.sink_weights - 1).max() <= 1e-12
        assert np.abs(result.sink_weights - (1 - theirs.sum(axis=2))).max() <= 1e-10
        plain = compute(spec.with_settings(sink_logits=None), "numpy", dtype="float64")
        assert np.abs(plain.weights - theirs).max() > 1e-2

    def test_clamp(self, oss: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """The SwiGLU clamp bites on these weights: with transformers' default limit of 7 layer 0's output moves."""
        monkeypatch.setattr(GptOss, "read_config", changed(GptOss.read_config, "limit", 7.0))
        assert np.abs(forward(oss.path, "float64")[1][0] - oss.hidden["float64"][0]).max() > 1e-3


class TestShown:
    def test_run_table_and_heatmap(self, oss: DecoderReference) -> None:
        """The weights table and the heatmap have a sink column after the keys."""
        table = invoke("run", *args(oss, "--layer", "1", "--show", "weights")).stdout
        assert "weights (softmax over the keys and the head's sink)" in table
        header = next(line for line in table.splitlines() if "tired" in line and "the" in line)
        assert header.split()[-1] == "sink"
        heatmap = invoke("run", *args(oss, "--layer", "1", "--view", "heatmap")).stdout
        assert any(line.split()[-1:] == ["sink"] for line in heatmap.splitlines())

    def test_machine_output(self, oss: DecoderReference) -> None:
        """JSON carries the logits and each sink's share; a JSONL head record its sink_weight."""
        data = json.loads(invoke("run", *args(oss, "--layer", "1", "-f", "json")).stdout)
        theirs = oss.attentions["float64"][1]
        assert len(data["sink_logits"]) == 4
        assert np.abs(np.array(data["sink_weights"]) - (1 - theirs.sum(axis=2))).max() <= 1e-10
        first = json.loads(invoke("run", *args(oss, "--layer", "1", "-f", "jsonl")).stdout.splitlines()[0])
        assert first["sink_weight"] == pytest.approx(1 - theirs[0, 0].sum(), abs=1e-10)

    def test_trace(self, oss: DecoderReference) -> None:
        """The trace writes the sink's logit into the softmax: its term counts in the max and the sum."""
        more = ("--layer", "1", "--token", "tired", "--head", "2")
        data = json.loads(invoke("trace", *args(oss, *more, "-f", "json")).stdout)
        softmax, keys = data["heads"][0]["softmax"], data["heads"][0]["keys"]
        sink = softmax["sink"]
        assert sink["logit"] == data["sink_logits"][2]
        assert sink["exp"] == pytest.approx(np.exp(sink["logit"] - softmax["max"]), rel=1e-12)
        assert softmax["sum"] == pytest.approx(sum(k["exp"] for k in keys) + sink["exp"], rel=1e-12)
        assert sink["weight"] == pytest.approx(1 - oss.attentions["float64"][1][2, -1].sum(), abs=1e-10)
        text = invoke("trace", *args(oss, *more)).stdout
        assert "the largest scaled score and the sink's logit" in text
        assert "(sink) =" in text

    def test_sink_measure(self, oss: DecoderReference) -> None:
        """`heads`' sink mass is key 0's weight plus the learned sink's, over the queries with a choice."""
        data = json.loads(invoke("heads", *args(oss, "--layer", "1", "-f", "json")).stdout)
        theirs = oss.attentions["float64"][1]
        mass = (theirs[:, 1:, 0] + 1 - theirs[:, 1:].sum(axis=2)).mean(axis=1)  # query 0 sees key 0 alone
        assert [h["sink_mass"] for h in data["heads"]] == pytest.approx(mass.tolist(), abs=1e-10)

    def test_other_commands(self, oss: DecoderReference) -> None:
        """ablate, detect, rollout and diff run on gpt-oss."""
        ablated: dict[str, Any] = json.loads(invoke("ablate", *args(oss, "--head", "L1H2", "-f", "json")).stdout)
        assert min(ablated["ablations"][0]["shift"]) > 0
        assert "L2" in invoke("detect", "--model", str(oss.path), "--samples", "2", "--length", "6").stdout
        assert "after all 3 layers" in invoke("rollout", *args(oss, "--token", "tired")).stdout
        invoke("diff", *args(oss, "--layer", "1", "--scale", "sqrt_dk,none"))  # not --heads: a sink logit per head of 4


def quantized(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w`` ``[expert, out, in]`` as MXFP4 blocks and scales, each block of 32 scaled by the power of two that brings
    its largest magnitude within FP4's 6, each value rounded to the nearest FP4 code (as OpenAI's release stores the
    experts)."""
    e, out, n = w.shape
    groups = w.reshape(e, out, n // 32, 32)
    power = np.ceil(np.log2(np.maximum(np.abs(groups).max(axis=-1), 1e-30) / 6.0)).astype(np.int32)
    codes = np.abs((groups / np.ldexp(1.0, power)[..., None])[..., None] - FP4).argmin(axis=-1).astype(np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8), (power + 127).astype(np.uint8)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], dict[str, list[np.ndarray]]]:
    """A tiny gpt-oss stored as OpenAI released theirs (experts as MXFP4, ff 32: whole blocks), and transformers'
    hidden states on it (it dequantizes the experts on the CPU)."""
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file

    torch.manual_seed(0)
    tokenizer = gpt2_tokenizer()
    config = transformers.GptOssConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=3, initializer_range=0.2,
    )  # fmt: skip
    model = transformers.GptOssForCausalLM(config)
    randomise(model)
    path = tmp_path_factory.mktemp("released")
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    tensors = load_file(path / "model.safetensors")
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        tensors[name + "_blocks"], tensors[name + "_scales"] = quantized(tensors.pop(name).transpose(0, 2, 1))
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    edit_config(path, quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]})
    ids = tokenizer.encode(TEXT).ids
    return path, ids, {"float32": run_reference(path, ids, "float32")[1]}


class TestReleasedCheckpoints:
    def test_mxfp4_values(self) -> None:
        """The dequantized values are transformers' own (its conversion of OpenAI's packed experts)."""
        torch = pytest.importorskip("torch")
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors

        rng = np.random.default_rng(2)
        blocks = rng.integers(0, 256, (3, 5, 2, 16), dtype=np.uint8)
        scales = rng.integers(110, 140, (3, 5, 2), dtype=np.uint8)
        theirs = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
        ours = np.stack([mxfp4(blocks[e], scales[e]).T for e in range(3)])  # (E, in, out), as transformers keeps it
        np.testing.assert_array_equal(ours, theirs.numpy())

    def test_hidden_states(self, released: tuple[Path, list[int], dict[str, list[np.ndarray]]]) -> None:
        """Every layer's output on the MXFP4 checkpoint equals transformers' (1e-5 in float32)."""
        path, _, hidden = released
        assert describe(path).mixture == Mixture(4, 2, 32, True)
        for ours, theirs in zip(forward(path, "float32")[1], hidden["float32"], strict=True):
            assert_close(ours, theirs, "float32")

    def test_refused(self, released: tuple[Path, list[int], dict[str, list[np.ndarray]]], tmp_path: Path) -> None:
        """Another quantization is refused naming it; so is quantization_config on a family that reads none."""
        import shutil

        copy = Path(shutil.copytree(released[0], tmp_path / "copy"))
        edit_config(copy, quantization_config={"quant_method": "gptq"})
        with pytest.raises(ModelError, match=r"quant_method 'gptq' is not one gpt-oss reads \(mxfp4\)"):
            open_model(copy)
        edit_config(copy, model_type="llama", architectures=None, layer_types=None, sliding_window=None)
        with pytest.raises(ModelError, match=r"quantization_config .* is not read by llama"):
            open_model(copy)
