"""Checkpoint folders: what describe() reads, and the one-line errors for missing or wrong files and settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.errors import ModelError
from attnx.models import ARCHITECTURES, describe, open_model
from attnx.workflows import layer_results, load_model_spec
from tests.models.checkpoints import TEXT, Reference, build_bert


def copy_of(reference: Reference, tmp_path: Path) -> Path:
    """A writable copy of a checkpoint folder."""
    return Path(shutil.copytree(reference.path, tmp_path / reference.path.name))


def edit_config(path: Path, **changes: object) -> None:
    """Change keys of config.json (None removes one)."""
    config = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (path / "config.json").write_text(json.dumps(config))


class TestDescribe:
    def test_bert_facts(self, bert: Reference) -> None:
        """describe() reads the family, sizes, parameters and the tokenizer's stored settings."""
        import torch
        from safetensors.torch import load_file

        info = describe(bert.path)
        assert (info.architecture, info.family, info.design) == ("bert", "BERT", "post-LayerNorm encoder")
        assert (info.layers, info.heads, info.d_model, info.head_dim, info.d_ff) == (3, 4, 32, 8, 64)
        assert (info.vocab_size, info.max_length, info.activation, info.causal) == (19, 16, "gelu", False)
        assert info.architectures == ("BertForMaskedLM",) and info.dtypes == ("F32",)
        stored = load_file(str(bert.path / "model.safetensors"))
        assert info.parameters == sum(t.numel() for t in stored.values() if t.dtype == torch.float32)
        assert info.tokenizer == "WordLevel" and info.tokenizer_vocab_size == 19
        assert info.tokenizer_settings == ("pads every input to 24 tokens", "truncates inputs to 6 tokens")

    def test_gpt2_facts(self, gpt2: Reference) -> None:
        """A GPT-2 is a causal pre-LayerNorm decoder with gelu_new and n_positions as its maximum length."""
        info = describe(gpt2.path)
        assert (info.architecture, info.design, info.causal) == ("gpt2", "pre-LayerNorm causal decoder", True)
        assert (info.layers, info.heads, info.d_model, info.max_length, info.activation) == (3, 4, 32, 16, "gelu_new")
        assert info.tokenizer == "BPE" and info.tokenizer_settings == ()


