"""Llama-style decoders against transformers: every family's weights and hidden states, layer by layer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.core.inputs import ProjectedInputs
from attnx.core.positions import RopeScaling, Rotary
from attnx.engines.placement import Placement
from attnx.errors import EngineUnavailableError, ModelError
from attnx.models import describe, open_model
from attnx.workflows import load_model_spec
from tests.models.checkpoints import TEXT
from tests.models.decoders import VARIANTS, DecoderReference, built

TOLERANCES = {"float32": 1e-5, "float64": 1e-10}  # as the issue asks


def forward(path: Path, dtype: str, engine: str = "numpy") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """attnx's weights ``[head, query, key]`` and output hidden state ``[query, d_model]`` for every layer."""
    weights, hidden = [], []
    with open_model(path, dtype) as model:
        run = model.run(TEXT, on=Placement(engine), layer=model.layers - 1)
        for _ in range(model.layers):
            weights.append(run.step({"weights"}).weights)
            hidden.append(run.stream())
    return weights, hidden


def assert_close(ours: np.ndarray, theirs: np.ndarray, dtype: str) -> None:
    """Within the dtype's tolerance, scaled by the reference's magnitude where it exceeds 1."""
    assert ours.shape == theirs.shape
    bound = TOLERANCES[dtype] * max(1.0, float(np.abs(theirs).max()))
    assert np.abs(ours - theirs).max() <= bound


class TestAgreement:
    """Each family equals transformers (eager attention) layer by layer, in float32 and all-float64."""

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_weights_and_hidden_states(self, decoder: DecoderReference, dtype: str) -> None:
        """Every layer's weights (every head) and output hidden state: 1e-5 in float32, 1e-10 in float64."""
        weights, hidden = forward(decoder.path, dtype)
        assert len(weights) == len(decoder.attentions[dtype]) == 3
        for ours, theirs in zip(weights, decoder.attentions[dtype], strict=True):
            assert ours.dtype == np.dtype(dtype)
            assert_close(ours, theirs, dtype)
        for ours, theirs in zip(hidden, decoder.hidden[dtype], strict=True):
            assert_close(ours, theirs, dtype)

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_torch_engine(self, decoder: DecoderReference, dtype: str) -> None:
        """The torch engine runs the whole forward pass (norms, MLPs, experts and residuals on torch too) to the same
        weights and hidden states as transformers, layer by layer: 1e-5 in float32, 1e-10 in float64."""
        pytest.importorskip("torch")
        weights, hidden = forward(decoder.path, dtype, engine="torch")
        for ours, theirs in zip(weights, decoder.attentions[dtype], strict=True):
            assert_close(ours, theirs, dtype)
        for ours, theirs in zip(hidden, decoder.hidden[dtype], strict=True):
            assert_close(ours, theirs, dtype)

    @pytest.mark.parametrize(("dtype", "bound"), [("bfloat16", 0.05), ("float16", 0.01)])
    def test_half_types_on_torch(self, llama: DecoderReference, dtype: str, bound: float) -> None:
        """On torch a model runs in bfloat16 or float16 (its stream a tensor of that dtype; results widened to
        float32), within a few of the dtype's epsilons of the float64 pass; the NumPy engine refuses them."""
        torch = pytest.importorskip("torch")
        with open_model(llama.path, dtype) as model:
            run = model.run(TEXT, on=Placement("torch"), layer=model.layers - 1)
            results = [run.step({"weights"}) for _ in range(model.layers)]
            assert run.current().dtype == getattr(torch, dtype)
            hidden = run.finish()
        assert {r.dtype for r in results} == {dtype} and {r.weights.dtype for r in results} == {np.dtype(np.float32)}
        weights = forward(llama.path, "float64")[0]
        for ours, theirs in zip(results, weights, strict=True):
            assert 0 < np.abs(ours.weights - theirs).max() <= bound
        with open_model(llama.path, "float64") as model:
            final = model.run(TEXT, layer=model.layers - 1).finish()
        assert 0 < np.abs(hidden - final).max() <= bound * np.abs(final).max()
        with pytest.raises(EngineUnavailableError, match=f"numpy on cpu does not support {dtype}"):
            load_model_spec(llama.path, TEXT, 0, on=Placement(dtype=dtype))

    @pytest.mark.parametrize(("dtype", "bound"), [("float32", 1e-5), ("bfloat16", 0.05)])
    def test_on_cuda(self, llama: DecoderReference, dtype: str, bound: float) -> None:
        """On a CUDA device the whole pass runs there, its stream a CUDA tensor, to the CPU's float64 weights."""
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device on this machine")
        with open_model(llama.path, dtype) as model:
            run = model.run(TEXT, on=Placement("torch", "cuda"), layer=model.layers - 1)
            results = [run.step({"weights"}) for _ in range(model.layers)]
            assert run.current().device.type == "cuda" and results[-1].device.startswith("cuda")
        for ours, theirs in zip(results, forward(llama.path, "float64")[0], strict=True):
            assert np.abs(ours.weights - theirs).max() <= bound

    @pytest.mark.parametrize(("name", "layer"), [("mistral", 0), ("qwen2", 1), ("gemma2", 0), ("gemma2", 1)])
    def test_windows_and_caps_matter(self, tmp_path_factory: pytest.TempPathFactory, name: str, layer: int) -> None:
        """The windows and caps these tests check are short enough to matter: without them the weights differ."""
        from attnx.engines import compute

        reference = built(name, tmp_path_factory)
        spec = load_model_spec(reference.path, TEXT, layer, on=Placement(dtype="float64"))
        assert spec.settings.window is not None or spec.settings.softcap is not None
        plain = compute(spec.with_settings(window=None, softcap=None), "numpy", dtype="float64")
        assert np.abs(plain.weights - reference.attentions["float64"][layer]).max() > 1e-3


