"""The families package and the decoder's hooks: never silently wrong, rope in both forms, a family in one file.

Never silently wrong: a tensor the family would not read, ``architectures`` that disagree with ``model_type``, and
a config key that changes the model but is not read are each refused. Rope settings are read flat or nested by
layer type. A family is one file of hooks: a fused one (Phi-3's layout over Qwen 2's weights) is tested here.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnx.core.positions import RopeScaling, Rotary
from attnx.errors import ModelError
from attnx.models import ARCHITECTURES, describe, open_model
from attnx.models.architecture import weights_and_biases
from attnx.models.checkpoint import Checkpoint
from attnx.models.decoder import Decoder, Row
from attnx.models.families.bert import Bert
from attnx.models.families.gemma import Gemma, Gemma2
from attnx.models.families.gpt2 import Gpt2
from attnx.models.families.llama import Llama, Qwen2
from attnx.workflows import load_model_spec
from tests.models.checkpoints import TEXT, Reference, gpt2_tokenizer
from tests.models.decoders import SIZES, DecoderReference, built
from tests.models.test_checkpoint import edit_config
from tests.models.test_decoders import assert_close, forward
from tests.runner import run_attnx


def copy_of(reference: DecoderReference | Reference, tmp_path: Path) -> Path:
    """A writable copy of a checkpoint folder."""
    return Path(shutil.copytree(reference.path, tmp_path / reference.path.name))


def rewrite(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to model.safetensors' tensors (torch tensors: bfloat16 too) and save them again."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path / "model.safetensors")
    change(tensors)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})


def add_tensor(path: Path, name: str, like: str) -> None:
    """Store a copy of tensor ``like`` as ``name``."""
    rewrite(path, lambda tensors: tensors.__setitem__(name, tensors[like].clone()))


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gemma 3 (``gemma3_text``, saved by transformers): QK-norm tensors, rope parameters by layer type."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gemma3")
    tokenizer = gpt2_tokenizer()
    config = transformers.AutoConfig.for_model(
        "gemma3_text", vocab_size=tokenizer.get_vocab_size(), **SIZES, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, sliding_window=4,
    )  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return path


class TestUnusedTensors:
    """A tensor of the checkpoint that the family would not read is refused, naming it."""

    @pytest.mark.parametrize(
        ("fixture", "name", "like"),
        [
            ("gpt2", "transformer.h.1.attn.c_extra.weight", "transformer.h.1.attn.c_proj.weight"),
            ("bert", "bert.encoder.layer.2.attention.self.extra.bias", "bert.encoder.layer.2.attention.self.key.bias"),
        ],
    )
    def test_bert_and_gpt2(
        self, request: pytest.FixtureRequest, tmp_path: Path, fixture: str, name: str, like: str
    ) -> None:
        """An extra tensor in a BERT or GPT-2 file is named, with the family."""
        path = copy_of(request.getfixturevalue(fixture), tmp_path)
        add_tensor(path, name, like)
        family = ARCHITECTURES[fixture]
        with pytest.raises(
            ModelError, match=rf"model.safetensors: tensor '{name}' is not used by {fixture} \({family.family}\): "
        ):
            describe(path)

    def test_extra_tensor_exits_2_naming_it(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A hand-edited Qwen 3 with one tensor more: `attnx model` exits 2 in one line that names it."""
        path = copy_of(built("qwen3", tmp_path_factory), tmp_path)
        add_tensor(path, "model.layers.1.self_attn.v_norm.weight", "model.layers.1.self_attn.k_norm.weight")
        out = run_attnx("model", str(path))
        assert out.code == 2 and out.stderr.count("\n") == 1
        assert (
            "tensor 'model.layers.1.self_attn.v_norm.weight' is not used by qwen3 (Qwen 3): attnx would run"
            in out.stderr
        )
        assert out.stderr.endswith("so config.json and the weights disagree\n")  # a GGUF file says its metadata

    def test_layers_past_the_config(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A config that counts fewer layers than the file holds: the first tensor left is named, the rest counted."""
        path = copy_of(built("qwen3", tmp_path_factory), tmp_path)
        edit_config(path, num_hidden_layers=2, layer_types=None)
        with pytest.raises(
            ModelError, match=r"'model.layers.2.input_layernorm.weight' .*, nor 10 more \(model\.layers\.\*\.mlp"
        ):
            describe(path)

    def test_allowed_tensors(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A tied copy of the embeddings as lm_head and a rotary cache are allowed, and change nothing."""
        reference = built("qwen3", tmp_path_factory)
        path = copy_of(reference, tmp_path)
        add_tensor(path, "lm_head.weight", "model.embed_tokens.weight")
        add_tensor(path, "model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers.0.self_attn.q_norm.weight")
        weights, _ = forward(path, "float64")
        assert_close(weights[2], reference.attentions["float64"][2], "float64")


class TestTensorAccounting:
    """What a family says it reads (``tensor_names``) is what a whole forward pass reads: the hooks and their twins
    agree, so the unused-tensor check neither misses nor invents a tensor."""

    def read_and_declared(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], set[str]]:
        """The tensors a forward pass, the final norm and the logits read; those the family declares and the file holds."""
        read: set[str] = set()
        original = Checkpoint._slice

        def spy(self: Checkpoint, name: str, *alternatives: str, **options: Any) -> tuple[Any, str]:
            part, full = original(self, name, *alternatives, **options)
            read.add(full)
            return part, full

        monkeypatch.setattr(Checkpoint, "_slice", spy)
        with open_model(path) as model:
            arch = model.architecture
            hidden = model.run(TEXT, layer=model.layers - 1).finish()
            if arch.has_lm_head:
                arch.logits(hidden)
            declared = {model.checkpoint.prefix + n for n in arch.tensor_names()} | set(arch.outside)
            return read, declared & model.checkpoint.keys()

    def test_decoders(self, decoder: DecoderReference, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each decoder reads exactly the tensors it declares that its file holds."""
        read, declared = self.read_and_declared(decoder.path, monkeypatch)
        assert read == declared and len(read) > 20

    def test_bert_and_gpt2(self, checkpoint: Reference, monkeypatch: pytest.MonkeyPatch) -> None:
        """So do BERT and GPT-2 (bare and prefixed)."""
        read, declared = self.read_and_declared(checkpoint.path, monkeypatch)
        assert read == declared and len(read) > 20


class TestRelabelled:
    """A Gemma 3 relabelled by hand is refused, not run with weights off by 0.93-1.0 (issue 36)."""

    def relabel(self, gemma3: Path, tmp_path: Path, **changes: object) -> Path:
        """A copy of the Gemma 3 with config.json changed."""
        path = Path(shutil.copytree(gemma3, tmp_path / "gemma3"))
        edit_config(path, **changes)
        return path

    def test_as_gemma2_names_q_norm(self, gemma3: Path, tmp_path: Path) -> None:
        """model_type and architectures both say Gemma 2: the QK-norm tensors Gemma 2 lacks are named."""
        path = self.relabel(gemma3, tmp_path, model_type="gemma2", architectures=["Gemma2ForCausalLM"])
        with pytest.raises(ModelError, match=r"tensor 'model\.layers\.0\.self_attn\.k_norm\.weight' is not used by "
                                             r"gemma2 \(Gemma 2\), nor 5 more \(.*self_attn\.q_norm\.weight\)"):  # fmt: skip
            open_model(path)

    def test_architectures_must_agree(self, gemma3: Path, tmp_path: Path) -> None:
        """model_type alone relabelled: Gemma3ForCausalLM is not a Gemma 2 class, and the message says so."""
        path = self.relabel(gemma3, tmp_path, model_type="gemma2")
        out = run_attnx("model", str(path))
        assert out.code == 2 and out.stderr.count("\n") == 1
        assert (
            "architectures names Gemma3ForCausalLM, not a gemma2 class (Gemma2ForCausalLM, Gemma2Model, …)"
            in out.stderr
        )


class TestArchitectures:
    """config.json's ``architectures`` names the family's classes, and agrees with ``model_type``."""

    @pytest.mark.parametrize(
        ("family", "name", "expected"),
        [
            (Llama, "LlamaForCausalLM", True), (Llama, "LlamaModel", True), (Gpt2, "GPT2LMHeadModel", True),
            (Bert, "BertForMaskedLM", True), (Gemma2, "Gemma2ForCausalLM", True), (Gemma, "Gemma2ForCausalLM", False),
            (Qwen2, "Qwen2MoeForCausalLM", False), (Llama, "LlamaForCausalLMWithValueHead", True),
            (Llama, "Llama4ForCausalLM", False), (Bert, "Bert", False),
        ],
    )  # fmt: skip
    def test_class_names(self, family: type, name: str, expected: bool) -> None:
        """A class is the family's when its stem is followed by Model, LMHeadModel or For…, nothing else."""
        assert family.names(name) is expected

    def test_mismatch(self, llama: DecoderReference, tmp_path: Path) -> None:
        """A Llama config that names MistralForCausalLM is refused: attnx does not pick one."""
        path = copy_of(llama, tmp_path)
        edit_config(path, architectures=["MistralForCausalLM"])
        with pytest.raises(ModelError, match=r"config.json: architectures names MistralForCausalLM, not a llama class"):
            open_model(path)

    def test_family_from_architectures(self, gemma2: DecoderReference, tmp_path: Path) -> None:
        """Without model_type, Gemma2ForCausalLM is Gemma 2, not Gemma."""
        path = copy_of(gemma2, tmp_path)
        edit_config(path, model_type=None)
        assert describe(path).architecture == "gemma2"


class TestConfigKeys:
    """A config key that changes the model and that the family does not read is refused, not left at a default."""

    @pytest.mark.parametrize(
        ("name", "changes", "message"),
        [
            ("llama", {"sliding_window": 4}, r"sliding_window 4 is not read by llama \(Llama\), and it would change"),
            ("qwen3", {"final_logit_softcapping": 30.0}, "final_logit_softcapping 30.0 is not read by qwen3"),
            ("gemma", {"use_bidirectional_attention": True}, "use_bidirectional_attention True is not read by gemma"),
            ("gemma2", {"rope_local_base_freq": 10000.0}, "rope_local_base_freq 10000.0 is not read by gemma2"),
            ("llama", {"partial_rotary_factor": 0.5}, r"partial_rotary_factor 0.5 is not read by llama \(Llama\)"),
            ("mistral", {"layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
             "layer_types disagrees with Mistral's layers"),
            ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
             "rope_scaling and rope_parameters are both set and differ"),
        ],
    )  # fmt: skip
    def test_refused(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, name: str, changes: dict, message: str
    ) -> None:
        """Each is one ModelError naming the key."""
        path = copy_of(built(name, tmp_path_factory), tmp_path)
        edit_config(path, **changes)
        with pytest.raises(ModelError, match=f"config.json: {message}"):
            describe(path)

    def test_qwen2_windows_need_use_sliding_window(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
    ) -> None:
        """use_sliding_window false turns Qwen 2's windows off, whatever layer_types lists (as transformers reads it)."""
        path = copy_of(built("qwen2", tmp_path_factory), tmp_path)
        edit_config(path, use_sliding_window=False)
        assert describe(path).windows == (None, None, None)

    def test_window_default(self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        """A Mistral config without sliding_window slides by transformers' default, 4096 keys, on every layer."""
        path = copy_of(built("mistral", tmp_path_factory), tmp_path)
        edit_config(path, sliding_window=None)
        assert describe(path).windows == (4096, 4096, 4096)


class LocalGemma2(Gemma2):
    """Gemma 2 reading a flat config's ``rope_local_base_freq`` for its sliding layers, as Gemma 3 does."""

    local_rope = ("rope_local_base_freq", 10000.0)
    reads = Gemma2.reads | {"rope_local_base_freq"}


class TestRope:
    """Rope settings read from either config form, one ``Rotary`` per layer type."""

    def test_flat_and_nested_agree(self, llama: DecoderReference, tmp_path: Path) -> None:
        """Llama's nested rope_parameters, written the older way (rope_theta beside rope_scaling), reads the same."""
        path = copy_of(llama, tmp_path)
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 32}  # fmt: skip
        edit_config(path, rope_parameters=None, rope_theta=500.0, rope_scaling=scaling)
        expected = Rotary(theta=500.0, scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 32))
        assert describe(path).rotaries == describe(llama.path).rotaries == (expected,) * 3

    def test_nested_by_layer_type(self, gemma2: DecoderReference, tmp_path: Path) -> None:
        """rope_parameters keyed by layer type: sliding layers 0 and 2 by θ 10 000, the full layer 1 by θ 10⁶ ×8."""
        path = copy_of(gemma2, tmp_path)
        full = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
        edit_config(path, rope_parameters={"full_attention": full, "sliding_attention": {"rope_theta": 1e4}})
        local, wide = Rotary(theta=1e4), Rotary(theta=1e6, scaling=RopeScaling("linear", 8.0))
        assert describe(path).rotaries == (local, wide, local)
        assert load_model_spec(path, TEXT, 1).settings.rotary == wide

    def test_nested_needs_every_type(self, gemma2: DecoderReference, tmp_path: Path) -> None:
        """A nested object without the sliding layers' entry is refused, naming them."""
        path = copy_of(gemma2, tmp_path)
        edit_config(path, rope_parameters={"full_attention": {"rope_theta": 1e6}})
        with pytest.raises(ModelError, match="rope_parameters has no entry for the sliding_attention layers"):
            describe(path)

    def test_local_base_as_transformers_reads_it(
        self, gemma2: DecoderReference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A family with ``local_rope`` reads a flat Gemma 3 config as transformers' Gemma3TextConfig does."""
        transformers = pytest.importorskip("transformers")
        monkeypatch.setitem(ARCHITECTURES, "gemma2", LocalGemma2)
        path = copy_of(gemma2, tmp_path)
        flat = {"rope_theta": 1e6, "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_local_base_freq": 5e3}
        edit_config(path, rope_parameters=None, **flat)
        config = json.loads((path / "config.json").read_text())
        theirs = transformers.Gemma3TextConfig.from_dict(config).rope_parameters
        types = config["layer_types"]
        expected = tuple(Rotary.from_config(theirs[t], head_dim=8, max_position_embeddings=64) for t in types)
        assert describe(path).rotaries == expected and expected[0].theta == 5e3 and expected[1].theta == 1e6


class FusedQwen2(Qwen2):
    """Qwen 2 stored with fused tensors, as Phi-3 stores them: ``qkv_proj`` ([q; k; v] rows) and ``gate_up_proj``."""

    def projections(self, layer: int) -> tuple[Any, Any, Any, Any]:
        p, d = self.attention_prefix(layer), self.d_model
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        w_q, w_k, w_v = self.fused(p + "qkv_proj", (q, kv, kv), d)
        return w_q, w_k, w_v, self.linear(p + "o_proj", d, q)

    def attention_tensors(self, layer: int) -> Iterator[str]:
        p = self.attention_prefix(layer)
        return weights_and_biases(p + "qkv_proj", p + "o_proj")

    def mlp(self, layer: int, x: np.ndarray) -> np.ndarray:
        p = self.layer_prefix(layer) + "mlp."
        gate_up = self.project(x, p + "gate_up_proj", 2 * self.d_ff)
        return self.project(self.act(gate_up[:, : self.d_ff]) * gate_up[:, self.d_ff :], p + "down_proj", self.d_model)

    def mlp_tensors(self, layer: int) -> Iterator[str]:
        p = self.layer_prefix(layer) + "mlp."
        return weights_and_biases(p + "gate_up_proj", p + "down_proj")


def fuse(tensors: dict[str, Any]) -> None:
    """Each layer's q, k and v projections stacked as ``qkv_proj``, gate and up as ``gate_up_proj``."""
    import torch

    layers = {name.split(".")[2] for name in tensors if name.startswith("model.layers.")}
    for layer in layers:
        p = f"model.layers.{layer}."
        for kind in ("weight", "bias"):
            parts = [tensors.pop(f"{p}self_attn.{n}_proj.{kind}") for n in "qkv"]
            tensors[f"{p}self_attn.qkv_proj.{kind}"] = torch.cat(parts)
        parts = [tensors.pop(f"{p}mlp.{n}_proj.weight") for n in ("gate", "up")]
        tensors[f"{p}mlp.gate_up_proj.weight"] = torch.cat(parts)


class TestHooks:
    """A family is one file of hooks over the decoder: a fused one here runs exactly as the unfused original."""

    def test_fused_tensors(
        self, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Qwen 2 with fused qkv_proj and gate_up_proj, split by the projections and MLP hooks: every layer's weights
        and hidden state equal transformers' on the unfused file within 1e-10 in float64."""
        reference = built("qwen2", tmp_path_factory)
        path = copy_of(reference, tmp_path)
        rewrite(path, fuse)
        with pytest.raises(ModelError, match=r"tensor 'model.layers.0.mlp.gate_up_proj.weight' is not used by qwen2"):
            open_model(path)
        monkeypatch.setitem(ARCHITECTURES, "qwen2", FusedQwen2)
        weights, hidden = forward(path, "float64")
        for ours, theirs in zip(
            [*weights, *hidden], [*reference.attentions["float64"], *reference.hidden["float64"]], strict=True
        ):
            assert_close(ours, theirs, "float64")

    def test_parallel_residual(self, llama: DecoderReference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """``parallel_residual``: the MLP reads the layer's input, x + attn(ln1 x) + mlp(ln2 x), as GPT-NeoX adds them."""

        class Parallel(Llama):
            parallel_residual = True

        monkeypatch.setitem(ARCHITECTURES, "llama", Parallel)
        with open_model(llama.path) as model:
            run = model.run(TEXT, layer=1)
            x = run.stream()
            attended = run.step().projected.astype(x.dtype)
            arch = model.architecture
            expected = x + attended + arch.mlp(0, arch.norm(x, "layers.0.post_attention_layernorm"))
            assert np.abs(run.stream() - expected).max() == 0 and type(arch) is Parallel

    def test_whole_projection_qk_norm_needs_its_tensors(
        self, llama: DecoderReference, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """QK-norm over the whole projection (OLMo 2) on a checkpoint without q_norm: refused, naming the tensor."""

        class Olmo(Llama):
            qk_norm_over = "projection"

        monkeypatch.setitem(ARCHITECTURES, "llama", Olmo)
        with pytest.raises(ModelError, match=r"q_norm\.weight"), open_model(llama.path) as model:
            model.run(TEXT, layer=0).step()

    def test_misspelt_hook_values_fail_on_definition(self) -> None:
        """A family whose ``sliding`` names no rule attnx has fails when its class is made, not when a model opens."""
        with pytest.raises(
            TypeError, match=r"Decoder\[odd\]\.sliding must be one of none, all, alternate, upper, got 'x'"
        ):
            Decoder.of(Row("odd", "Odd", ("Odd",), sliding="x"))
