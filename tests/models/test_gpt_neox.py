"""GPT-NeoX (Pythia): what it differs in matters, Pythia's own config keys, its buffers and refusals, the commands.

``TestAgreement`` (test_decoders.py) compares the two variants (``gpt_neox``: parallel residual, rotary_pct 0.25,
biases, embed_out; ``gpt_neox_sequential``: sequential, rotary_pct 0.5, no biases, tied, float16) with
transformers layer by layer; here each difference is shown to move the weights or hidden states, so that the
agreement tests really exercise it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.core.positions import Rotary
from attnx.core.spec import Linear
from attnx.engines import compute
from attnx.engines.placement import Placement
from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.families.gpt_neox import GptNeox
from attnx.workflows import load_model_spec
from tests.cli.test_model import invoke
from tests.models.checkpoints import TEXT
from tests.models.decoders import DecoderReference, built, float64_everywhere
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import assert_close, forward
from tests.models.test_families import add_tensor, copy_of


@pytest.fixture(scope="module")
def neox(tmp_path_factory: pytest.TempPathFactory) -> DecoderReference:
    """The Pythia-like variant: 2 heads of 16, RoPE on 0.25 of each (θ 500), parallel residual, biases, embed_out."""
    return built("gpt_neox", tmp_path_factory)


def moved(path: Path, reference: DecoderReference) -> tuple[float, float]:
    """The largest difference from transformers' float64 weights and hidden states, over every layer."""
    weights, hidden = forward(path, "float64")
    return (
        max(float(np.abs(a - b).max()) for a, b in zip(weights, reference.attentions["float64"], strict=True)),
        max(float(np.abs(a - b).max()) for a, b in zip(hidden, reference.hidden["float64"], strict=True)),
    )


class TestEachDifferenceMatters:
    """Read otherwise, each difference moves what attnx computes away from transformers."""

    def test_the_per_head_layout(self, neox: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """query_key_value read as [q; k; v] rows (Phi-3's layout) instead of [head, (q, k, v), d]: off."""

        def stacked(self: GptNeox, layer: int) -> tuple[Linear, Linear, Linear, Linear]:
            p, d = self.attention_prefix(layer), self.d_model
            w_q, w_k, w_v = self.fused(p + "query_key_value", (d, d, d), d)
            return w_q, w_k, w_v, self.linear(p + "dense", d, d)

        monkeypatch.setattr(GptNeox, "projections", stacked)
        spec = load_model_spec(neox.path, TEXT, 0, on=Placement(dtype="float64"))
        weights = compute(spec, "numpy", dtype="float64").weights
        assert np.abs(weights - neox.attentions["float64"][0]).max() > 1e-3

    @pytest.mark.parametrize(
        ("variant", "changes", "what"),
        [
            ("gpt_neox", {"use_parallel_residual": False}, "hidden"),
            ("gpt_neox_sequential", {"use_parallel_residual": True}, "hidden"),
            ("gpt_neox", {"rope_parameters": {"rope_theta": 500.0, "partial_rotary_factor": 1.0}}, "weights"),
            ("gpt_neox", {"layer_norm_eps": 0.5}, "hidden"),
        ],
    )
    def test_config_keys(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, variant: str, changes: Any, what: str
    ) -> None:
        """The residual form either way, the rotary fraction and LayerNorm's eps are read: changed, they move."""
        reference = built(variant, tmp_path_factory)
        path = copy_of(reference, tmp_path)
        edit_config(path, **changes)
        weights, hidden = moved(path, reference)
        assert (hidden if what == "hidden" else weights) > 1e-3


class TestPythiaConfig:
    """Pythia's config.json (transformers 4) names the rope settings ``rotary_pct`` and ``rotary_emb_base``."""

    @pytest.mark.parametrize(
        "flat", [{"rotary_pct": 0.25, "rotary_emb_base": 500}, {"rotary_emb_base": 500.0}], ids=["both", "no-pct"]
    )
    def test_flat_keys(self, neox: DecoderReference, tmp_path: Path, flat: dict[str, float]) -> None:
        """Without rope_parameters: the same model, every layer to float64 rounding; rotary_pct absent is 0.25, as
        transformers reads it."""
        import transformers

        path = copy_of(neox, tmp_path)
        edit_config(path, rope_parameters=None, **flat)
        assert transformers.AutoConfig.from_pretrained(path).rope_parameters["partial_rotary_factor"] == 0.25
        info = describe(path)
        assert info.rotary == Rotary(theta=500.0, pairs="half", fraction=0.25)
        weights, hidden = moved(path, neox)
        assert weights <= 1e-10 and hidden <= 1e-10

    def test_old_buffers_are_let_through(self, neox: DecoderReference, tmp_path: Path) -> None:
        """Older files keep each layer's causal mask (attention.bias, masked_bias) and rotary cache: unread, allowed."""
        path = copy_of(neox, tmp_path)
        for name in ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"):
            add_tensor(path, f"gpt_neox.layers.1.{name}", "gpt_neox.layers.1.attention.dense.bias")
        weights, hidden = forward(path, "float64")
        assert_close(weights[1], neox.attentions["float64"][1], "float64")
        assert_close(hidden[2], neox.hidden["float64"][2], "float64")

    def test_a_tensor_it_does_not_read(self, neox: DecoderReference, tmp_path: Path) -> None:
        """A tensor beside the ones GPT-NeoX reads is refused, named."""
        path = copy_of(neox, tmp_path)
        add_tensor(path, "gpt_neox.layers.0.attention.query_key_value.scale", "gpt_neox.layers.0.attention.dense.bias")
        with pytest.raises(ModelError, match=r"'gpt_neox.layers.0.attention.query_key_value.scale' is not used by "
                                             r"gpt_neox \(GPT-NeoX\)"):  # fmt: skip
            open_model(path)

    @pytest.mark.parametrize("changes", [{"head_dim": 8}, {"num_key_value_heads": 1}])
    def test_sizes_it_does_not_read(self, neox: DecoderReference, tmp_path: Path, changes: dict[str, int]) -> None:
        """head_dim and num_key_value_heads, which transformers' GPT-NeoX ignores, are refused where they differ."""
        path = copy_of(neox, tmp_path)
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=r"is not read by gpt_neox \(GPT-NeoX\): each of its 2 heads is 16 wide"):
            open_model(path)


