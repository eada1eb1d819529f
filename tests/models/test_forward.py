"""BERT and GPT-2 against transformers: every layer's weights, the forward pass, and overrides on a layer."""

from __future__ import annotations

import numpy as np
import pytest

from attnx.core.overrides import SettingOverrides
from attnx.engines import compute
from attnx.engines.placement import Placement
from attnx.models import open_model
from attnx.models.checkpoint import Checkpoint
from attnx.workflows import layer_results, load_model_spec
from tests.models.checkpoints import TEXT, Reference

TOLERANCE = 1e-5  # float32 against transformers' float32, as the issue asks


class TestAgreementWithTransformers:
    def test_every_layer_and_head_float32(self, checkpoint: Reference, engine: str) -> None:
        """Each layer's weights, every head, equal transformers' output_attentions within 1e-5 in float32."""
        with open_model(checkpoint.path, "float32") as model:
            results = list(layer_results(model, TEXT, on=Placement(engine)))
        assert len(results) == len(checkpoint.attentions) == 3
        for result, expected in zip(results, checkpoint.attentions, strict=True):
            assert result.weights.dtype == np.float32 and result.weights.shape == expected.shape
            assert np.abs(result.weights - expected).max() <= TOLERANCE

    def test_every_layer_float64(self, checkpoint: Reference, engine: str) -> None:
        """In float64 the weights are as close to transformers' float32 ones (the difference is float32's)."""
        with open_model(checkpoint.path, "float64") as model:
            results = list(layer_results(model, TEXT, on=Placement(engine)))
        for result, expected in zip(results, checkpoint.attentions, strict=True):
            assert result.weights.dtype == np.float64
            assert np.abs(result.weights - expected).max() <= TOLERANCE

    @pytest.mark.parametrize("layer", [0, 1, 2])
    def test_spec_is_the_layer_input(self, checkpoint: Reference, engine: str, layer: int) -> None:
        """load_model_spec's x is the attention's input (BERT: the hidden state; GPT-2: ln_1 of it) and reruns to the same weights."""
        spec = load_model_spec(checkpoint.path, TEXT, layer, on=Placement(engine, dtype="float32"))
        assert np.abs(spec.inputs.x - checkpoint.x[layer]).max() <= TOLERANCE
        result = compute(spec, engine, dtype="float32")
        assert np.abs(result.weights - checkpoint.attentions[layer]).max() <= TOLERANCE
        family = "gpt2" if "gpt2" in checkpoint.path.name else "bert"
        assert spec.source == f"{checkpoint.path} ({family}), layer {layer} of 3"


class TestTorchForwardPass:
    def test_the_pass_runs_on_torch(self, checkpoint: Reference) -> None:
        """On the torch engine the stream is a torch tensor between layers, and every layer's stream and the last
        hidden state equal the NumPy engine's to 1e-10 in float64 (LayerNorms, GELU with torch's erf, the MLP)."""
        torch = pytest.importorskip("torch")
        streams: dict[str, list[np.ndarray]] = {}
        with open_model(checkpoint.path, "float64") as model:
            for engine in ("numpy", "torch"):
                run = model.run(TEXT, on=Placement(engine), layer=model.layers - 1)
                streams[engine] = [run.stream()]
                for _ in range(model.layers):
                    run.step()
                    streams[engine].append(run.stream())
                streams[engine].append(run.finish())
                assert isinstance(run.current(), torch.Tensor) == (engine == "torch")
        for ours, theirs in zip(streams["torch"], streams["numpy"], strict=True):
            assert ours.dtype == np.float64 and np.abs(ours - theirs).max() <= 1e-10 * max(1, np.abs(theirs).max())


