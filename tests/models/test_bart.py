"""BART and mBART against transformers: every layer of both stacks, each of the three attention kinds."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnx.engines.placement import NUMPY, Placement
from attnx.errors import ModelError
from attnx.models import describe, open_model
from attnx.models.stacks import AttentionKind, Memory
from tests.models.checkpoints import TEXT
from tests.models.encoder_decoders import TARGET, Seq2SeqReference, assert_agrees, assert_two_stacks
from tests.models.test_decoders import assert_close
from tests.models.test_t5 import encoder_decoder
from tests.runner import run_attnx


def agree(reference: Seq2SeqReference, dtype: str, on: Placement = NUMPY) -> None:
    """attnx's three kinds per layer, each block's output, the encoder's output and the logits equal transformers'."""
    with open_model(reference.path, dtype) as model:
        ours = encoder_decoder(model, on)
    config = reference.variant.config
    counts = [config["encoder_layers"], config["decoder_layers"], config["decoder_layers"]]
    assert [len(ours[kind]) for kind in ("encoder", "decoder", "cross")] == counts
    assert_agrees(ours, reference, dtype)


def rewrite(path: Path, into: Path, **changes: object) -> Path:
    """A copy of the checkpoint ``path`` at ``into`` with ``changes`` made to its config.json."""
    shutil.copytree(path, into)
    config = json.loads((into / "config.json").read_text())
    (into / "config.json").write_text(json.dumps({**config, **changes}))
    return into


class TestAgreement:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_every_layer_every_kind(self, bart_like: Seq2SeqReference, dtype: str) -> None:
        """The encoder's self-attention, the decoder's causal self-attention and its cross-attention, each block's
        output, the encoder's output and the logits equal transformers' (1e-5 in float32, 1e-10 in float64)."""
        agree(bart_like, dtype)

    def test_torch_engine(self, bart: Seq2SeqReference) -> None:
        """On the torch engine in float32 the three kinds, the blocks and the logits agree with transformers too."""
        pytest.importorskip("torch")
        agree(bart, "float32", Placement("torch"))

    def test_the_logits_bias_is_added(self, bart: Seq2SeqReference) -> None:
        """``final_logits_bias`` (not zero in the fixture) is in the logits: without it they would differ."""
        from safetensors.numpy import load_file

        bias = load_file(str(bart.path / "model.safetensors"))["final_logits_bias"]
        assert np.abs(bias).max() > 0.1


class TestShape:
    def test_two_stacks_three_kinds(self, bart: Seq2SeqReference) -> None:
        """BART is an encoder (self-attention) and a decoder (causal self-attention, then cross-attention over the
        encoder), each with its own head count."""
        with open_model(bart.path) as model:
            assert_two_stacks(model)
            encoder, decoder = model.stacks
            source = model.run(TEXT, stack=encoder)
            assert source.spec().settings.heads == 3
            memory = Memory(source.finish(), source.tokens)
            target = model.run(model.encode_target(TARGET), stack=decoder, memory=memory)
            assert target.spec().settings.heads == 5 and target.spec().settings.causal

    def test_decoder_reads_the_target_shifted_right(self, bart: Seq2SeqReference) -> None:
        """BART's decoder reads ``</s>`` (decoder_start_token_id 2), then the target's tokens but its last."""
        with open_model(bart.path) as model:
            shifted = model.encode_target(TARGET)
        assert shifted.ids.tolist() == bart.decoder_ids
        assert shifted.ids[0] == 2 and shifted.tokens[0] == "</s>" and shifted.tokens[1] == "<s>"

    def test_mbart_starts_from_the_language_code(self, mbart: Seq2SeqReference) -> None:
        """mBART's decoder reads the target's language code first (transformers' shift of the labels), then the
        target's tokens and ``</s>``."""
        with open_model(mbart.path) as model:
            shifted = model.encode_target(TARGET)
            source = model.encode(TEXT)
        assert shifted.ids.tolist() == mbart.decoder_ids
        assert shifted.tokens[0] == "en_XX" and shifted.tokens[-1] == "</s>"
        assert source.tokens[-2:] == ("</s>", "en_XX")

    def test_describe(self, mbart: Seq2SeqReference) -> None:
        """`describe` names the family, its design and both stacks."""
        info = describe(mbart.path)
        assert (info.architecture, info.family, info.layers, info.heads, info.d_model) == ("mbart", "mBART", 2, 3, 30)
        assert info.design.startswith("pre-LN") and [s.name for s in info.stacks] == ["encoder", "decoder"]
        assert info.tied_embeddings is True

    def test_model_names_each_stacks_heads(self, bart: Seq2SeqReference) -> None:
        """`attnx model` gives the decoder's 5 heads beside the model's 3 (the encoder's), and JSON each stack's."""
        out = run_attnx("model", str(bart.path), env={"COLUMNS": "100"})
        assert out.code == 0, out.stderr
        assert "decoder     3 layers × 5 heads · causal self-attention, then cross-attention" in out.stdout
        assert "encoder     2 layers · self-attention\n" in out.stdout
        data = json.loads(run_attnx("model", str(bart.path), "--format", "json").stdout)
        assert [stack["heads"] for stack in data["stacks"]] == [3, 5]


class TestRefused:
    @pytest.mark.parametrize(
        ("key", "value"),
        [("normalize_before", True), ("add_final_layer_norm", True), ("add_bias_logits", True),
         ("normalize_embedding", False), ("static_position_embeddings", True)],
    )  # fmt: skip
    def test_a_key_of_another_variant(self, bart: Seq2SeqReference, tmp_path: Path, key: str, value: object) -> None:
        """An older config's key that says BART computes something else is a ModelError naming it."""
        path = rewrite(bart.path, tmp_path / "b", **{key: value})
        with pytest.raises(ModelError, match=rf"{key} {value!r} is not what BART computes"):
            describe(path)

    def test_mbarts_own_keys_pass(self, mbart: Seq2SeqReference, tmp_path: Path) -> None:
        """mBART's config may say what it computes: pre-LN and final norms."""
        path = rewrite(mbart.path, tmp_path / "m", normalize_before=True, add_final_layer_norm=True)
        assert describe(path).architecture == "mbart"

    def test_more_layers_than_held(self, bart: Seq2SeqReference, tmp_path: Path) -> None:
        """A config claiming more decoder layers than the weights hold is refused before anything is built."""
        path = rewrite(bart.path, tmp_path / "b", decoder_layers=4)
        with pytest.raises(ModelError, match=r"decoder_layers claims 4 layers, but .* holds 3"):
            describe(path)

    def test_heads_that_do_not_split_the_width(self, bart: Seq2SeqReference, tmp_path: Path) -> None:
        """Decoder heads that do not divide d_model are refused."""
        path = rewrite(bart.path, tmp_path / "b", decoder_attention_heads=4)
        with pytest.raises(ModelError, match="not divisible by 4 heads"):
            describe(path)

    def test_a_wider_vocabulary_than_held(self, bart: Seq2SeqReference, tmp_path: Path) -> None:
        """A vocabulary larger than the token table is refused from the tensor's header."""
        path = rewrite(bart.path, tmp_path / "b", vocab_size=10_000)
        with pytest.raises(ModelError, match="has shape"):
            describe(path)


class TestDecoderAlone:
    def test_causal_lm_as_transformers(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """``BartForCausalLM`` is one causal stack whose cross-attentions never run: its weights per layer and its
        logits equal transformers' (run without an encoder, as it is)."""
        torch = pytest.importorskip("torch")
        import transformers

        from tests.models.checkpoints import gpt2_tokenizer
        from tests.models.test_task_heads import saved

        path = saved("BartForCausalLM", "bart", tmp_path_factory)
        ids = gpt2_tokenizer().encode(TEXT).ids
        loaded = transformers.BartForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
        with torch.no_grad():
            out = loaded(
                torch.tensor([ids]), output_attentions=True, use_cache=False
            )  # its cache counts encoder layers
        with open_model(path, "float32") as model:
            (stack,) = model.stacks
            assert (stack.name, [a.kind for a in stack.attentions]) == ("decoder", [AttentionKind.CAUSAL_SELF])
            assert model.architecture.decoder_start is None
            forward = model.run(TEXT)
            weights = [forward.step({"weights"}).weights for _ in range(stack.layers)]
            logits = model.architecture.logits(forward.finish())
        for ours, theirs in zip(weights, out.attentions, strict=True):
            assert_close(ours, theirs[0].numpy(), "float32")
        assert_close(logits, out.logits[0].numpy(), "float32")


class TestSiteSpec:
    def test_cross_attention_by_address(self, bart: Seq2SeqReference) -> None:
        """``workflows.site_spec`` with ``Address(1, "decoder", CROSS)`` and a target gives decoder layer 1's
        cross-attention: target × source, 5 heads, its weights transformers'."""
        from attnx.engines import compute
        from attnx.models.stacks import Address
        from attnx.workflows.layers import site_spec

        with open_model(bart.path, "float64") as model:
            spec = site_spec(model, TEXT, Address(1, "decoder", AttentionKind.CROSS), target=TARGET)
        assert spec.source.endswith("decoder layer 1 of 3, cross-attention") and spec.settings.heads == 5
        assert (len(spec.tokens), len(spec.key_tokens)) == (len(bart.decoder_ids), len(bart.source_ids))
        weights = compute(spec, needs={"weights"}).weights
        assert_close(weights, bart.attentions["float64"]["cross"][1], "float64")


class TestTiedCopies:
    def test_a_file_holding_every_copy(self, bart: Seq2SeqReference, tmp_path: Path) -> None:
        """A tied file that also holds the copies (``encoder.embed_tokens``, ``decoder.embed_tokens``, ``lm_head``,
        as older saves do) opens, reads them, and still equals transformers."""
        from safetensors.numpy import load_file, save_file

        path = Path(shutil.copytree(bart.path, tmp_path / "b"))
        tensors = load_file(str(path / "model.safetensors"))
        shared = tensors["model.shared.weight"]
        copies = {"model.encoder.embed_tokens.weight": shared, "model.decoder.embed_tokens.weight": shared,
                  "lm_head.weight": shared}  # fmt: skip
        save_file({**tensors, **copies}, str(path / "model.safetensors"), metadata={"format": "pt"})
        with open_model(path) as model:
            assert model.architecture.table("encoder") == "encoder.embed_tokens.weight"
            assert model.architecture.output_tensor().name == "lm_head.weight"
        agree(dataclasses.replace(bart, path=path), "float64")