class TestSpecs:
    """What each family's layer spec holds, read from config.json."""

    def test_llama(self, llama: DecoderReference) -> None:
        """GQA 4/2, d_k 16, llama3-scaled RoPE, biases on q/k/v/o, causal, no window."""
        spec = load_model_spec(llama.path, TEXT, 1)
        s = spec.settings
        assert (s.heads, s.kv_heads, spec.d_k, s.causal, s.window, s.softcap) == (4, 2, 16, True, None, None)
        scaling = RopeScaling("llama3", 8.0, 1.0, 4.0, 32)
        assert s.rotary == Rotary(theta=500.0, pairs="half", fraction=1.0, scaling=scaling)
        assert spec.inputs.w_q.bias is not None and spec.w_o is not None and spec.w_o.bias is not None
        assert spec.source == f"{llama.path} (llama), layer 1 of 3"

    def test_gemma2(self, gemma2: DecoderReference) -> None:
        """Sliding layers alternate from layer 0; scores scaled by 24^-½ and capped at 2."""
        windows = [load_model_spec(gemma2.path, TEXT, layer).settings.window for layer in range(3)]
        assert windows == [4, None, 4]
        spec = load_model_spec(gemma2.path, TEXT, 1)
        assert spec.multiplier == pytest.approx(24**-0.5, rel=1e-15) and spec.settings.softcap == 2.0

    def test_qwen3_head_norms(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """Qwen 3 hands each layer's q_norm and k_norm (d_k 12) to the spec."""
        qwen3 = built("qwen3", tmp_path_factory)
        spec = load_model_spec(qwen3.path, TEXT, 2)
        inputs = spec.inputs
        assert isinstance(inputs, ProjectedInputs) and inputs.q_norm is not None and inputs.k_norm is not None
        assert inputs.q_norm.weight.shape == (12,) and inputs.q_norm.eps == pytest.approx(1e-6)

    def test_qwen2_windows_from_max_window_layers(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """use_sliding_window with max_window_layers 1: layers 1 and 2 slide (window 4), layer 0 does not."""
        qwen2 = built("qwen2", tmp_path_factory)
        assert [load_model_spec(qwen2.path, TEXT, i).settings.window for i in range(3)] == [None, 4, 4]

    def test_sentencepiece_labels(self, llama: DecoderReference) -> None:
        """``▁cat`` is labelled `` cat``; the ``<s>`` the tokenizer adds stays as it is."""
        spec = load_model_spec(llama.path, TEXT, 0)
        assert spec.tokens[0] == "<s>" and spec.tokens[1:3] == (" the", " cat")
        assert len(spec.tokens) == len(llama.ids)


class TestDescribe:
    """``describe`` says what a decoder is made of."""

    def test_llama_facts(self, llama: DecoderReference) -> None:
        """K/V heads, head_dim, rotary settings, untied embeddings, shards."""
        info = describe(llama.path)
        assert (info.family, info.heads, info.kv_heads, info.head_dim, info.d_ff) == ("Llama", 4, 2, 16, 48)
        assert info.rotary is not None and info.rotary.scaling is not None and info.rotary.theta == 500.0
        assert info.tied_embeddings is False and info.gated and info.activation == "silu"
        assert info.weight_files > 1 and info.windows == (None, None, None)

    def test_stored_dtypes_and_windows(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """bfloat16 and float16 files say so; Mistral's window covers every layer; its embeddings are tied."""
        mistral = describe(built("mistral", tmp_path_factory).path)
        assert mistral.dtypes == ("BF16",) and mistral.windows == (3, 3, 3) and mistral.kv_heads == 1
        assert mistral.tied_embeddings is True
        assert describe(built("qwen2", tmp_path_factory).path).dtypes == ("F16",)

    def test_parameters_match_transformers(self, decoder: DecoderReference) -> None:
        """The learned parameters counted from the headers equal the model's, less a tied output layer."""
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(decoder.path)
        expected = sum(p.numel() for p in model.parameters())  # tied weights are counted once
        assert describe(decoder.path).parameters == expected


class TestShards:
    """A sharded checkpoint opens only when its index and shards agree."""

    def copy(self, llama: DecoderReference, tmp_path: Path) -> Path:
        return Path(shutil.copytree(llama.path, tmp_path / "llama"))

    def test_missing_shard(self, llama: DecoderReference, tmp_path: Path) -> None:
        """A shard the index names but the folder lacks is one line naming it and how many tensors it holds."""
        path = self.copy(llama, tmp_path)
        shard = sorted(path.glob("model-*.safetensors"))[-1]
        shard.unlink()
        with pytest.raises(ModelError, match=rf"{shard.name}: missing: the index places \d+ tensors in it$"):
            open_model(path)

    def test_shard_without_a_tensor_the_index_places_there(self, llama: DecoderReference, tmp_path: Path) -> None:
        """An index that puts a tensor in the wrong shard is refused when that shard is opened."""
        path = self.copy(llama, tmp_path)
        index = json.loads((path / "model.safetensors.index.json").read_text())
        name = "model.layers.0.self_attn.q_proj.weight"
        index["weight_map"][name] = next(s for s in index["weight_map"].values() if s != index["weight_map"][name])
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ModelError, match=rf"lacks tensor '{name}'.*which model.safetensors.index.json places"):
            load_model_spec(path, TEXT, 0)

    @pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/dir.safetensors", 7])
    def test_shard_names_stay_in_the_folder(self, llama: DecoderReference, tmp_path: Path, shard: object) -> None:
        """A shard named by a path, or not by a string, is refused: the index cannot point outside the folder."""
        path = self.copy(llama, tmp_path)
        index = json.loads((path / "model.safetensors.index.json").read_text())
        index["weight_map"]["model.norm.weight"] = shard
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ModelError, match="which is not a file name"):
            open_model(path)


class TestConfigErrors:
    """Settings attnx cannot run are refused in one line."""

    def edit(self, llama: DecoderReference, tmp_path: Path, **changes: object) -> Path:
        path = Path(shutil.copytree(llama.path, tmp_path / "llama"))
        config = json.loads((path / "config.json").read_text()) | changes
        (path / "config.json").write_text(json.dumps(config))
        return path

    def test_unknown_rope_type(self, llama: DecoderReference, tmp_path: Path) -> None:
        """A rope_type attnx does not know is refused, naming it and the types attnx runs."""
        path = self.edit(llama, tmp_path, rope_parameters={"rope_type": "wobbly", "rope_theta": 1e4, "factor": 4.0})
        with pytest.raises(ModelError, match=r"config.json: rope parameters: rope_type 'wobbly' .*default, linear"):
            open_model(path)

    def test_heads_that_do_not_share(self, llama: DecoderReference, tmp_path: Path) -> None:
        """4 heads over 3 K/V heads cannot be grouped."""
        path = self.edit(llama, tmp_path, num_key_value_heads=3)
        with pytest.raises(ModelError, match="4 attention heads cannot be shared among 3 K/V heads"):
            open_model(path)

    def test_unknown_layer_type(self, llama: DecoderReference, tmp_path: Path) -> None:
        """layer_types other than sliding and full attention are refused."""
        path = self.edit(llama, tmp_path, sliding_window=4, layer_types=["chunked_attention"] * 3)
        with pytest.raises(ModelError, match="layer_types 'chunked_attention' is not supported"):
            open_model(path)

    def test_variants_cover_every_family(self) -> None:
        """Each supported decoder family has a tiny checkpoint in these tests."""
        from attnx.models import ARCHITECTURES
        from attnx.models.decoder import Decoder

        decoders = {name for name, family in ARCHITECTURES.items() if issubclass(family, Decoder)}
        assert {v.family for v in VARIANTS.values()} == decoders and "llama" in decoders


class TestOverrides:
    """Command-line settings on a decoder layer keep what they do not change."""

    def test_rope_pairs_keep_the_checkpoint_theta_and_scaling(self, llama: DecoderReference) -> None:
        """--rope-pairs interleaved on Llama: θ 500 and the llama3 scaling stay; only the pairing changes."""
        from attnx.core.overrides import SettingOverrides

        spec = SettingOverrides(rope_pairs="interleaved").apply(load_model_spec(llama.path, TEXT, 0))
        rotary = spec.settings.rotary
        assert rotary is not None and rotary.pairs == "interleaved" and rotary.theta == 500.0
        assert rotary.scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 32)

    def test_window_override(self, llama: DecoderReference) -> None:
        """--window 2 on a layer without one: each query sees itself and the key before it."""
        from attnx.core.overrides import SettingOverrides
        from attnx.engines import compute

        spec = SettingOverrides(window=2).apply(load_model_spec(llama.path, TEXT, 2))
        weights = compute(spec, "numpy").weights
        assert spec.settings.window == 2 and np.count_nonzero(weights[0]) == 2 * len(spec.tokens) - 1