class TestSpecs:
    def test_bert_spec(self, bert: Reference) -> None:
        """A BERT layer: special tokens kept, no padding although tokenizer.json asks for it, no mask, W_o and biases."""
        spec = load_model_spec(bert.path, TEXT, 1)
        assert spec.tokens == ("[CLS]", *TEXT.split(), "[SEP]") == spec.key_tokens
        assert spec.n_queries == 12 and spec.settings.heads == 4 and spec.d_k == 8
        assert not spec.settings.causal and spec.mask is None and spec.settings.scale == "sqrt_dk"
        with Checkpoint(bert.path) as ckpt:
            ckpt.prefix = "bert."
            np.testing.assert_array_equal(
                spec.inputs.w_q.weight, ckpt.tensor("encoder.layer.1.attention.self.query.weight").T
            )
            np.testing.assert_array_equal(spec.w_o.bias, ckpt.tensor("encoder.layer.1.attention.output.dense.bias"))
        assert spec.parameters == 4 * (32 * 32 + 32)

    def test_gpt2_spec(self, gpt2: Reference) -> None:
        """A GPT-2 layer: causal, the thirds of c_attn as W_q/W_k/W_v, c_proj as W_o."""
        spec = load_model_spec(gpt2.path, TEXT, 2)
        assert spec.settings.causal and spec.settings.scale == "sqrt_dk" and len(spec.tokens) == len(gpt2.ids)
        with Checkpoint(gpt2.path) as ckpt:
            ckpt.prefix = "transformer."
            weight, bias = ckpt.tensor("h.2.attn.c_attn.weight"), ckpt.tensor("h.2.attn.c_attn.bias")
            np.testing.assert_array_equal(spec.inputs.w_k.weight, weight[:, 32:64])
            np.testing.assert_array_equal(spec.inputs.w_v.bias, bias[64:])
            np.testing.assert_array_equal(spec.w_o.weight, ckpt.tensor("h.2.attn.c_proj.weight"))

    def test_inverse_layer_scale(self, gpt2_variant: Reference) -> None:
        """scale_attn_by_inverse_layer_idx: layer 2's multiplier is 1/√d_k / 3 (1/(layer + 1))."""
        spec = load_model_spec(gpt2_variant.path, TEXT, 2)
        assert spec.multiplier == pytest.approx(1 / np.sqrt(8) / 3, rel=1e-15)

    def test_overrides_apply_to_the_layer(self, bert: Reference) -> None:
        """Heads, scale and dropped heads (counted from 0) from the command line change the handed-out layer only."""
        plain = load_model_spec(bert.path, TEXT, 2)
        changed = SettingOverrides(heads=2, scale="none", dropped_heads=(1,)).apply(load_model_spec(bert.path, TEXT, 2))
        np.testing.assert_array_equal(changed.inputs.x, plain.inputs.x)
        assert (changed.settings.heads, changed.settings.scale, changed.settings.dropped_heads) == (2, "none", (1,))


class TestLaziness:
    def test_only_the_layers_needed_are_read(self, bert: Reference, monkeypatch: pytest.MonkeyPatch) -> None:
        """Layer 1's spec reads layer 0 whole, layer 1's attention only, nothing of layer 2, and the used embedding rows."""
        read: list[str] = []
        original_slice = Checkpoint._slice

        def spy(self: Checkpoint, name: str, *alternatives: str, **options):
            read.append(name)
            return original_slice(self, name, *alternatives, **options)

        monkeypatch.setattr(Checkpoint, "_slice", spy)
        load_model_spec(bert.path, TEXT, 1)
        assert not [name for name in read if name.startswith("encoder.layer.2.")]
        assert {n for n in read if n.startswith("encoder.layer.1.")} == {
            f"encoder.layer.1.attention.{part}.{kind}"
            for part in ("self.query", "self.key", "self.value", "output.dense")
            for kind in ("weight", "bias")
        }
        assert "encoder.layer.0.output.LayerNorm.weight" in read and "cls.predictions.bias" not in read

    def test_progress_counts_layers(self, gpt2: Reference) -> None:
        """The progress callback hears each layer run before the one asked for."""
        heard: list[tuple[int, int]] = []
        load_model_spec(gpt2.path, TEXT, 2, progress=lambda done, total: heard.append((done, total)))
        assert heard == [(1, 2), (2, 2)]


class TestUntiedOutputLayer:
    """A GPT-2 saved with ``tie_word_embeddings: false`` predicts through its own ``lm_head``, not ``wte``."""

    def test_logits_equal_transformers(self, tmp_path) -> None:
        """The next-token logits equal GPT2LMHeadModel's within 1e-5 (float32); wte's would be far off."""
        torch = pytest.importorskip("torch")
        transformers = pytest.importorskip("transformers")
        from tests.models.checkpoints import build_gpt2

        ref = build_gpt2(tmp_path, tie_word_embeddings=False)
        model = transformers.GPT2LMHeadModel.from_pretrained(ref.path, attn_implementation="eager").eval()
        assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
        with torch.no_grad():
            theirs = model(torch.tensor([ref.ids])).logits[0].numpy()
        with open_model(ref.path, "float32") as ours:
            hidden = ours.run(TEXT, layer=ours.layers - 1).finish()
            logits = ours.architecture.logits(hidden)
            through_wte = hidden @ ours.architecture.weight("wte.weight").T
        bound = TOLERANCE * max(1.0, float(np.abs(theirs).max()))
        assert np.abs(logits - theirs).max() <= bound < np.abs(through_wte - theirs).max()
