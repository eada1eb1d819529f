"""gpt-oss beyond the shared agreement tests: learned sinks in every view, the clamped experts, what is read.

The tiny checkpoint is ``gpt_oss`` of tests/models/decoders.py: 4 heads on 2 K/V heads with a learned sink each
(logits drawn as large as the scores), windows of 3 on layers 0 and 2, YaRN past its 16 original positions,
4 experts of which 2 are chosen, and a SwiGLU clamp of 0.5 that the random weights reach.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from attnx.engines import compute
from attnx.models import describe
from attnx.models.architecture import Mixture
from attnx.models.families.gpt_oss import GptOss
from attnx.models.runs import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built
from tests.models.test_decoders import forward
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
        spec = load_model_spec(oss.path, TEXT, 1, dtype="float64")
        assert spec.settings.sink_logits == tuple(float(x) for x in stored)


class TestWhatMatters:
    @pytest.mark.parametrize("layer", [0, 1])
    def test_sinks(self, oss: DecoderReference, layer: int) -> None:
        """The sinks take weight: each row's weights and its sink share add up to 1, and without the sinks the
        weights move off transformers'."""
        spec = load_model_spec(oss.path, TEXT, layer, dtype="float64")
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
        invoke("diff", *args(oss, "--layer", "1", "--heads", "1,2,4"))