class TestLaziness:
    """A decoder layer reads the layers before it and its own attention, nothing else."""

    def test_only_the_layers_needed_are_read(self, llama: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """Layer 1 of the sharded Llama: layer 0 whole, layer 1's norm and attention, no layer 2, no final norm,
        the embedding table by rows only, and only the shards that hold those tensors opened."""
        from attnx.models.checkpoint import Checkpoint

        read: list[str] = []
        opened: list[Path] = []
        original_slice, original_open = Checkpoint._slice, Checkpoint._open

        def spy_slice(self: Checkpoint, name: str, *alternatives: str, **options: Any) -> object:
            read.append(name)
            return original_slice(self, name, *alternatives, **options)

        def spy_open(self: Checkpoint, path: Path) -> object:
            opened.append(path)
            return original_open(self, path)

        monkeypatch.setattr(Checkpoint, "_slice", spy_slice)
        monkeypatch.setattr(Checkpoint, "_open", spy_open)
        load_model_spec(llama.path, TEXT, 1)
        assert not [name for name in read if name.startswith("layers.2.") or name == "norm.weight"]
        assert {n for n in read if n.startswith("layers.1.")} == {
            "layers.1.input_layernorm.weight",
            *(f"layers.1.self_attn.{p}_proj.{kind}" for p in "qkvo" for kind in ("weight", "bias")),
        }
        assert "layers.0.mlp.down_proj.weight" in read
        index = json.loads((llama.path / "model.safetensors.index.json").read_text())["weight_map"]
        needed = {index["model." + name] for name in read}
        assert {path.name for path in opened} == needed < set(index.values())


class TestGemmaActivation:
    """Gemma reads hidden_act, and takes "gelu" as the tanh approximation, as transformers' Gemma does."""

    def test_gelu_means_tanh(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        gemma = built("gemma", tmp_path_factory)
        path = Path(shutil.copytree(gemma.path, tmp_path / "gemma"))
        config = json.loads((path / "config.json").read_text()) | {"hidden_act": "gelu", "hidden_activation": "relu"}
        (path / "config.json").write_text(json.dumps(config))
        assert describe(path).activation == "gelu_pytorch_tanh"