class TestErrors:
    @pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
    def test_missing_file_is_named(self, bert: Reference, tmp_path: Path, name: str) -> None:
        """A missing file is a ModelError naming that file."""
        path = copy_of(bert, tmp_path)
        (path / name).unlink()
        with pytest.raises(ModelError, match=rf"{name}: missing"):
            describe(path)

    def test_sharded_or_pickled_weights_get_a_hint(self, bert: Reference, tmp_path: Path) -> None:
        """Without model.safetensors, a pytorch_model.bin beside it gets a hint about re-saving."""
        path = copy_of(bert, tmp_path)
        (path / "model.safetensors").rename(path / "pytorch_model.bin")
        with pytest.raises(ModelError, match="attnx reads safetensors only"):
            describe(path)

    def test_not_a_folder(self, tmp_path: Path) -> None:
        """A path that is no folder says what a checkpoint folder holds."""
        with pytest.raises(ModelError, match=r"no such folder; a checkpoint folder holds config\.json"):
            describe(tmp_path / "nowhere")

    def test_unsupported_architecture(self, bert: Reference, tmp_path: Path) -> None:
        """An unknown model_type is refused, naming what is supported."""
        path = copy_of(bert, tmp_path)
        edit_config(path, model_type="falcon", architectures=["FalconForCausalLM"])
        supported = ", ".join(ARCHITECTURES)
        assert {"gpt_neox", "phi3", "gemma3_text", "smollm3", "gemma2"} <= set(ARCHITECTURES)
        with pytest.raises(ModelError, match=rf"model_type 'falcon' is not supported; attnx runs {supported}$"):
            describe(path)

    def test_architecture_from_class_names(self, bert: Reference, tmp_path: Path) -> None:
        """Without model_type, config.json's architectures name the family."""
        path = copy_of(bert, tmp_path)
        edit_config(path, model_type=None)
        assert describe(path).architecture == "bert"

    def test_bad_config_json(self, bert: Reference, tmp_path: Path) -> None:
        """config.json that is not JSON is reported with its line and column."""
        path = copy_of(bert, tmp_path)
        (path / "config.json").write_text('{\n  "model_type": bert\n}')
        with pytest.raises(ModelError, match=r"config.json:2:17: not valid JSON"):
            describe(path)

    def test_unsupported_settings(self, bert: Reference, tmp_path: Path) -> None:
        """Relative positions and unknown activations are refused by name."""
        path = copy_of(bert, tmp_path)
        edit_config(path, position_embedding_type="relative_key")
        with pytest.raises(ModelError, match="position_embedding_type 'relative_key' is not supported"):
            describe(path)
        edit_config(path, position_embedding_type="absolute", hidden_act="swish")
        with pytest.raises(ModelError, match="hidden_act 'swish' is not supported; supported: gelu, gelu_new"):
            describe(path)

    def test_too_long_text(self, bert: Reference) -> None:
        """A text longer than max_position_embeddings is an error, not truncated."""
        with pytest.raises(ModelError, match=r"the text is 17 tokens long .* reads at most 16"):
            load_model_spec(bert.path, " ".join(["cat"] * 15), 0)

    def test_empty_text(self, gpt2: Reference) -> None:
        """A text with no tokens (GPT-2 adds no special tokens) is refused, not run."""
        with pytest.raises(ModelError, match="the text gives no tokens"):
            load_model_spec(gpt2.path, "", 0)

    def test_layer_out_of_range(self, bert: Reference) -> None:
        """Layers count from 0, -1 the last: the message gives the range both ways."""
        for layer in (3, -4):
            with pytest.raises(
                ModelError, match=rf"layer {layer} does not exist: the model has layers 0\.\.2 \(or -3\.\.-1\)$"
            ):
                load_model_spec(bert.path, TEXT, layer)

    def test_layer_from_the_end(self, bert: Reference) -> None:
        """Layer -1 is the last and -3 the first: the spec names the layer counted from 0."""
        assert load_model_spec(bert.path, TEXT, -1).source.endswith("layer 2 of 3")
        assert load_model_spec(bert.path, TEXT, -3).source.endswith("layer 0 of 3")

    def test_missing_tensor(self, bert: Reference, tmp_path: Path) -> None:
        """A tensor the layer needs but the file lacks is named."""
        from safetensors.numpy import load_file, save_file

        path = copy_of(bert, tmp_path)
        tensors = load_file(str(path / "model.safetensors"))
        del tensors["bert.encoder.layer.1.attention.self.key.bias"]
        save_file(tensors, str(path / "model.safetensors"))
        load_model_spec(path, TEXT, 0)  # layer 0 needs nothing of layer 1
        with pytest.raises(ModelError, match=r"missing tensor 'bert.encoder.layer.1.attention.self.key.bias'"):
            load_model_spec(path, TEXT, 1)

    def test_wrong_family_weights(self, bert: Reference, gpt2: Reference, tmp_path: Path) -> None:
        """A BERT config over GPT-2 weights says the weights are not a BERT checkpoint."""
        path = copy_of(gpt2, tmp_path)
        shutil.copy(bert.path / "config.json", path / "config.json")
        with pytest.raises(
            ModelError, match=r"no tensor 'bert\.embeddings\.word_embeddings\.weight' or .*: not a BERT"
        ):
            describe(path)


class TestHalfPrecision:
    @pytest.mark.parametrize(("dtype", "stored"), [("float16", "F16"), ("bfloat16", "BF16")])
    def test_half_precision_weights(self, tmp_path: Path, dtype: str, stored: str) -> None:
        """float16 and bfloat16 weights (NumPy has no bfloat16: widened by hand) match transformers in float32."""
        reference = build_bert(tmp_path / dtype, prefixed=False, dtype=dtype)
        assert describe(reference.path).dtypes == (stored,)
        with open_model(reference.path, "float32") as model:
            results = list(layer_results(model, TEXT))
        for result, expected in zip(results, reference.attentions, strict=True):
            assert np.abs(result.weights - expected).max() <= 1e-5
