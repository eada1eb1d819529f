"""The commands on Llama-style decoders: model, run, trace, heads and diff read them as they read BERT and GPT-2."""

from __future__ import annotations

import json

import numpy as np

from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference


def model_args(reference: DecoderReference, layer: str) -> list[str]:
    return ["--model", str(reference.path), "--text", TEXT, "--layer", layer]


class TestModel:
    """``attnx model`` on decoders."""

    def test_llama_table(self, llama: DecoderReference) -> None:
        """Groups of K/V heads, RoPE with its scaling, untied embeddings and shards, in words."""
        out = invoke("model", llama.path).stdout
        assert "Llama (pre-RMSNorm causal decoder)" in out
        assert "4 × d_k 16, 2 K/V heads (grouped-query: groups of 2)" in out
        assert "RoPE θ 500 (half pairs, llama3 ×8)" in out and "silu, gated" in out
        assert "embeddings  untied" in out and "safetensors shards" in out

    def test_gemma2_json(self, gemma2: DecoderReference) -> None:
        """--format json: K/V heads, d_k, the rope object, each layer's window, the soft cap, tied embeddings."""
        data = json.loads(invoke("model", gemma2.path, "-f", "json").stdout)
        assert (data["heads"], data["kv_heads"], data["d_k"], data["d_model"]) == (4, 2, 8, 32)
        assert data["rope"] == {"theta": 10000.0, "pairs": "half", "fraction": 1.0, "scaling": None}
        assert data["windows"] == [4, None, 4] and data["softcap"] == 2.0
        assert data["tied_embeddings"] is True and data["gated_mlp"] is True and data["weight_files"] == 1

    def test_gemma2_table(self, gemma2: DecoderReference) -> None:
        """The alternating windows and the cap in words."""
        out = invoke("model", gemma2.path).stdout
        assert "4 keys on layers 0, 2 (2 of 3); the others see every earlier token" in out
        assert "scores capped at 2 (cap · tanh(s / cap))" in out


class TestCommands:
    """run, trace, heads and diff on a decoder layer."""

    def test_run_weights_match_transformers(self, llama: DecoderReference) -> None:
        """run --model --layer 1 -f json: layer 1's weights equal transformers' float64 ones; the rope is in the JSON."""
        data = json.loads(invoke("run", *model_args(llama, "1"), "-f", "json").stdout)
        assert np.abs(np.array(data["weights"]) - llama.attentions["float64"][1]).max() <= 1e-10
        assert data["kv_heads"] == 2 and data["rope"]["scaling"]["kind"] == "llama3"
        assert data["tokens"][:3] == ["<s>", " the", " cat"]

    def test_trace_window_cap_and_bands(self, gemma2: DecoderReference) -> None:
        """trace on Gemma 2's layer 0: the window hides early keys, the cap bends the scores, the bands add up."""
        args = [*model_args(gemma2, "0"), "--query", "6", "--head", "1", "-f", "json"]
        data = json.loads(invoke("trace", *args).stdout)
        assert data["window"] == 4 and data["softcap"] == 2.0
        head = data["heads"][0]
        keys = head["keys"]
        assert [k["masked"] for k in keys] == [not 3 <= i <= 6 for i in range(len(keys))]  # keys 3-6 in sight
        for key in keys:
            assert abs(sum(key["bands"]) - key["raw"]) < 1e-12 and len(key["bands"]) == 4  # d_k 8: 4 pairs
            assert abs(key["scaled"]) < 2.0

    def test_heads_over_every_layer(self, llama: DecoderReference) -> None:
        """heads --layer all -f json: three layers of four heads."""
        data = json.loads(invoke("heads", *model_args(llama, "all"), "-f", "json").stdout)
        assert len(data["layers"]) == 3 and all(len(layer["heads"]) == 4 for layer in data["layers"])

    def test_diff_sweeps_kv_heads(self, llama: DecoderReference) -> None:
        """diff --kv-heads 1,2 on a GQA layer: pooling its 2 K/V heads to 1 moves the output; 2 is the layer as is."""
        out = invoke("diff", *model_args(llama, "0"), "--kv-heads", "1,2").stdout
        assert "kv_heads=1" in out and "kv_heads=2" in out


class TestEveryFamily:
    """Each family runs through the commands from its folder."""

    def test_run_trace_heads_check(self, decoder: DecoderReference) -> None:
        """run's last layer equals transformers' (float32); trace, the model view and check exit 0 on it."""
        last = model_args(decoder, "2")
        data = json.loads(invoke("run", *last, "-f", "json", "--dtype", "float32").stdout)
        assert np.abs(np.array(data["weights"]) - decoder.attentions["float32"][2]).max() <= 1e-5
        trace = json.loads(invoke("trace", *last, "--query", "4", "-f", "json").stdout)
        assert trace["query"] == 4 and trace["rope"] is not None and "q_before_rope" in trace["heads"][0]
        view = json.loads(invoke("heads", *model_args(decoder, "all"), "-f", "json").stdout)
        assert len(view["layers"]) == 3
        invoke("check", *last)