class TestDescribe:
    """What ``describe`` reads from the two variants."""

    def test_facts(self, neox: DecoderReference, tmp_path_factory: pytest.TempPathFactory) -> None:
        """Family, plain MLP, activation, tied or untied, the rotary fraction and the layer spec's biases (the
        sequential variant: 4 heads of 8, RoPE on half of each, no biases, tied embeddings, float16)."""
        sequential = built("gpt_neox_sequential", tmp_path_factory)
        info = describe(neox.path)
        assert (info.family, info.heads, info.kv_heads, info.head_dim, info.gated) == ("GPT-NeoX", 2, 2, 16, False)
        assert (info.activation, info.tied_embeddings, info.dtypes) == ("gelu", False, ("F32",))
        other = describe(sequential.path)
        assert (other.activation, other.tied_embeddings, other.dtypes) == ("gelu_new", True, ("F16",))
        assert other.rotary == Rotary(theta=10000.0, pairs="half", fraction=0.5)
        spec = load_model_spec(neox.path, TEXT, 1)
        assert spec.inputs.w_q.bias is not None and spec.w_o is not None and spec.w_o.bias is not None
        assert load_model_spec(sequential.path, TEXT, 1).inputs.w_q.bias is None


class TestAblate:
    """Dropping heads equals transformers with those heads zeroed before ``attention.dense``: the parallel residual,
    the final LayerNorm and the untied embed_out."""

    def test_against_transformers(self, neox: DecoderReference) -> None:
        import torch
        import transformers

        from tests.analysis.test_effects import expected, found_effects, zeroed

        model = transformers.AutoModelForCausalLM.from_pretrained(neox.path, attn_implementation="eager",
                                                                  dtype=torch.float64).eval()  # fmt: skip

        def run() -> tuple[np.ndarray, np.ndarray]:
            with float64_everywhere(), torch.no_grad():
                out = model(torch.tensor([neox.ids]), output_hidden_states=True)
            return out.hidden_states[-1][0].numpy(), torch.log_softmax(out.logits[0], -1).numpy()

        with float64_everywhere():
            model.gpt_neox.rotary_emb = type(model.gpt_neox.rotary_emb)(model.config)

        def zero(drop: dict[int, tuple[int, ...]]) -> Any:
            return zeroed(lambda layer: model.gpt_neox.layers[layer].attention.dense, drop, 16)

        sets = [{1: (1,)}, {0: (0,), 2: (1,)}]
        found = found_effects(neox.path, neox.ids, sets)
        assert found.lm_head
        for effect, drop in zip(found.effects, sets, strict=True):
            shift, kl = expected(run, zero, drop)
            assert float(np.min(shift)) > 0.0
            np.testing.assert_allclose(effect.shift, shift, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(effect.kl, kl, rtol=1e-7, atol=1e-12)


class TestCommands:
    """model, run, trace, heads --layer all, ablate, detect and rollout on a GPT-NeoX folder."""

    def test_model_table(self, neox: DecoderReference) -> None:
        out = invoke("model", neox.path).stdout
        assert "GPT-NeoX (pre-LayerNorm causal decoder)" in out and "gpt_neox (GPTNeoXForCausalLM)" in out
        assert "RoPE θ 500 (half pairs, 0.25 of d_k)" in out and "2 × d_k 16" in out and "untied" in out

    def test_commands(self, neox: DecoderReference) -> None:
        """run's weights are transformers'; trace splits each score by the rotary pairs of the turned quarter."""
        args = ["--model", str(neox.path), "--text", TEXT]
        data = json.loads(invoke("run", *args, "--layer", "1", "-f", "json").stdout)
        assert np.abs(np.array(data["weights"]) - neox.attentions["float64"][1]).max() <= 1e-10
        trace = json.loads(invoke("trace", *args, "--layer", "2", "--query", "5", "--head", "1", "-f", "json").stdout)
        assert trace["rope"]["fraction"] == 0.25 and "q_before_rope" in trace["heads"][0]
        view = json.loads(invoke("heads", *args, "--layer", "all", "-f", "json").stdout)
        assert [len(layer["heads"]) for layer in view["layers"]] == [2, 2, 2]
        assert "largest effects" in invoke("ablate", *args).stdout
        assert "L2" in invoke("detect", "--model", str(neox.path), "--samples", "2", "--length", "6").stdout
        assert "after all 3 layers" in invoke("rollout", *args, "--token", "tired").stdout
